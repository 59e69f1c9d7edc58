package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/slo"
	"github.com/kneecap/kneecap/wire"
)

// DefaultMaxBodyBytes bounds a generation request body when
// Config.MaxBodyBytes is zero.
const DefaultMaxBodyBytes = 16 << 20

// DefaultMaxBodyBytesTotal bounds the body bytes held across requests when
// Config.MaxBodyBytesTotal is zero.
const DefaultMaxBodyBytesTotal = 256 << 20

// Config configures a Proxy. Like httputil.ReverseProxy, every hook field
// says what nil means.
type Config struct {
	// Upstream is the engine's base URL (scheme, host and an optional path
	// prefix). Required.
	Upstream *url.URL
	// Transport carries requests to the engine. nil means
	// http.DefaultTransport. A request that failed on a reused connection
	// before any response byte arrived is sent once more on a fresh one
	// (see Proxy.Retries).
	Transport http.RoundTripper
	// Limiter caps generation requests running on the engine. nil means no
	// cap and no queue.
	Limiter *admission.Limiter
	// Targets are the operator's latency targets; requests may override
	// them with x-slo-*-ms headers as Headers allows.
	Targets slo.Targets
	// Headers bounds what a request's x-slo-*-ms headers may do to its
	// targets. The zero value lets them tighten or loosen freely.
	Headers slo.HeaderPolicy
	// Passthrough are paths outside the routing table (Routes) that the
	// operator opens: relayed as they are, never admitted. A trailing "*"
	// opens a prefix. Every other path outside the table gets a 404.
	Passthrough []string
	// MaxQueueWait bounds a request's time in the limiter's queue. Zero
	// means the request's own TTFT target (after overrides): a request
	// that waited that long would miss it anyway.
	MaxQueueWait time.Duration
	// FirstTokenTimeout bounds the time from forwarding a streamed request
	// to its first output chunk: 504 before the response headers, an SSE
	// error event after them. Zero means no bound. Non-streamed requests
	// have no observable first token and are not bounded by it.
	FirstTokenTimeout time.Duration
	// ResponseTimeout bounds the time from forwarding a request that is
	// not streamed to its response headers (engines answer such a request
	// when the whole generation is done): 504 beyond it. Zero means no
	// bound.
	ResponseTimeout time.Duration
	// StreamIdleTimeout bounds the silence of the engine's response body
	// once its headers arrived, streamed or not: no byte for that long and
	// the request ends with an SSE error event (504 when nothing was sent
	// yet). Zero means no bound.
	StreamIdleTimeout time.Duration
	// ClientWriteTimeout bounds each write to the client: a client that
	// does not take the bytes for that long is cut off and its slot freed.
	// Zero means no bound.
	ClientWriteTimeout time.Duration
	// MaxBodyBytes bounds a generation request body (413 beyond it). Zero
	// means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxBodyBytesTotal bounds the request body bytes held at once across
	// every request being read, queued or running: beyond it a request is
	// refused (429 body_budget) before more of its body is read. Zero
	// means DefaultMaxBodyBytesTotal.
	MaxBodyBytesTotal int64
	// Observer receives live measurements. nil means none; use Observers
	// to fan out to several.
	Observer Observer
	// Logger logs one line per failed request at Warn and per request at
	// Debug, never prompt or completion text. nil means no logs.
	Logger *slog.Logger
}

// Proxy relays OpenAI-compatible traffic to one engine, measuring and
// admitting generation requests. Create it with New; it is safe for
// concurrent use and starts no goroutines.
type Proxy struct {
	cfg       Config
	transport *upstream
	obs       Observer
	log       *slog.Logger
	pass      *httputil.ReverseProxy
	routes    *router
	bodies    *bodyBudget
	running   atomic.Int64 // generation requests forwarded and not ended
}

