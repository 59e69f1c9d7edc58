package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/slo"
	"github.com/kneecap/kneecap/tracing"
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
	// Limiter caps generation requests running on the engine (an
	// *admission.Limiter is one). nil means no cap and no queue.
	Limiter Admitter
	// Targets are the operator's latency targets; requests may override
	// them with x-slo-*-ms headers as Headers allows.
	Targets slo.Targets
	// Classify gives a request its priority class, tenant and class
	// targets (see Class). nil means one class with the operator's
	// targets, and one tenant.
	Classify Classifier
	// Headers bounds what a request's x-slo-*-ms headers may do to its
	// targets. The zero value lets them tighten or loosen freely.
	Headers slo.HeaderPolicy
	// Passthrough are paths outside the routing table (Routes) that the
	// operator opens: relayed as they are, never admitted. A trailing "*"
	// opens a prefix. Every other path outside the table gets a 404.
	Passthrough []string
	// MaxQueueWait bounds a request's time in the limiter's queue, unless
	// its class sets its own bound (Class.MaxWait). Zero means the
	// request's own TTFT target (after overrides), or its E2E target when
	// it has no TTFT target: a request that waited that long would miss it
	// anyway. With neither target the wait is unbounded.
	MaxQueueWait time.Duration
	// FirstTokenTimeout bounds the time from forwarding a streamed request
	// to its first output chunk: 504 before the response headers, an SSE
	// error event after them; and a reassembled one's (504). Zero means no
	// bound. A request relayed whole has no observable first token and is
	// not bounded by it.
	FirstTokenTimeout time.Duration
	// ResponseTimeout bounds the time from forwarding a request that is
	// not streamed to its answer: to the response headers when it is
	// relayed whole (engines answer such a request when the whole
	// generation is done), to the end of the engine's stream when it is
	// reassembled; 504 beyond it. Zero means no bound.
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
	// MaxModelLen is the engine's context length in tokens: a request whose
	// prompt is estimated beyond it is answered 400 before it queues, as
	// the engine would answer it (see Proxy.fits). Zero means no check.
	MaxModelLen int
	// PrefixBlockTokens, when positive, gives every generation request's
	// record its prefix fingerprint (slo.Record.Prefix): the prompt's text
	// in blocks of about this many tokens at four characters a token (the
	// prompt estimate's rate before it learns; fixed, so that the same
	// text is always cut at the same places), hashed and chained by
	// wire.PromptBlocks, at most MaxPrefixBlocks of them. Zero means none
	// (nothing computed, nothing allocated).
	PrefixBlockTokens int
	// NoCachedCost charges admission every prompt token as prefill. By
	// default a request's prompt estimate is charged less the part the
	// engine's prefix cache is predicted to serve (prefixcache.go; see
	// slo.Record.PromptCharged).
	NoCachedCost bool
	// Observer receives live measurements. nil means none; use Observers
	// to fan out to several.
	Observer Observer
	// Logger logs one line per failed request at Warn and per request at
	// Debug, never prompt or completion text. nil means no logs.
	Logger *slog.Logger
	// Tracer starts the span of every generation request (trace.go), whose
	// context the engine request carries (W3C traceparent). nil means no
	// spans, and the client's traceparent goes to the engine as it came.
	Tracer trace.Tracer
	// Spans ends the spans off the request's goroutine (trace.go). nil
	// means at once, on the request's goroutine, through the SDK's span.
	Spans Spans
}

// Spans is where the spans of traced requests end; *tracing.Tracer is
// one. Defer runs end, the end of a span from a snapshot of its request,
// on a goroutine of its own, or refuses it (false: a full queue; the span
// is then dropped, never ended). End, called only by such an end, ends
// the span with what it was given.
type Spans interface {
	Defer(end func()) bool
	End(e *tracing.Ended)
}

// Admitter is what the proxy needs of admission; *admission.Limiter is
// one. Precheck refuses, before a body is read, what would be refused
// whatever the body says. Acquire grants a slot (queueing for it) or
// refuses with an *admission.RejectError (or ctx's error). The proxy
// releases a granted ticket exactly once, from a defer, when the response
// has ended, and tells it of the first output chunk (at once for work
// that streams no tokens); a nil ticket tracks nothing.
type Admitter interface {
	Precheck(admission.Request) *admission.RejectError
	Acquire(context.Context, admission.Request) (*admission.Ticket, error)
}

