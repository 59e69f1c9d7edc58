package wire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func readAll(t *testing.T, r io.Reader) (raws, datas []string) {
	t.Helper()
	er := NewEventReader(r)
	for {
		ev, err := er.Next()
		if errors.Is(err, io.EOF) {
			return raws, datas
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		raws = append(raws, string(ev.Raw))
		if ev.Data == nil {
			datas = append(datas, "<nil>")
		} else {
			datas = append(datas, string(ev.Data))
		}
	}
}

func TestEventReader(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		raws  []string
		datas []string
	}{
		{"two events", "data: {\"a\":1}\n\ndata: [DONE]\n\n",
			[]string{"data: {\"a\":1}\n\n", "data: [DONE]\n\n"}, []string{`{"a":1}`, "[DONE]"}},
		{"crlf", "data: x\r\n\r\n", []string{"data: x\r\n\r\n"}, []string{"x"}},
		{"no space after colon", "data:x\n\n", []string{"data:x\n\n"}, []string{"x"}},
		{"multi-line data", "data: a\ndata: b\n\n", []string{"data: a\ndata: b\n\n"}, []string{"a\nb"}},
		{"comment keep-alive", ": ping\n\ndata: y\n\n", []string{": ping\n\n", "data: y\n\n"}, []string{"<nil>", "y"}},
		{"event and id fields", "event: message\nid: 3\ndata: z\n\n", []string{"event: message\nid: 3\ndata: z\n\n"}, []string{"z"}},
		{"leading blank lines", "\n\ndata: q\n\n", []string{"\n\ndata: q\n\n"}, []string{"q"}},
		{"trailing blank line", "data: q\n\n\n", []string{"data: q\n\n", "\n"}, []string{"q", "<nil>"}},
		{"partial event at EOF", "data: a\n\ndata: trunc", []string{"data: a\n\n", "data: trunc"}, []string{"a", "trunc"}},
		{"complete line no blank at EOF", "data: a\n", []string{"data: a\n"}, []string{"a"}},
		{"empty", "", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, mode := range []string{"whole", "one byte"} {
				var r io.Reader = strings.NewReader(tt.in)
				if mode == "one byte" {
					r = iotest.OneByteReader(r)
				}
				raws, datas := readAll(t, r)
				if strings.Join(raws, "|") != strings.Join(tt.raws, "|") {
					t.Errorf("%s: raws = %q, want %q", mode, raws, tt.raws)
				}
				if strings.Join(datas, "|") != strings.Join(tt.datas, "|") {
					t.Errorf("%s: datas = %q, want %q", mode, datas, tt.datas)
				}
			}
		})
	}
}

func TestEventReaderLongLine(t *testing.T) {
	long := strings.Repeat("x", 100_000)
	raws, datas := readAll(t, strings.NewReader("data: "+long+"\n\ndata: b\n\n"))
	if len(raws) != 2 || datas[0] != long || datas[1] != "b" || raws[0] != "data: "+long+"\n\n" {
		t.Fatalf("long line not read whole: %d events", len(raws))
	}
}

// TestEventReaderBufferBoundary reads events whose lines end just before,
// at and just after the reader's buffer size, with "\n" and "\r\n" (so
// that a "\r" can end one buffer and its "\n" begin the next).
func TestEventReaderBufferBoundary(t *testing.T) {
	for _, eol := range []string{"\n", "\r\n"} {
		for _, n := range []int{readBufferSize - 9, readBufferSize - 8, readBufferSize - 7, readBufferSize - 6,
			readBufferSize, readBufferSize + 1, 2*readBufferSize - 7, 3 * readBufferSize} {
			payload := strings.Repeat("x", n)
			ev := "data: " + payload + eol + eol
			in := ev + ": c" + eol + eol + ev
			for _, r := range []io.Reader{strings.NewReader(in), iotest.HalfReader(strings.NewReader(in))} {
				raws, datas := readAll(t, r)
				if len(raws) != 3 || raws[0] != ev || raws[2] != ev || datas[0] != payload || datas[1] != "<nil>" || datas[2] != payload {
					t.Fatalf("eol %q, %d bytes: read %d events", eol, n, len(raws))
				}
			}
		}
	}
}

func TestEventReaderTooLarge(t *testing.T) {
	er := NewEventReader(strings.NewReader("data: " + strings.Repeat("x", MaxEventBytes+1) + "\n\n"))
	if _, err := er.Next(); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("err = %v, want ErrEventTooLarge", err)
	}
}