// New returns a Proxy. It fails only on a missing or unusable Upstream.
func New(cfg Config) (*Proxy, error) {
	if cfg.Upstream == nil || cfg.Upstream.Host == "" || (cfg.Upstream.Scheme != "http" && cfg.Upstream.Scheme != "https") {
		return nil, errors.New("proxy: Upstream must be an absolute http(s) URL")
	}
	p := &Proxy{cfg: cfg, obs: cfg.Observer, log: cfg.Logger}
	rt := cfg.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	p.transport = newUpstream(rt)
	if p.obs == nil {
		p.obs = nopObserver{}
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.cfg.MaxBodyBytes <= 0 {
		p.cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if p.cfg.MaxBodyBytesTotal <= 0 {
		p.cfg.MaxBodyBytesTotal = DefaultMaxBodyBytesTotal
	}
	for _, path := range cfg.Passthrough {
		if !ValidPassthroughPath(path) {
			return nil, fmt.Errorf("proxy: passthrough path %q must be a clean absolute path such as /v1/load_lora_adapter (a trailing * opens a prefix)", path)
		}
	}
	p.routes = newRouter(cfg.Passthrough)
	p.bodies = newBodyBudget(p.cfg.MaxBodyBytesTotal)
	up := cfg.Upstream
	p.pass = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(up)
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			pr.SetXForwarded()
		},
		Transport:     p.transport,
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client left; nobody to answer
			}
			p.log.Warn("passthrough failed", "path", r.URL.Path, "err", err)
			wire.WriteError(w, http.StatusBadGateway, wire.TypeServer, reasonUnreachable, "the engine could not be reached")
		},
	}
	return p, nil
}

// Running returns the number of generation requests forwarded to the
// engine and not yet ended.
func (p *Proxy) Running() int { return int(p.running.Load()) }

// Retries returns the number of requests sent to the engine a second time
// because their reused connection failed before any response byte.
func (p *Proxy) Retries() int64 { return p.transport.retries.Load() }

