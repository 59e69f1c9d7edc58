package proxy

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"
)

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
	var t reuseTrace
	return u.send(req.WithContext(t.install(req.Context())), &t)
}

// reuseTrace tells whether a request went out on a reused connection. A
// generation request installs it in the context its outbound request is
// built with (it lives in the exchange), so that sending costs no copy of
// the request.
type reuseTrace struct {
	reused atomic.Bool
	trace  httptrace.ClientTrace
}

// install returns ctx carrying the trace.
func (t *reuseTrace) install(ctx context.Context) context.Context {
	t.trace.GotConn = func(i httptrace.GotConnInfo) { t.reused.Store(i.Reused) }
	return httptrace.WithClientTrace(ctx, &t.trace)
}

// send sends req, whose context carries t (install), and sends it once
// more on a fresh connection when the reused one failed before any
// response byte (see upstream).
func (u *upstream) send(req *http.Request, t *reuseTrace) (*http.Response, error) {
	resp, err := u.pooled.RoundTrip(req)
	if err == nil || !t.reused.Load() || req.Context().Err() != nil || !replayable(req) {
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

// idleWatch bounds the silence of a response body: when a read waited for
// the bound with no byte, it cancels the request's context with
// errStreamIdle. Only time spent waiting in a read counts: while the relay
// is busy writing to a slow client it reads nothing, and that is the
// client's time (bounded by the client write timeout), not the engine's.
// A watch may start disarmed: a stream waits for its first token under the
// first-token timeout alone (a long prefill is silent), and is armed at it.
// Reads store two words; one timer checks them, re-arming itself for the
// rest of the bound, so a busy stream costs no timer operation per event.
type idleWatch struct {
	body    io.ReadCloser
	bound   time.Duration
	cancel  context.CancelCauseFunc
	start   time.Time
	armed   atomic.Bool
	waiting atomic.Bool  // a read is outstanding
	last    atomic.Int64 // when the outstanding read began or last returned bytes, since start
	timer   *time.Timer
}

// watchIdle wraps body; a zero bound returns body unwatched (and a nil
// watch, whose methods do nothing). The watch starts armed unless told.
func watchIdle(body io.ReadCloser, bound time.Duration, armed bool, cancel context.CancelCauseFunc) (io.ReadCloser, *idleWatch) {
	if bound <= 0 {
		return body, nil
	}
	w := &idleWatch{body: body, bound: bound, cancel: cancel, start: time.Now()}
	w.armed.Store(armed)
	w.waiting.Store(true) // the headers are in; the body has yet to come
	// check reads w.timer: set it before the timer can fire (Reset orders
	// the store before the callback).
	w.timer = time.AfterFunc(time.Hour, w.check)
	w.timer.Reset(bound)
	return w, w
}

// arm starts bounding the silence from now.
func (w *idleWatch) arm() {
	if w != nil && !w.armed.Load() {
		w.last.Store(int64(time.Since(w.start)))
		w.armed.Store(true)
	}
}

// stop ends the watch.
func (w *idleWatch) stop() {
	if w != nil {
		w.timer.Stop()
	}
}

func (w *idleWatch) check() {
	if !w.armed.Load() || !w.waiting.Load() {
		w.timer.Reset(w.bound) // before the first token, or the relay is writing
		return
	}
	silent := time.Since(w.start) - time.Duration(w.last.Load())
	if silent >= w.bound {
		w.cancel(errStreamIdle)
		return
	}
	w.timer.Reset(w.bound - silent)
}

func (w *idleWatch) Read(p []byte) (int, error) {
	w.last.Store(int64(time.Since(w.start)))
	w.waiting.Store(true)
	n, err := w.body.Read(p)
	w.waiting.Store(false)
	return n, err
}

func (w *idleWatch) Close() error { return w.body.Close() }

func isEventStream(h http.Header) bool {
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(h.Get("Content-Type"))), "text/event-stream")
}

// outbound builds the request to the engine: the same method, path, query
// and end-to-end headers, the (possibly rewritten) body with its exact
// length, and X-Forwarded-For as httputil.ReverseProxy sets it. The URL is
// the upstream's with the request's path and query, built as a value: no
// round trip through a string and url.Parse.
func (p *Proxy) outbound(ctx context.Context, in *http.Request, body []byte) (*http.Request, error) {
	out, err := http.NewRequestWithContext(ctx, in.Method, "", nil)
	if err != nil {
		return nil, err
	}
	u := out.URL // NewRequest's, parsed from "": filled in place
	*u = *p.cfg.Upstream
	u.Path, u.RawPath = joinPath(u.Path, in.URL.Path), ""
	if u.RawQuery == "" || in.URL.RawQuery == "" {
		u.RawQuery += in.URL.RawQuery
	} else {
		u.RawQuery += "&" + in.URL.RawQuery
	}
	u.Host = strings.TrimSuffix(u.Host, ":") // as NewRequest removes an empty port
	out.Host = u.Host
	if len(body) == 0 {
		out.Body, out.GetBody = http.NoBody, func() (io.ReadCloser, error) { return http.NoBody, nil }
	} else {
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	out.Header = in.Header.Clone()
	removeHopHeaders(out.Header)
	// The relay reads the engine's bytes: ask for them uncompressed.
	out.Header.Del("Accept-Encoding")
	out.Header.Del("Content-Length")
	out.ContentLength = int64(len(body))
	if ip, _, err := net.SplitHostPort(in.RemoteAddr); err == nil {
		if prior := out.Header.Values("X-Forwarded-For"); len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		out.Header.Set("X-Forwarded-For", ip)
	}
	return out, nil
}

func joinPath(a, b string) string {
	switch as, bs := strings.HasSuffix(a, "/"), strings.HasPrefix(b, "/"); {
	case as && bs:
		return a + b[1:]
	case !as && !bs:
		return a + "/" + b
	}
	return a + b
}

// hopHeaders are the hop-by-hop headers a proxy must not forward (RFC 9110
// section 7.6.1), as httputil.ReverseProxy lists them.
var hopHeaders = [...]string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = strings.TrimSpace(sf); sf != "" {
				h.Del(sf)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// copyResponseHeaders copies the engine's end-to-end headers to the client.
func copyResponseHeaders(dst, src http.Header) {
	for k, vv := range src {
		dst[k] = append(dst[k][:0:0], vv...)
	}
	removeHopHeaders(dst)
}