// Proxy relays OpenAI-compatible traffic to one engine, measuring and
// admitting generation requests. Create it with New; it is safe for
// concurrent use and starts no goroutines.
type Proxy struct {
	cfg       Config
	transport *upstream
	obs       Observer
	fan       fanout // obs split by how each takes later chunks
	log       *slog.Logger
	pass      *httputil.ReverseProxy
	routes    *router
	bodies    *bodyBudget
	est       *estimator
	cache     *prefixCache // nil with Config.NoCachedCost
	running   atomic.Int64 // generation requests forwarded and not ended
}

// New returns a Proxy. It fails only on a missing or unusable Upstream.
func New(cfg Config) (*Proxy, error) {
	if cfg.Upstream == nil || cfg.Upstream.Host == "" || (cfg.Upstream.Scheme != "http" && cfg.Upstream.Scheme != "https") {
		return nil, errors.New("proxy: Upstream must be an absolute http(s) URL")
	}
	if l, ok := cfg.Limiter.(*admission.Limiter); ok && l == nil {
		cfg.Limiter = nil // a nil *Limiter in the interface is no limiter
	}
	p := &Proxy{cfg: cfg, obs: cfg.Observer, log: cfg.Logger, est: newEstimator()}
	if !cfg.NoCachedCost {
		p.cache = newPrefixCache()
	}
	rt := cfg.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	p.transport = newUpstream(rt)
	if p.obs == nil {
		p.obs = nopObserver{}
	}
	p.fan = newFanout(p.obs)
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
			answer(w, &failed{kind: errUnreachable, cause: err})
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
// up to MaxBodyBytes is read whole first (bufferBody), as on the
// generation routes; larger or chunked bodies (uploads) stream through as
// httputil.ReverseProxy relays them.
func (p *Proxy) servePassthrough(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > 0 && r.ContentLength <= p.cfg.MaxBodyBytes {
		body, release, err := p.bufferBody(w, r, p.cfg.MaxBodyBytes)
		if err != nil {
			answer(w, err)
			return
		}
		defer release()
		withBody(r, body)
	}
	p.pass.ServeHTTP(w, r)
}

// ServeHTTP is the traffic handler: it routes by the policy in Routes
// (see routes.go) on the canonical path, and sends the engine that path.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	canon := CanonicalPath(r.URL.Path)
	rt, ok := p.routes.match(canon)
	if !ok {
		answer(w, errRouteNotFound)
		return
	}
	if !rt.allows(r.Method) {
		w.Header().Set("Allow", strings.Join(rt.Methods, ", "))
		answer(w, tell(errNoMethod, "method "+r.Method+" is not allowed on this route", nil))
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
// stream (embeddings, rerank, ...): its body is read whole (bounded as a
// generation request's), then it holds a slot like a generation request
// (queued or refused alike) and is relayed as it is, not measured.
func (p *Proxy) serveAdmitted(w http.ResponseWriter, r *http.Request) {
	lim := p.cfg.Limiter
	if lim == nil {
		p.servePassthrough(w, r)
		return
	}
	areq, _, err := p.admissionOf(r, &slo.Record{Arrival: time.Now()})
	if err != nil {
		answer(w, err)
		return
	}
	if re := lim.Precheck(areq); re != nil {
		answer(w, re)
		return
	}
	// The body comes before a slot: a slow upload must not hold one.
	body, release, err := p.bufferBody(w, r, p.cfg.MaxBodyBytes)
	if err != nil {
		answer(w, err)
		return
	}
	defer release()
	areq.Fingerprint = fingerprint(r.URL.Path, areq.Tenant, body)
	ticket, err := lim.Acquire(r.Context(), areq)
	if err != nil {
		answer(w, refused(err))
		return
	}
	defer ticket.Release()
	ticket.NoFirstToken() // no token stream: it must not hold back a prefill
	withBody(r, body)
	p.pass.ServeHTTP(w, r)
}

// maxWait is a request's queue-wait bound: its class's, else the
// operator's, else its own TTFT target, else (no TTFT target) its E2E
// target (a request that waited that long would miss it anyway); zero
// (unbounded) when none is set.
func (p *Proxy) maxWait(c Class, t slo.Targets) time.Duration {
	switch {
	case c.MaxWait > 0:
		return c.MaxWait
	case p.cfg.MaxQueueWait > 0:
		return p.cfg.MaxQueueWait
	case t.TTFT > 0:
		return t.TTFT
	}
	return max(t.E2E, 0)
}
