package proxytest

import (
	"bytes"
	"io"
	"net/http"
	"time"
)

// MemEngine is a RoundTripper that answers every request with the same SSE
// body from memory, so that a benchmark measures the relay (or the whole
// gateway) and no I/O. It reads and drops the request body.
type MemEngine struct{ Body []byte }

// RoundTrip implements http.RoundTripper.
func (m MemEngine) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	return &http.Response{
		StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(bytes.NewReader(m.Body)), Request: r,
	}, nil
}

// DiscardWriter is a ResponseWriter that drops what it gets, can flush
// and takes write deadlines (as net/http's does, so that a benchmark does
// not count the error an unsupported deadline would make).
type DiscardWriter struct{ H http.Header }

func (d *DiscardWriter) Header() http.Header         { return d.H }
func (d *DiscardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *DiscardWriter) WriteHeader(int)             {}
func (d *DiscardWriter) Flush()                      {}

// SetWriteDeadline takes the deadline (http.ResponseController calls it).
func (d *DiscardWriter) SetWriteDeadline(time.Time) error { return nil }