// servePassthrough relays a request to the engine unchanged (streamed
// responses flushed at once), not counted. A request body of known length
// up to MaxBodyBytes is read whole first (within the body budget), as on
// the generation routes, so that an engine answering before it read the
// body cannot break the stream (golang/go#40747); larger or chunked bodies
// (uploads) stream through as httputil.ReverseProxy relays them.
func (p *Proxy) servePassthrough(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > 0 && r.ContentLength <= p.cfg.MaxBodyBytes {
		held := p.bodies.reader(io.LimitReader(r.Body, r.ContentLength), r.ContentLength)
		defer held.release()
		body, err := readGrowing(held, r.ContentLength)
		if err == nil && int64(len(body)) < r.ContentLength {
			err = io.ErrUnexpectedEOF
		}
		switch {
		case errors.Is(err, errBodyBudget):
			writeBodyBudget(w)
			return
		case err != nil:
			if r.Context().Err() == nil {
				wire.WriteError(w, http.StatusBadRequest, wire.TypeInvalidRequest, reasonBadBody, "could not read the request body")
			}
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	p.pass.ServeHTTP(w, r)
}

// ServeHTTP is the traffic handler: it routes by the policy in Routes
// (see routes.go) on the canonical path, and sends the engine that path.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	canon := CanonicalPath(r.URL.Path)
	rt, ok := p.routes.match(canon)
	if !ok {
		wire.WriteError(w, http.StatusNotFound, wire.TypeInvalidRequest, reasonRouteNotFound,
			"no such route on this gateway (engine admin routes are closed unless the operator opens them)")
		return
	}
	if !rt.allows(r.Method) {
		w.Header().Set("Allow", strings.Join(rt.Methods, ", "))
		wire.WriteError(w, http.StatusMethodNotAllowed, wire.TypeInvalidRequest, reasonMethodNotAllowed,
			"method "+r.Method+" is not allowed on this route")
		return
	}
	if canon != r.URL.Path || r.URL.RawPath != "" {
		u := *r.URL
		u.Path, u.RawPath = canon, ""
		r.URL = &u
	}
	switch rt.Access {
	case Generation:
		p.serveGeneration(w, r, rt)
	case Admitted:
		p.serveAdmitted(w, r)
	default:
		p.servePassthrough(w, r)
	}
}

// serveAdmitted serves a route that costs engine time without a token
// stream (embeddings, rerank, ...): it holds a slot like a generation
// request (queued or refused alike) and is relayed as it is, not measured.
func (p *Proxy) serveAdmitted(w http.ResponseWriter, r *http.Request) {
	lim := p.cfg.Limiter
	if lim == nil {
		p.servePassthrough(w, r)
		return
	}
	targets, err := p.cfg.Headers.Apply(p.cfg.Targets, r.Header)
	if err != nil {
		wire.WriteError(w, http.StatusBadRequest, wire.TypeInvalidRequest, reasonBadHeader, err.Error())
		return
	}
	areq := admission.Request{Arrival: time.Now(), Targets: targets, MaxWait: p.maxWait(targets)}
	if re := lim.Precheck(areq); re != nil {
		writeReject(w, re)
		return
	}
	if r.ContentLength > p.cfg.MaxBodyBytes {
		wire.WriteError(w, http.StatusRequestEntityTooLarge, wire.TypeInvalidRequest, reasonBodyTooLarge,
			"request body larger than "+strconv.FormatInt(p.cfg.MaxBodyBytes, 10)+" bytes")
		return
	}
	ticket, err := lim.Acquire(r.Context(), areq)
	if err != nil {
		if re := admission.AsReject(err); re != nil {
			writeReject(w, re)
		}
		return
	}
	defer ticket.Release()
	ticket.FirstToken() // no token stream: it must not hold back a prefill
	p.servePassthrough(w, r)
}

// exchange is the state of one generation request. It has a single owner,
// the goroutine serving the request, so it needs no lock.
type exchange struct {
	w          http.ResponseWriter
	r          *http.Request
	rec        slo.Record
	failure    slo.Outcome // non-zero once the request failed
	stripUsage bool        // the gateway added include_usage: drop the usage-only chunk
	forwarded  time.Time
	err        error             // the underlying cause of an engine failure, for the log
	ticket     *admission.Ticket // nil without a limiter
	deadline   clientDeadline    // the write deadline on the client's connection
	shape      wire.Shape        // the route's body and stream format
	idle       *idleWatch        // bounds the engine's silence; nil without a bound
}

func (x *exchange) fail(o slo.Outcome, reason string, status int) {
	x.failure, x.rec.Reason = o, reason
	if status != 0 {
		x.rec.Status = status
	}
}

// errorResponse answers with an OpenAI-shaped error and records the failure.
func (x *exchange) errorResponse(o slo.Outcome, reason string, status int, errType, msg string) {
	x.fail(o, reason, status)
	wire.WriteError(x.w, status, errType, reason, msg)
}

func (p *Proxy) serveGeneration(w http.ResponseWriter, r *http.Request, rt Route) {
	x := &exchange{w: w, r: r, shape: rt.Shape, deadline: newClientDeadline(w, p.cfg.ClientWriteTimeout)}
	x.rec = slo.Record{Route: rt.Name, Arrival: time.Now(), Targets: p.cfg.Targets}
	defer p.finish(x)

	// What the headers decide comes before the body is read: a request
	// refused anyway does not upload it first.
	var err error
	if x.rec.Targets, err = p.cfg.Headers.Apply(p.cfg.Targets, r.Header); err != nil {
		x.errorResponse(slo.InvalidRequest, reasonBadHeader, http.StatusBadRequest, wire.TypeInvalidRequest, err.Error())
		return
	}
	areq := admission.Request{Arrival: x.rec.Arrival, Targets: x.rec.Targets, MaxWait: p.maxWait(x.rec.Targets)}
	if !p.precheck(x, areq) {
		return
	}
	body, release, ok := p.readBody(x)
	if !ok {
		return
	}
	defer release()
	req, err := wire.ParseRequestAs(rt.Shape, body)
	if err != nil {
		x.errorResponse(slo.InvalidRequest, reasonBadJSON, http.StatusBadRequest, wire.TypeInvalidRequest, "invalid request body: "+err.Error())
		return
	}
	x.rec.Model, x.rec.Streamed = req.Model, req.Stream
	if req.N > 1 {
		x.rec.Choices = req.N
	}
	if rt.Shape == wire.ShapeOpenAI && req.Stream && !req.WantsUsage() {
		if body, err = wire.EnsureIncludeUsage(body); err != nil {
			x.errorResponse(slo.InvalidRequest, reasonBadJSON, http.StatusBadRequest, wire.TypeInvalidRequest, "invalid request body: "+err.Error())
			return
		}
		x.stripUsage = true
	}

	if lim := p.cfg.Limiter; lim != nil {
		ticket, err := lim.Acquire(r.Context(), areq)
		if err != nil {
			if re := admission.AsReject(err); re != nil {
				x.fail(slo.Rejected, re.Reason(), writeReject(w, re))
			} else {
				x.fail(slo.ClientCancelled, "", 0)
			}
			return
		}
		defer ticket.Release() // also on panic: the slot never leaks
		x.rec.QueueWait = ticket.QueueWait()
		if !req.Stream {
			// Its first token cannot be seen: it must not hold back the
			// next request's prefill (see admission.Limiter.SetPacing).
			ticket.FirstToken()
		}
		x.ticket = ticket
	}
	p.forward(x, body)
}

// maxWait is a request's queue-wait bound: the operator's, or else its own
// TTFT target (a request that waited that long would miss it anyway).
func (p *Proxy) maxWait(t slo.Targets) time.Duration {
	if p.cfg.MaxQueueWait > 0 {
		return p.cfg.MaxQueueWait
	}
	return t.TTFT
}

// precheck refuses, before the body is read, a request that admission
// would refuse whatever its body says (draining, a full queue). It reports
// whether the request may go on.
func (p *Proxy) precheck(x *exchange, req admission.Request) bool {
	if p.cfg.Limiter == nil {
		return true
	}
	if re := p.cfg.Limiter.Precheck(req); re != nil {
		x.fail(slo.Rejected, re.Reason(), writeReject(x.w, re))
		return false
	}
	return true
}

// readBody reads the whole request body, bounded by MaxBodyBytes and by
// the budget of body bytes held across requests; release gives its bytes
// back to the budget (call it when the request has ended). Reading it
// before forwarding is also what keeps the engine from racing the client's
// body (golang/go#40747): the outbound body is a bytes.Reader that the
// gateway owns.
func (p *Proxy) readBody(x *exchange) (body []byte, release func(), ok bool) {
	limit := p.cfg.MaxBodyBytes
	if x.r.ContentLength > limit {
		x.errorResponse(slo.InvalidRequest, reasonBodyTooLarge, http.StatusRequestEntityTooLarge, wire.TypeInvalidRequest,
			"request body larger than "+strconv.FormatInt(limit, 10)+" bytes")
		return nil, nil, false
	}
	held := p.bodies.reader(http.MaxBytesReader(x.w, x.r.Body, limit), x.r.ContentLength)
	body, err := readGrowing(held, min(x.r.ContentLength, limit))
	if err == nil {
		return body, held.release, true
	}
	held.release()
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		x.errorResponse(slo.InvalidRequest, reasonBodyTooLarge, http.StatusRequestEntityTooLarge, wire.TypeInvalidRequest,
			"request body larger than "+strconv.FormatInt(limit, 10)+" bytes")
	case errors.Is(err, errBodyBudget):
		x.fail(slo.Rejected, reasonBodyBudget, writeBodyBudget(x.w))
	case x.r.Context().Err() != nil:
		x.fail(slo.ClientCancelled, "", 0)
	default:
		x.errorResponse(slo.InvalidRequest, reasonBadBody, http.StatusBadRequest, wire.TypeInvalidRequest, "could not read the request body")
	}
	return nil, nil, false
}

