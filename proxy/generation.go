package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/slo"
	"github.com/kneecap/kneecap/wire"
)

// exchange is the state of one generation request. It has a single owner,
// the goroutine serving the request, so it needs no lock.
type exchange struct {
	w          http.ResponseWriter
	r          *http.Request
	rec        slo.Record
	failure    slo.Outcome // non-zero once the request failed
	stripUsage bool        // the gateway added include_usage: drop the usage-only chunk
	reassemble bool        // not streamed by the client, streamed from the engine and reassembled
	forwarded  time.Time
	err        error             // the failure and its cause, for the log
	ticket     *admission.Ticket // nil without a limiter
	deadline   clientDeadline    // the write deadline on the client's connection
	shape      wire.Shape        // the route's body and stream format
	idle       *idleWatch        // bounds the engine's silence; nil without a bound
	prompt     wire.PromptSize   // the body's measure of its prompt (see estimator)
	reuse      reuseTrace        // whether the engine request went out on a reused connection
	chunks     chunkQueue        // later output chunks waiting for their observers
	tr         *spanState        // the request's span (trace.go); nil without a tracer
	// cache is the prompt's fingerprint for the prefix cache's prediction
	// (prefixcache.go), cacheShare the share predicted cached.
	cache      []uint64
	cacheShare float64
}

func (p *Proxy) serveGeneration(w http.ResponseWriter, r *http.Request, rt Route) {
	x := &exchange{w: w, r: r, shape: rt.Shape, deadline: newClientDeadline(w, p.cfg.ClientWriteTimeout)}
	x.rec = slo.Record{Route: rt.Name, Arrival: time.Now(), Targets: p.cfg.Targets}
	if p.cfg.Tracer != nil {
		p.startSpan(x)
	}
	defer p.finish(x)

	// What the headers decide comes before the body is read: a request
	// refused anyway does not upload it first.
	areq, class, err := p.admissionOf(r, &x.rec)
	if err != nil {
		x.abort(err)
		return
	}
	if !p.precheck(x, areq) {
		return
	}
	body, release, ok := p.readBody(x)
	if !ok {
		return
	}
	defer release()
	areq.Fingerprint = fingerprint(rt.Name, class.Tenant, body)
	req, err := wire.ParseRequestAs(rt.Shape, body)
	if err != nil {
		x.abort(tell(errBadJSON, "invalid request body: "+err.Error(), err))
		return
	}
	x.rec.Model, x.rec.Streamed = req.Model, req.Stream
	if x.tr != nil {
		x.tr.noteRequest(req)
	}
	if req.N > 1 {
		x.rec.Choices = req.N
	}
	x.prompt = wire.MeasurePrompt(rt.Shape, body)
	x.rec.PromptEstimate = p.est.estimate(rt.Name, req.Model, x.prompt)
	if !p.fits(x) {
		return
	}
	x.rec.PromptCharged = x.rec.PromptEstimate
	if p.cache != nil {
		x.cache = cacheBlocks(rt.Shape, body, x.prompt.Chars)
		x.cacheShare, x.rec.PromptCharged = p.cache.predict(x.cache, x.prompt.Chars, x.rec.PromptEstimate)
	}
	areq.PromptTokens, areq.MaxOutput = x.rec.PromptCharged, outputBound(req)
	x.rec.MaxTokens = areq.MaxOutput
	if n := p.cfg.PrefixBlockTokens; n > 0 {
		x.rec.Prefix = wire.PromptBlocks(rt.Shape, body, blockChars(n), MaxPrefixBlocks, nil)
	}
	if rt.Shape == wire.ShapeOpenAI && req.Stream && !req.WantsUsage() {
		if body, err = wire.EnsureIncludeUsage(body); err != nil {
			x.abort(tell(errBadJSON, "invalid request body: "+err.Error(), err))
			return
		}
		x.stripUsage = true
	}
	if !req.Stream {
		p.notStreamed(&areq, class)
		if rt.Reassemble {
			if body, err = p.asStream(x, body); err != nil {
				x.abort(tell(errBadJSON, "invalid request body: "+err.Error(), err))
				return
			}
		}
	}

	if lim := p.cfg.Limiter; lim != nil {
		ticket, err := lim.Acquire(r.Context(), areq)
		if err != nil {
			x.abort(refused(err))
			return
		}
		defer func() { // also on panic: the slot never leaks
			ticket.Served(x.rec.PromptTokens, x.rec.OutputTokens*max(x.rec.Choices, 1))
			ticket.Release()
		}()
		if ticket != nil { // an Admitter may grant without tracking
			x.rec.QueueWait = ticket.QueueWait()
			x.rec.PrefillAhead, x.rec.PrefillSpan, x.rec.PrefillStep = ticket.PrefillAhead()
			x.rec.GrantRunning = ticket.Grant().Running
		}
		if !req.Stream && !x.reassemble {
			// Its first token cannot be seen: it must not hold back the
			// next request's prefill (see admission.Limiter.SetPacing).
			ticket.NoFirstToken()
		}
		x.ticket = ticket
	}
	p.forward(x, body)
}

