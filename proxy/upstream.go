package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"
)

// DefaultUpstreamIdleTimeout is how long an idle connection to the engine
// is kept for reuse when the operator sets no other value: under the 5 s
// keep-alive of the engines' own servers (uvicorn as vLLM and SGLang run
// it, cpp-httplib under llama.cpp's server), so that the gateway gives up
// a connection before the engine closes it.
const DefaultUpstreamIdleTimeout = 4 * time.Second

// upstream carries requests to the engine. A request that failed on a
// reused keep-alive connection before any byte of a response arrived is
// sent once more on a fresh connection, as Envoy and nginx
// (proxy_next_upstream) do: the engine closed a connection that the pool
// still held (llama.cpp's server closes one after every streamed response
// although its headers promised keep-alive; every engine closes idle ones
// after its keep-alive timeout), and the request never reached it. A
// request whose response has begun is never sent again; one whose first
// try was on a fresh connection is not either (the engine is down or
// failed: its error is the answer).
type upstream struct {
	pooled  http.RoundTripper
	fresh   http.RoundTripper // a connection of its own per request
	retries atomic.Int64
}

func newUpstream(rt http.RoundTripper) *upstream {
	u := &upstream{pooled: rt, fresh: rt}
	if t, ok := rt.(*http.Transport); ok {
		f := t.Clone()
		f.DisableKeepAlives = true
		u.fresh = f
	}
	return u
}

// RoundTrip implements http.RoundTripper.
func (u *upstream) RoundTrip(req *http.Request) (*http.Response, error) {
	var reused atomic.Bool
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused.Store(i.Reused) }}
	first := req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	resp, err := u.pooled.RoundTrip(first)
	if err == nil || !reused.Load() || req.Context().Err() != nil || !replayable(req) {
		return resp, err
	}
	again := req.Clone(req.Context())
	if req.GetBody != nil {
		body, gerr := req.GetBody()
		if gerr != nil {
			return nil, err
		}
		again.Body = body
	}
	u.retries.Add(1)
	return u.fresh.RoundTrip(again)
}

// replayable reports whether the request's body can be sent again.
func replayable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// idleWatch bounds the silence of a response body: when no byte arrived
// for the bound, it cancels the request's context with errStreamIdle. Reads
// only store a time; one timer checks it, re-arming itself for the rest of
// the bound, so a busy stream costs no timer operation per event.
type idleWatch struct {
	body   io.ReadCloser
	bound  time.Duration
	cancel context.CancelCauseFunc
	start  time.Time
	last   atomic.Int64 // time of the last read that returned bytes, since start
	timer  *time.Timer
}

// watchIdle wraps body; a zero bound returns body unwatched and a no-op stop.
func watchIdle(body io.ReadCloser, bound time.Duration, cancel context.CancelCauseFunc) (io.ReadCloser, func()) {
	if bound <= 0 {
		return body, func() {}
	}
	w := &idleWatch{body: body, bound: bound, cancel: cancel, start: time.Now()}
	w.timer = time.AfterFunc(bound, w.check)
	return w, func() { w.timer.Stop() }
}

func (w *idleWatch) check() {
	silent := time.Since(w.start) - time.Duration(w.last.Load())
	if silent >= w.bound {
		w.cancel(errStreamIdle)
		return
	}
	w.timer.Reset(w.bound - silent)
}

func (w *idleWatch) Read(p []byte) (int, error) {
	n, err := w.body.Read(p)
	if n > 0 {
		w.last.Store(int64(time.Since(w.start)))
	}
	return n, err
}

func (w *idleWatch) Close() error { return w.body.Close() }