// initialBodyBuffer bounds the buffer a request body starts with: a
// Content-Length is a claim, so the buffer grows with the bytes that
// arrive, not with what a header promised.
const initialBodyBuffer = 64 << 10

// readGrowing reads r to its end into a buffer sized for declared bytes
// (the Content-Length, or -1), up to initialBodyBuffer, grown as bytes
// arrive.
func readGrowing(r io.Reader, declared int64) ([]byte, error) {
	buf := bytes.NewBuffer(make([]byte, 0, min(max(declared, 512), initialBodyBuffer)+1))
	_, err := buf.ReadFrom(r)
	return buf.Bytes(), err
}

// forward sends the request to the engine and relays the answer.
func (p *Proxy) forward(x *exchange, body []byte) {
	ctx, cancel := context.WithCancelCause(x.r.Context())
	defer cancel(nil)
	out, err := p.outbound(ctx, x.r, body)
	if err != nil {
		x.errorResponse(slo.EngineError, reasonUnreachable, http.StatusBadGateway, wire.TypeServer, "could not build the upstream request")
		return
	}
	// A streamed request is bounded up to its first output chunk, one that
	// is not streamed up to its response headers.
	var timer *time.Timer
	switch {
	case x.rec.Streamed && p.cfg.FirstTokenTimeout > 0:
		timer = time.AfterFunc(p.cfg.FirstTokenTimeout, func() { cancel(errFirstTokenTimeout) })
		defer timer.Stop()
	case !x.rec.Streamed && p.cfg.ResponseTimeout > 0:
		timer = time.AfterFunc(p.cfg.ResponseTimeout, func() { cancel(errResponseTimeout) })
		defer timer.Stop()
	}
	p.running.Add(1)
	defer p.running.Add(-1)
	x.forwarded = time.Now()
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		if !p.timedOut(ctx, x) {
			if x.r.Context().Err() != nil {
				x.fail(slo.ClientCancelled, "", 0)
			} else {
				x.err = err
				x.errorResponse(slo.EngineError, reasonUnreachable, http.StatusBadGateway, wire.TypeServer, "the engine could not be reached")
			}
		}
		return
	}
	// A stream waits for its first token under the first-token timeout
	// alone: the idle bound starts at it.
	resp.Body, x.idle = watchIdle(resp.Body, p.cfg.StreamIdleTimeout, !(x.rec.Streamed && timer != nil), cancel)
	defer x.idle.stop()
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK && isEventStream(resp.Header) {
		p.relayStream(ctx, x, resp, timer)
		return
	}
	if timer != nil && x.rec.Streamed {
		timer.Stop() // an answer that is not a stream: no first chunk to wait for
		x.idle.arm()
	}
	p.relayWhole(ctx, x, resp)
}