func TestEventIsDone(t *testing.T) {
	raws, _ := readAll(t, strings.NewReader("data: [DONE]\n\n"))
	er := NewEventReader(strings.NewReader(raws[0]))
	ev, _ := er.Next()
	if !ev.IsDone() {
		t.Fatal("[DONE] not recognised")
	}
}

func TestAppendData(t *testing.T) {
	if got := string(AppendData(nil, []byte(`{"a":1}`))); got != "data: {\"a\":1}\n\n" {
		t.Fatalf("AppendData = %q", got)
	}
}

// FuzzEventReader checks that the raw bytes of all events put together are
// exactly the input: a relay built on the reader never drops or invents a byte.
func FuzzEventReader(f *testing.F) {
	f.Add("data: a\n\ndata: b\r\n\r\n")
	f.Add("\n\n: c\n\ndata: [DONE]\n\n")
	f.Add("data: x")
	f.Fuzz(func(t *testing.T, in string) {
		er := NewEventReader(strings.NewReader(in))
		var got bytes.Buffer
		for i := 0; ; i++ {
			ev, err := er.Next()
			if err != nil {
				break
			}
			if len(ev.Raw) == 0 {
				t.Fatal("empty event returned")
			}
			got.Write(ev.Raw)
			if i > len(in)+1 {
				t.Fatal("reader does not make progress")
			}
		}
		if got.String() != in {
			t.Fatalf("relayed bytes %q differ from input %q", got.String(), in)
		}
	})
}

// TestEventReaderWholeMatchesGeneral reads many streams through the
// no-copy path for whole one-line events and through the general path
// alone, with readers that split the input in different ways or fail
// once: both give the same events and errors, in the same order.
func TestEventReaderWholeMatchesGeneral(t *testing.T) {
	inputs := []string{
		"data: {\"a\":1}\n\ndata: [DONE]\n\n",
		"data: x\r\n\r\ndata:y\n\n",
		"data:\n\ndata: \n\n",
		"data: a\ndata: b\n\ndata: c\n\n",
		": ping\n\ndata: y\n\n",
		"event: message\ndata: z\n\ndata: w\n\n",
		"\n\ndata: q\n\n",
		"data: q\n\n\n",
		"data: a\n\ndata: trunc",
		"data: a\n",
		"data: a\n\r",
		"data: a\r\n\n",
		"id: 1\n\n",
		strings.Repeat("data: "+strings.Repeat("x", 300)+"\n\n", 40),
		"data: " + strings.Repeat("y", 5000) + "\n\ndata: z\n\n",
		"",
	}
	readers := map[string]func(string) io.Reader{
		"whole":    func(s string) io.Reader { return strings.NewReader(s) },
		"one byte": func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
		"half":     func(s string) io.Reader { return iotest.HalfReader(strings.NewReader(s)) },
		"data+err": func(s string) io.Reader { return iotest.DataErrReader(strings.NewReader(s)) },
		"timeout":  func(s string) io.Reader { return iotest.TimeoutReader(strings.NewReader(s)) },
	}
	read := func(er *EventReader) []string {
		var out []string
		for range 1000 {
			ev, err := er.Next()
			if err != nil {
				out = append(out, "error "+err.Error())
				if err == io.EOF {
					return out
				}
				continue
			}
			d := "<nil>"
			if len(ev.Data) > 0 {
				d = string(ev.Data)
			}
			out = append(out, string(ev.Raw)+" | "+d)
		}
		return out
	}
	for _, in := range inputs {
		for name, mk := range readers {
			fast := read(NewEventReader(mk(in)))
			er := NewEventReader(mk(in))
			er.noWhole = true
			general := read(er)
			if strings.Join(fast, "\n--\n") != strings.Join(general, "\n--\n") {
				t.Errorf("%s, %.40q:\nwhole path: %q\ngeneral:    %q", name, in, fast, general)
			}
		}
	}
}

// TestEventReaderWholeIsolated: an event from the no-copy path cannot be
// grown into the bytes of the next one.
func TestEventReaderWholeIsolated(t *testing.T) {
	er := NewEventReader(strings.NewReader("data: a\n\ndata: b\n\n"))
	ev, err := er.Next()
	if err != nil || string(ev.Raw) != "data: a\n\n" || string(ev.Data) != "a" {
		t.Fatalf("first event %q %q %v", ev.Raw, ev.Data, err)
	}
	_ = append(ev.Raw, "XXXX"...)
	_ = append(ev.Data, "YYYY"...)
	ev, err = er.Next()
	if err != nil || string(ev.Raw) != "data: b\n\n" || string(ev.Data) != "b" {
		t.Fatalf("second event %q %q %v", ev.Raw, ev.Data, err)
	}
}