// outputBound is a request's bound on output tokens over all its choices,
// 0 when it gives none.
func outputBound(req wire.Request) int {
	n := 0
	switch {
	case req.MaxCompletionTokens != nil:
		n = *req.MaxCompletionTokens
	case req.MaxTokens != nil:
		n = *req.MaxTokens
	}
	if n <= 0 {
		return 0
	}
	return min(n, 1<<30) * max(req.N, 1)
}

// fits refuses with 400, before the request queues, a prompt that the
// engine cannot hold: one whose estimate, at its low end, is beyond
// Config.MaxModelLen (the engine would answer the same). The low end is
// the token IDs given plus three quarters of the text's estimate, so that
// an estimate off by a quarter never refuses what the engine would take.
// It reports whether the request may go on.
func (p *Proxy) fits(x *exchange) bool {
	limit := p.cfg.MaxModelLen
	if limit <= 0 || x.prompt.Whole {
		return true
	}
	text := max(x.rec.PromptEstimate-x.prompt.Tokens, 0)
	if low := x.prompt.Tokens + text*3/4; low <= limit {
		return true
	}
	x.abort(tell(errPromptTooLong, fmt.Sprintf("This model's maximum context length is %d tokens. However, your request has about %d input tokens. Please reduce the length of the input.",
		limit, x.rec.PromptEstimate), nil))
	return false
}

// asStream returns the body of a request that is not streamed rewritten
// to be reassembled (x.reassemble), or the body as it was when a field
// keeps it whole (its reason goes to the debug log).
func (p *Proxy) asStream(x *exchange, body []byte) ([]byte, error) {
	out, whole, err := wire.AsStream(body)
	switch {
	case err != nil:
		return nil, err
	case whole != "":
		p.log.Debug("relayed whole", "route", x.rec.Route, "field", whole)
		return body, nil
	}
	x.reassemble = true
	return out, nil
}

// precheck refuses, before the body is read, a request that admission
// would refuse whatever its body says (draining, a full queue). It reports
// whether the request may go on.
func (p *Proxy) precheck(x *exchange, req admission.Request) bool {
	if p.cfg.Limiter == nil {
		return true
	}
	if re := p.cfg.Limiter.Precheck(req); re != nil {
		x.abort(re)
		return false
	}
	return true
}

// readBody reads the whole request body (see bufferBody); release gives
// its bytes back to the budget (call it when the request has ended). A
// failure is answered and recorded.
func (p *Proxy) readBody(x *exchange) (body []byte, release func(), ok bool) {
	body, release, err := p.bufferBody(x.w, x.r, p.cfg.MaxBodyBytes)
	if err != nil {
		x.abort(err)
		return nil, nil, false
	}
	return body, release, true
}

// bufferBody reads a request body whole, bounded by limit (a declared
// length beyond it is refused before a byte is read) and by the budget of
// body bytes held across requests; release gives its bytes back. Reading
// it before forwarding is also what keeps the engine from racing the
// client's body (golang/go#40747): the outbound body is a bytes.Reader
// that the gateway owns.
func (p *Proxy) bufferBody(w http.ResponseWriter, r *http.Request, limit int64) (body []byte, release func(), err error) {
	if r.ContentLength > limit {
		return nil, nil, tooLarge(limit)
	}
	held := p.bodies.reader(http.MaxBytesReader(w, r.Body, limit), r.ContentLength)
	if body, err = readGrowing(held, min(r.ContentLength, limit)); err != nil {
		held.release()
		return nil, nil, bodyFailure(r, err, limit)
	}
	return body, held.release, nil
}