// timedOut answers a request whose engine request was cancelled by one of
// the gateway's own bounds before anything was sent to the client (504),
// and reports whether it was.
func (p *Proxy) timedOut(ctx context.Context, x *exchange) bool {
	if x.r.Context().Err() != nil {
		return false // the client left first
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errFirstTokenTimeout):
		x.errorResponse(slo.EngineError, reasonFirstTokenTimeout, http.StatusGatewayTimeout, wire.TypeTimeout, "the engine sent no output within the first-token timeout")
	case errors.Is(cause, errResponseTimeout):
		x.errorResponse(slo.EngineError, reasonResponseTimeout, http.StatusGatewayTimeout, wire.TypeTimeout, "the engine sent no response within the response timeout")
	case errors.Is(cause, errStreamIdle):
		x.errorResponse(slo.EngineError, reasonStreamIdle, http.StatusGatewayTimeout, wire.TypeTimeout, "the engine's response stalled for longer than the stream-idle timeout")
	default:
		return false
	}
	return true
}

func isEventStream(h http.Header) bool {
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(h.Get("Content-Type"))), "text/event-stream")
}

// outbound builds the request to the engine: the same method, path, query
// and end-to-end headers, the (possibly rewritten) body with its exact
// length, and X-Forwarded-For as httputil.ReverseProxy sets it.
func (p *Proxy) outbound(ctx context.Context, in *http.Request, body []byte) (*http.Request, error) {
	u := *p.cfg.Upstream
	u.Path, u.RawPath = joinPath(u.Path, in.URL.Path), ""
	if u.RawQuery == "" || in.URL.RawQuery == "" {
		u.RawQuery += in.URL.RawQuery
	} else {
		u.RawQuery += "&" + in.URL.RawQuery
	}
	out, err := http.NewRequestWithContext(ctx, in.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
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

// finish judges the request and reports it. It runs from a defer, so a
// panic in the relay still reports the request (and its slot is released
// by the ticket's own defer).
func (p *Proxy) finish(x *exchange) {
	rec := &x.rec
	if x.failure != 0 {
		rec.Outcome = x.failure
	} else {
		rec.Outcome = slo.Judge(rec)
	}
	p.obs.Done(*rec)
	lvl := slog.LevelDebug
	if rec.Outcome&(slo.EngineError) != 0 {
		lvl = slog.LevelWarn
	}
	if p.log.Enabled(x.r.Context(), lvl) {
		errText := ""
		if x.err != nil {
			errText = x.err.Error()
		}
		p.log.LogAttrs(x.r.Context(), lvl, "request",
			slog.String("route", rec.Route), slog.String("model", rec.Model),
			slog.Bool("stream", rec.Streamed), slog.Int("status", rec.Status),
			slog.String("outcome", rec.Outcome.String()), slog.String("reason", rec.Reason),
			slog.Duration("queue_wait", rec.QueueWait), slog.Duration("ttft", rec.TTFT),
			slog.Duration("engine_ttft", rec.EngineTTFT), slog.Duration("e2e", rec.E2E),
			slog.Int("prompt_tokens", rec.PromptTokens), slog.Int("output_tokens", rec.OutputTokens),
			slog.String("err", errText))
	}
}
