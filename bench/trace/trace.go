package trace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Format is a trace's file format.
type Format int

// The formats.
const (
	// Auto detects the format from the first line: a CSV header, or a
	// JSON object with "arrival" (kneecap) or "timestamp" (Mooncake).
	Auto Format = iota
	Kneecap
	Azure
	Mooncake
)

func (f Format) String() string {
	switch f {
	case Kneecap:
		return "kneecap"
	case Azure:
		return "azure"
	case Mooncake:
		return "mooncake"
	}
	return "auto"
}

// ParseFormat reads a Format by its name.
func ParseFormat(s string) (Format, error) {
	for _, f := range []Format{Auto, Kneecap, Azure, Mooncake} {
		if strings.EqualFold(s, f.String()) {
			return f, nil
		}
	}
	return Auto, fmt.Errorf("trace format %q: want auto, kneecap, azure or mooncake", s)
}

// Request is one request of a trace.
type Request struct {
	// At is the arrival since the trace's first one.
	At time.Duration
	// Prompt and Output are token counts; Output 0 leaves max_tokens
	// unset.
	Prompt, Output int
	// Blocks are the prompt's prefix block ids, in order (Mooncake's
	// hash_ids, a request log's prefix hashes); nil: none known, the
	// prompt shares nothing.
	Blocks []uint64
	// Line is the request's line in its file (1-based).
	Line int
}

// Trace is a file's requests in order of arrival.
type Trace struct {
	File     string
	Format   Format
	Requests []Request
}

// Span is the time from the first arrival to the last.
func (t *Trace) Span() time.Duration {
	if len(t.Requests) == 0 {
		return 0
	}
	return t.Requests[len(t.Requests)-1].At - t.Requests[0].At
}

// Error is bad input in a trace: its file, line (0: the whole file) and
// field (empty: the line).
type Error struct {
	File  string
	Line  int
	Field string
	Err   error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("trace ")
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": field %s", e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// ReadFile reads the trace in the file name.
func ReadFile(name string, f Format) (*Trace, error) {
	file, err := os.Open(name)
	if err != nil {
		return nil, &Error{File: name, Err: err}
	}
	defer file.Close()
	return Read(name, file, f)
}

// maxLine bounds one line of a trace.
const maxLine = 16 << 20

// Read reads a trace of format f (Auto: detected) from r; name is the
// file's name in errors. A trace with no requests is an error.
func Read(name string, r io.Reader, f Format) (*Trace, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	if f == Auto {
		var err error
		if f, err = detect(name, br); err != nil {
			return nil, err
		}
	}
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	t := &Trace{File: name, Format: f}
	var err error
	switch f {
	case Kneecap:
		err = readKneecap(t, sc)
	case Azure:
		err = readAzure(t, sc)
	case Mooncake:
		err = readMooncake(t, sc)
	}
	if err == nil {
		err = sc.Err()
	}
	if err != nil {
		var te *Error
		if !errors.As(err, &te) {
			err = &Error{File: name, Err: err}
		}
		return nil, err
	}
	if len(t.Requests) == 0 {
		return nil, &Error{File: name, Err: errors.New("no requests")}
	}
	return t, nil
}

func detect(name string, br *bufio.Reader) (Format, error) {
	for n := 512; ; n *= 4 {
		head, err := br.Peek(n)
		if line, _, ok := bytes.Cut(head, []byte("\n")); ok || err != nil {
			line = bytes.TrimSpace(line)
			if !ok {
				line = bytes.TrimSpace(head)
			}
			switch {
			case len(line) == 0 && err != nil:
				return Auto, &Error{File: name, Err: errors.New("no requests")}
			case bytes.HasPrefix(line, []byte("{")) && bytes.Contains(line, []byte(`"arrival"`)):
				return Kneecap, nil
			case bytes.HasPrefix(line, []byte("{")):
				return Mooncake, nil
			case bytes.Contains(bytes.ToUpper(line), []byte("TIMESTAMP")):
				return Azure, nil
			case strings.EqualFold(filepath.Ext(name), ".csv"):
				return Azure, nil
			}
			return Auto, &Error{File: name, Line: 1, Err: errors.New("unknown format: want kneecap's request log, Azure's CSV (TIMESTAMP,ContextTokens,GeneratedTokens) or Mooncake's JSONL; name it with --trace-format")}
		}
		if n >= maxLine {
			return Auto, &Error{File: name, Line: 1, Err: errors.New("first line too long")}
		}
	}
}

// Window returns the requests arriving in [start, start+d) (d <= 0: to
// the end), re-based so that start is 0. An empty window is an error.
func (t *Trace) Window(start, d time.Duration) (*Trace, error) {
	out := &Trace{File: t.File, Format: t.Format}
	for _, r := range t.Requests {
		if r.At < start || (d > 0 && r.At >= start+d) {
			continue
		}
		r.At -= start
		out.Requests = append(out.Requests, r)
	}
	if len(out.Requests) == 0 {
		return nil, &Error{File: t.File, Err: fmt.Errorf("no requests from %s for %s (the trace spans %s)", start, d, t.Span())}
	}
	return out, nil
}

// Scale returns the trace with every arrival divided by speed (2: twice
// as fast) and every length multiplied by length (at least one token
// where it was one or more). Block ids are kept: Prompt cuts blocks of
// length x BlockTokens words then.
func (t *Trace) Scale(speed, length float64) *Trace {
	out := &Trace{File: t.File, Format: t.Format, Requests: make([]Request, len(t.Requests))}
	for i, r := range t.Requests {
		r.At = time.Duration(float64(r.At) / speed)
		r.Prompt = scaleLen(r.Prompt, length)
		r.Output = scaleLen(r.Output, length)
		out.Requests[i] = r
	}
	return out
}

func scaleLen(n int, f float64) int {
	if n <= 0 {
		return n
	}
	return max(1, int(float64(n)*f+0.5))
}

// CheckContext reports the first request whose prompt and output do not
// fit a context of n tokens (n <= 0: no check), naming its line.
func (t *Trace) CheckContext(n int) error {
	if n <= 0 {
		return nil
	}
	for _, r := range t.Requests {
		if r.Prompt+r.Output > n {
			return &Error{File: t.File, Line: r.Line, Field: "length",
				Err: fmt.Errorf("prompt %d + output %d tokens (after scaling) is beyond the engine's context of %d", r.Prompt, r.Output, n)}
		}
	}
	return nil
}