// withBody makes body the request's body, replayable (a retry on a fresh
// connection sends it again) and of known length.
func withBody(r *http.Request, body []byte) {
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	r.ContentLength, r.TransferEncoding = int64(len(body)), nil
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
	out, err := p.outbound(x.reuse.install(ctx), x.r, body)
	if err != nil {
		x.abort(tell(errUnreachable, "could not build the upstream request", err))
		return
	}
	if x.tr != nil {
		x.tr.propagate(out.Header)
	}
	// A streamed request is bounded up to its first output chunk, one that
	// is relayed whole up to its response headers, one that is reassembled
	// up to both its first output chunk and the end of its answer.
	streamed := x.rec.Streamed || x.reassemble
	var timer *time.Timer
	switch {
	case streamed && p.cfg.FirstTokenTimeout > 0:
		timer = time.AfterFunc(p.cfg.FirstTokenTimeout, func() { cancel(errFirstTokenTimeout) })
		defer timer.Stop()
	case !streamed && p.cfg.ResponseTimeout > 0:
		timer = time.AfterFunc(p.cfg.ResponseTimeout, func() { cancel(errResponseTimeout) })
		defer timer.Stop()
	}
	if x.reassemble && p.cfg.ResponseTimeout > 0 {
		whole := time.AfterFunc(p.cfg.ResponseTimeout, func() { cancel(errResponseTimeout) })
		defer whole.Stop()
	}
	p.running.Add(1)
	defer p.running.Add(-1)
	x.forwarded = time.Now()
	resp, err := p.transport.send(out, &x.reuse)
	if err != nil {
		x.abort(engineFailure(ctx, x, errUnreachable, err))
		return
	}
	// A stream waits for its first token under the first-token timeout
	// alone: the idle bound starts at it.
	resp.Body, x.idle = watchIdle(resp.Body, p.cfg.StreamIdleTimeout, !(streamed && timer != nil), cancel)
	defer x.idle.stop()
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK && isEventStream(resp.Header) {
		if x.reassemble {
			p.relayAssembled(ctx, x, resp, timer)
			return
		}
		p.relayStream(ctx, x, resp, timer)
		return
	}
	if timer != nil && streamed {
		timer.Stop() // an answer that is not a stream: no first chunk to wait for
		x.idle.arm()
	}
	p.relayWhole(ctx, x, resp)
}

// engineFailure names why an engine request failed before anything was
// sent to the client: the client left, one of the gateway's own bounds
// cancelled it (504), or else kind, with err as its cause.
func engineFailure(ctx context.Context, x *exchange, kind, err error) error {
	if x.r.Context().Err() != nil {
		return errClientGone // the client left first
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errFirstTokenTimeout), errors.Is(cause, errResponseTimeout), errors.Is(cause, errStreamIdle):
		return cause
	}
	return &failed{kind: kind, cause: err}
}

// finish judges the request and reports it. It runs from a defer, so a
// panic in the relay still reports the request (and its slot is released
// by the ticket's own defer).
func (p *Proxy) finish(x *exchange) {
	rec := &x.rec
	if x.ticket != nil {
		rec.PrefillWith = x.ticket.PrefillWith() // its batch has had its first tokens by now
	}
	if x.failure != 0 {
		rec.Outcome = x.failure
	} else {
		rec.Outcome = slo.Judge(rec)
	}
	p.obs.Done(*rec)
	if x.tr != nil {
		p.endSpan(x)
	}
	if rec.PromptTokens > 0 && rec.Choices == 0 {
		p.est.learn(rec.Route, rec.Model, x.prompt, rec.PromptTokens)
	}
	if p.cache != nil && rec.PromptTokens > 0 {
		p.cache.learn(x.cache, x.cacheShare, rec.PromptTokens, rec.CachedPromptTokens)
	}
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
			slog.Int("prompt_tokens", rec.PromptTokens), slog.Int("prompt_estimate", rec.PromptEstimate),
			slog.Int("prefill_ahead", rec.PrefillAhead), slog.Int("prefill_with", rec.PrefillWith), slog.Duration("prefill_span", rec.PrefillSpan),
			slog.Duration("prefill_step", rec.PrefillStep),
			slog.Int("output_tokens", rec.OutputTokens),
			slog.String("err", errText))
	}
}
