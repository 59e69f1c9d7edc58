package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// exporter sends spans over OTLP/HTTP in protobuf as the official
// exporter (otlptracehttp) does, with its headers, compression and
// retries, but encodes them straight from the SDK's ended spans into
// buffers it reuses (encoder): the official one builds the generated
// proto messages first, a few allocations per attribute, and allocates
// the request's bytes anew per export. The queue stages spans as they end
// (Stage: encoded at once) and sends them in batches (Flush). The retries are the official
// exporter's: a 429, 502, 503 or 504 answer or a temporary network error
// is retried after an exponential backoff (5 s, 1.5x, up to 30 s, 50 %
// jitter) or the collector's Retry-After when longer, for a minute at
// most and within the export's context; anything else fails the export.
// A partial success (spans the collector rejected) fails it too, as it
// does there.
//
// Its methods are called by one goroutine at a time (queue.run).
type exporter struct {
	url    string
	header http.Header // every export's, Content-Type and User-Agent included
	gzip   bool
	client *http.Client

	enc encoder
	cur endedSpan // the span StageEnded encodes
	gz  *gzip.Writer
	gzb bytes.Buffer

	stopped atomic.Bool
	retry   retryPolicy
	wait    func(context.Context, time.Duration) error // between attempts: sleep
}

var (
	_ sdktrace.SpanExporter = (*exporter)(nil)
	_ stager                = (*exporter)(nil)
	_ endedStager           = (*exporter)(nil)
)

// retryPolicy is the official exporter's default retry configuration.
type retryPolicy struct {
	initial, max, maxElapsed time.Duration
}

var defaultRetry = retryPolicy{initial: 5 * time.Second, max: 30 * time.Second, maxElapsed: time.Minute}

// maxResponse bounds the collector's answer that is read (the official
// exporter's limit).
const maxResponse = 4 << 20

func newExporter(endpoint string, headers map[string]string, gz bool, client *http.Client) *exporter {
	h := http.Header{}
	h.Set("User-Agent", "OTel OTLP Exporter Go/"+otlptrace.Version())
	for k, v := range headers {
		h.Set(k, v)
	}
	h.Set("Content-Type", "application/x-protobuf")
	if gz {
		h.Set("Content-Encoding", "gzip")
	}
	return &exporter{url: endpoint, header: h, gzip: gz, client: client, retry: defaultRetry, wait: sleep}
}

// ExportSpans implements sdktrace.SpanExporter: it sends spans after
// those staged.
func (e *exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.Stage(spans)
	return e.Flush(ctx, e.enc.staged())
}

// Stage implements stager: the spans are encoded at once, and the SDK's
// objects are let go.
func (e *exporter) Stage(spans []sdktrace.ReadOnlySpan) { e.enc.stage(spans) }

// StageEnded implements endedStager: s is encoded at once, as Stage's spans.
func (e *exporter) StageEnded(s endedSpan) {
	e.cur = s
	e.enc.stageOne(&e.cur) // a pointer: s in an interface would allocate
	e.cur = endedSpan{}
}

// Flush implements stager: it sends the n oldest staged spans, which are
// unstaged whatever the outcome.
func (e *exporter) Flush(ctx context.Context, n int) error {
	n = min(n, e.enc.staged())
	body := e.enc.request(n)
	if e.stopped.Load() {
		return errors.New("tracing: exporter is shut down")
	}
	if n == 0 {
		return nil
	}
	if e.gzip {
		if e.gz == nil {
			e.gz = gzip.NewWriter(&e.gzb)
		}
		e.gzb.Reset()
		e.gz.Reset(&e.gzb)
		if _, err := e.gz.Write(body); err != nil {
			return err
		}
		if err := e.gz.Close(); err != nil {
			return err
		}
		body = e.gzb.Bytes()
	}
	open := new(atomic.Int32)
	err := e.send(ctx, body, open)
	if open.Load() != 0 {
		// The transport may still read a body after Do returns (it
		// closes it asynchronously): the next export must not write over
		// these bytes, so the buffers are let go.
		e.enc.b, e.gzb = nil, bytes.Buffer{}
		if e.gz != nil {
			e.gz.Reset(&e.gzb)
		}
	}
	return err
}

