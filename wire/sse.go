package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// DoneData is the payload of the last event of an OpenAI stream: "data: [DONE]".
var DoneData = []byte("[DONE]")

// Event is one Server-Sent Event as read from a stream.
type Event struct {
	// Raw holds the event's exact bytes, including its terminating blank line
	// (or whatever trailing bytes the stream ended with).
	Raw []byte
	// Data is the event's data field: the values of its "data:" lines joined
	// by "\n", with the single optional space after the colon removed. It is
	// nil when the event has no data line (a comment or keep-alive).
	Data []byte
}

// IsDone reports whether the event is the stream's "[DONE]" terminator.
func (e Event) IsDone() bool { return bytes.Equal(e.Data, DoneData) }

// MaxEventBytes bounds one event, so that a broken upstream cannot make the
// reader buffer without limit.
const MaxEventBytes = 4 << 20

// ErrEventTooLarge is returned when one event exceeds MaxEventBytes.
var ErrEventTooLarge = errors.New("wire: SSE event larger than 4 MiB")

// EventReader splits a Server-Sent Events stream into events. Lines may end
// in "\n" or "\r\n"; an event ends at a blank line. The zero value is not
// usable; call NewEventReader.
type EventReader struct {
	br      *bufio.Reader
	raw     []byte
	data    []byte
	noWhole bool // tests: always take the general path
}

// readBufferSize is the reader's buffer. Events are usually well under
// 1 KiB; a longer line is read in pieces into the event's own slice, so the
// buffer bounds no event, and a small one keeps the memory per stream low.
const readBufferSize = 4 << 10

// NewEventReader returns a reader of the events in r.
func NewEventReader(r io.Reader) *EventReader {
	return &EventReader{br: bufio.NewReaderSize(r, readBufferSize)}
}

// Next returns the next event. The slices in the returned Event are valid
// until the next call. At the end of the stream it returns io.EOF; if the
// stream ended inside an event, that partial event is returned first with a
// nil error and its bytes in Raw, so a relay loses nothing.
func (r *EventReader) Next() (Event, error) {
	r.raw = r.raw[:0]
	r.data = r.data[:0]
	if !r.noWhole {
		if ev, ok, err := r.whole(); ok || err != nil {
			return ev, err
		}
	}
	hasData, hasField := false, false
	for {
		line, err := r.br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A line longer than the buffer: keep reading it piecewise.
			r.raw = append(r.raw, line...)
			if len(r.raw) > MaxEventBytes {
				return Event{}, ErrEventTooLarge
			}
			continue
		}
		start := len(r.raw)
		r.raw = append(r.raw, line...)
		if len(r.raw) > MaxEventBytes {
			return Event{}, ErrEventTooLarge
		}
		if err != nil {
			if len(r.raw) == 0 {
				return Event{}, err
			}
			if err == io.EOF {
				// The stream ended without a blank line: hand back what we
				// have; the following call reports io.EOF.
				r.parseLine(r.raw[lineStart(r.raw, start):], &hasData)
				return r.event(hasData), nil
			}
			return Event{}, err
		}
		full := r.raw[lineStart(r.raw, start):]
		content := trimEOL(full)
		if len(content) == 0 {
			if !hasField {
				// A blank line before any field ends nothing; its bytes stay
				// in Raw so that a relay forwards them too.
				continue
			}
			return r.event(hasData), nil
		}
		hasField = true
		r.parseLine(content, &hasData)
	}
}

// whole returns, without copying, an event of the most common shape (one
// "data:" line, then a blank line) that lies whole in the read buffer: its
// slices point into the buffer, which stays untouched until the next call.
// Any other shape or a partial event is left to Next's general path, which
// then starts from the same bytes. When the buffer is empty, whole reads
// first, as the general path would; a read that fails with nothing buffered
// ends the call with its error, as it would end the general path.
func (r *EventReader) whole() (Event, bool, error) {
	if r.br.Buffered() == 0 {
		if _, err := r.br.Peek(1); err != nil {
			return Event{}, false, err
		}
	}
	buf, _ := r.br.Peek(r.br.Buffered())
	i := bytes.IndexByte(buf, '\n')
	if i < 0 || !bytes.HasPrefix(buf, []byte("data:")) {
		return Event{}, false, nil
	}
	end := i + 1
	switch rest := buf[end:]; {
	case len(rest) >= 1 && rest[0] == '\n':
		end++
	case len(rest) >= 2 && rest[0] == '\r' && rest[1] == '\n':
		end += 2
	default:
		return Event{}, false, nil
	}
	data := trimEOL(buf[len("data:") : i+1])
	data = bytes.TrimPrefix(data, []byte(" "))
	ev := Event{Raw: buf[:end:end], Data: data[:len(data):len(data)]}
	_, _ = r.br.Discard(end)
	return ev, true, nil
}

// lineStart finds where the last line in raw begins, given that the bytes
// appended by the last read start at from. A long line read in pieces began
// earlier than from, so look back for the previous newline.
func lineStart(raw []byte, from int) int {
	if i := bytes.LastIndexByte(raw[:from], '\n'); i >= 0 {
		return i + 1
	}
	return 0
}

func trimEOL(line []byte) []byte {
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r"))
}

func (r *EventReader) parseLine(line []byte, hasData *bool) {
	line = trimEOL(line)
	value, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return // comments (":") and other fields carry no data
	}
	value = bytes.TrimPrefix(value, []byte(" "))
	if *hasData {
		r.data = append(r.data, '\n')
	}
	r.data = append(r.data, value...)
	*hasData = true
}

func (r *EventReader) event(hasData bool) Event {
	ev := Event{Raw: r.raw}
	if hasData {
		ev.Data = r.data
	}
	return ev
}

// AppendData appends one SSE data event carrying payload to dst:
// "data: <payload>\n\n". The payload must not contain a newline.
func AppendData(dst, payload []byte) []byte {
	dst = append(dst, "data: "...)
	dst = append(dst, payload...)
	return append(dst, '\n', '\n')
}

// WriteData writes one SSE data event carrying payload to w.
func WriteData(w io.Writer, payload []byte) error {
	_, err := w.Write(AppendData(make([]byte, 0, len(payload)+8), payload))
	return err
}