// send posts body, retrying as the official exporter does.
// open counts the bodies handed to the transport and not yet closed.
func (e *exporter) send(ctx context.Context, body []byte, open *atomic.Int32) error {
	began := time.Now()
	interval := e.retry.initial
	for {
		err := e.post(ctx, body, open)
		throttle, retry := retryable(err)
		if !retry {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", context.Cause(ctx), err)
		}
		if time.Since(began) > e.retry.maxElapsed {
			return fmt.Errorf("max retry time elapsed: %w", err)
		}
		// The backoff is randomized by +-50 % around the interval, which
		// grows 1.5x up to its bound; a longer Retry-After wins.
		backoff := time.Duration(float64(interval) * (0.5 + rand.Float64()))
		interval = min(time.Duration(float64(interval)*1.5), e.retry.max)
		if time.Since(began)+throttle > e.retry.maxElapsed {
			return fmt.Errorf("max retry time would elapse: %w", err)
		}
		if werr := e.wait(ctx, max(throttle, backoff)); werr != nil {
			return fmt.Errorf("%w: %w", werr, err)
		}
	}
}

// sleep waits d, or until ctx ends (its cause).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// retryError is an attempt that may be retried, after throttle at least.
type retryError struct {
	throttle time.Duration
	err      error
}

func (e *retryError) Error() string { return "retry-able request failure: " + e.err.Error() }
func (e *retryError) Unwrap() error { return e.err }

func retryable(err error) (time.Duration, bool) {
	var re *retryError
	if err == nil || !errors.As(err, &re) {
		return 0, false
	}
	return re.throttle, true
}

// post makes one attempt.
func (e *exporter) post(ctx context.Context, b []byte, open *atomic.Int32) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, nil)
	if err != nil {
		return err
	}
	req.Header = e.header.Clone()
	req.ContentLength = int64(len(b))
	if e.gzip {
		req.ContentLength = -1 // as the official exporter sends it: chunked
	}
	req.Body = newBody(b, open)
	req.GetBody = func() (io.ReadCloser, error) { return newBody(b, open), nil }
	resp, err := e.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) && ue.Temporary() {
			return &retryError{err: err}
		}
		return err
	}
	defer resp.Body.Close()
	var answer bytes.Buffer
	if _, err := io.Copy(&answer, io.LimitReader(resp.Body, maxResponse)); err != nil {
		return err
	}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return partial(resp.Header.Get("Content-Type"), answer.Bytes())
	}
	msg := bytes.TrimSpace(answer.Bytes())
	if len(msg) == 0 {
		msg = []byte("(empty)")
	}
	bodyErr := fmt.Errorf("body: %s", msg)
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return &retryError{throttle: retryAfter(resp.Header.Get("Retry-After")), err: bodyErr}
	}
	return fmt.Errorf("failed to send to %s: %s (%w)", e.url, resp.Status, bodyErr)
}

// partial reads a successful answer: a partial success (spans rejected,
// or a message) is an error.
func partial(contentType string, answer []byte) error {
	if len(answer) == 0 || contentType != "application/x-protobuf" {
		return nil
	}
	var r coltracepb.ExportTraceServiceResponse
	if err := proto.Unmarshal(answer, &r); err != nil {
		return err
	}
	if p := r.GetPartialSuccess(); p != nil && (p.GetRejectedSpans() != 0 || p.GetErrorMessage() != "") {
		return fmt.Errorf("OTLP partial success: %s (%d spans rejected)", p.GetErrorMessage(), p.GetRejectedSpans())
	}
	return nil
}

// retryAfter is a Retry-After's wait, in seconds or as a date; 0 when
// absent or malformed.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil && s >= 0 {
		return time.Duration(min(s, int64(1<<63-1)/int64(time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// body is a request body over the exporter's buffer that counts itself
// in open until the transport closes it.
type body struct {
	bytes.Reader
	open *atomic.Int32
	once sync.Once
}

func newBody(b []byte, open *atomic.Int32) *body {
	open.Add(1)
	r := &body{open: open}
	r.Reset(b)
	return r
}

func (b *body) Close() error {
	b.once.Do(func() { b.open.Add(-1) })
	return nil
}

// Shutdown implements sdktrace.SpanExporter: later exports fail. An
// export in flight is ended by its context (queue.run bounds it).
func (e *exporter) Shutdown(context.Context) error {
	e.stopped.Store(true)
	return nil
}
