package proxy

import (
	"encoding/hex"
	"net/http"
	"net/textproto"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/slo"
	"github.com/kneecap/kneecap/tracing"
	"github.com/kneecap/kneecap/wire"
)

// The span of a generation request (Config.Tracer): one per request, of
// kind server, named as OpenTelemetry's GenAI conventions name an
// inference span ("{gen_ai.operation.name} {gen_ai.request.model}"). It is
// started when the request arrives, continuing the client's W3C trace
// (traceparent and tracestate; a malformed one starts a new trace), and
// its context replaces the client's in the request to the engine, so that
// an engine that traces (vLLM with --otlp-traces-endpoint) continues it.
// Everything else is set when the request ends, from its record and
// ticket: nothing is added per chunk, and the only reading of the
// engine's bytes for it is the response model and finish reasons of the
// chunks that finish a choice (or of a whole answer). Gathering them and
// ending the span runs on Config.Spans's goroutine when it is set, from a
// snapshot of the request, and ends there as a tracing.Ended (written to
// the exporter without the SDK's end where it can be: most of a span's
// cost). Without a tracer none of this runs: one nil check per request.

// traceContext is the W3C Trace Context propagator.
var traceContext = propagation.TraceContext{}

// startOptions are the options of every span, made once: a variadic
// slice built per call escapes through the interface and allocates.
var startOptions = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

// spanState is what a traced request keeps for its span beyond its record,
// and, once it has ended, the snapshot its span is ended from (spanEnd).
type spanState struct {
	span      trace.Span
	parsed    bool // the body was read and parsed (noteRequest)
	stream    bool // the client asked for a stream
	maxTokens int  // max_completion_tokens or max_tokens, 0 when not given
	model     string
	finish    []string
	runFn     func() // s.run
	spanEnd
}

// headerCarrier is the propagator's carrier over a request's headers, for
// Extract: the W3C names map to their canonical form directly, where
// http.Header's Get would allocate the canonical form of the lower-case
// names the propagator uses. (The engine's headers are written by
// propagate, without the propagator.)
type headerCarrier http.Header

func (c headerCarrier) Get(key string) string {
	switch key {
	case "traceparent":
		key = "Traceparent"
	case "tracestate":
		key = "Tracestate"
	}
	return textproto.MIMEHeader(c).Get(key)
}

func (c headerCarrier) Set(key, value string) { http.Header(c).Set(key, value) }

func (c headerCarrier) Keys() []string { return propagation.HeaderCarrier(c).Keys() }

// The GenAI conventions' names (semantic conventions, gen_ai registry),
// and kneecap's own under one prefix. Durations are in seconds.
const (
	attrOperation     = "gen_ai.operation.name"
	attrProvider      = "gen_ai.provider.name"
	attrRequestModel  = "gen_ai.request.model"
	attrResponseModel = "gen_ai.response.model"
	attrMaxTokens     = "gen_ai.request.max_tokens"
	attrChoices       = "gen_ai.request.choice.count"
	attrStream        = "gen_ai.request.stream" // not in the registry yet; the name instrumentations use
	attrInputTokens   = "gen_ai.usage.input_tokens"
	attrOutputTokens  = "gen_ai.usage.output_tokens"
	attrFinish        = "gen_ai.response.finish_reasons"
	attrErrorType     = "error.type"
	attrStatus        = "http.response.status_code"

	attrClass      = "kneecap.class"
	attrTenant     = "kneecap.tenant"
	attrDecision   = "kneecap.admission.decision"
	attrReason     = "kneecap.admission.reason"
	attrCap        = "kneecap.admission.cap"
	attrRunning    = "kneecap.admission.running"
	attrQueueWait  = "kneecap.queue_wait_seconds"
	attrPredTTFT   = "kneecap.predicted.ttft_seconds"
	attrPredTPOT   = "kneecap.predicted.tpot_seconds"
	attrTTFT       = "kneecap.ttft_seconds"
	attrEngineTTFT = "kneecap.engine_ttft_seconds"
	attrTPOT       = "kneecap.tpot_seconds"
	attrTargetTTFT = "kneecap.target.ttft_seconds"
	attrTargetTPOT = "kneecap.target.tpot_seconds"
	attrTargetE2E  = "kneecap.target.e2e_seconds"
	attrOutcome    = "kneecap.outcome"
	attrRetryAfter = "kneecap.retry_after_seconds"

	eventGrant = "kneecap.grant"
	eventFirst = "kneecap.first_token"
)

// attrPool holds the slices a span's attributes are gathered in.
var attrPool = sync.Pool{New: func() any { a := make([]attribute.KeyValue, 0, 32); return &a }}

// maxAttrLen bounds a string the client or the engine chose (a model
// name), in a span name or attribute.
const maxAttrLen = 256

func clip(s string) string {
	if len(s) > maxAttrLen {
		return s[:maxAttrLen]
	}
	return s
}

// GenAI returns the GenAI conventions' operation name and provider of a
// generation route (Route.Name): chat for the chat and Responses APIs,
// text_completion for the others; the provider is the API's flavour:
// openai for the OpenAI-compatible routes (the conventions' value for
// any host reached through the OpenAI API), llama.cpp and sglang for
// those engines' native routes.
func GenAI(route string) (operation, provider string) {
	switch route {
	case "chat", "responses":
		return "chat", "openai"
	case "completion":
		return "text_completion", "llama.cpp"
	case "generate":
		return "text_completion", "sglang"
	}
	return "text_completion", "openai"
}

// startSpan starts the request's span (see above); x.tr is nil without a
// tracer.
func (p *Proxy) startSpan(x *exchange) {
	ctx := traceContext.Extract(x.r.Context(), headerCarrier(x.r.Header))
	op, _ := GenAI(x.rec.Route)
	x.tr = statePool.Get().(*spanState)
	_, x.tr.span = p.cfg.Tracer.Start(ctx, op, startOptions...) // it starts now: at the record's Arrival, give or take a microsecond
}

// statePool holds the spans' states (spanState) for reuse: a state is put
// back once its span has ended (release), so that a traced request does
// not allocate its half a kilobyte.
var statePool sync.Pool

func init() { // not in statePool's declaration: run refers to statePool
	statePool.New = func() any {
		s := new(spanState)
		s.runFn = s.run // bound once: a method value made per request allocates
		return s
	}
}

// release empties s and puts it back in statePool; nothing may use it
// after.
func (s *spanState) release() {
	clear(s.finish)
	*s = spanState{finish: s.finish[:0], runFn: s.runFn}
	statePool.Put(s)
}

// noteRequest keeps what the span says of the request's body.
func (s *spanState) noteRequest(req wire.Request) {
	s.parsed, s.stream = true, req.Stream
	switch {
	case req.MaxCompletionTokens != nil:
		s.maxTokens = *req.MaxCompletionTokens
	case req.MaxTokens != nil:
		s.maxTokens = *req.MaxTokens
	}
}

// propagate makes the engine request carry the span's context in place of
// the client's traceparent and tracestate, as the W3C propagator writes
// them (TestTraceStream compares), without the context it would need.
func (s *spanState) propagate(h http.Header) {
	h.Del("Traceparent")
	h.Del("Tracestate")
	sc := s.span.SpanContext()
	if !sc.IsValid() {
		return
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	var b [55]byte // 00-{32 hex}-{16 hex}-{2 hex}
	w := append(b[:0], "00-"...)
	w = hex.AppendEncode(w, tid[:])
	w = append(w, '-')
	w = hex.AppendEncode(w, sid[:])
	w = append(w, '-')
	w = hex.AppendEncode(w, []byte{byte(sc.TraceFlags() & trace.FlagsSampled)})
	h["Traceparent"] = []string{string(w)}
	if ts := sc.TraceState().String(); ts != "" {
		h["Tracestate"] = []string{ts}
	}
}

// oneFinish are the finish_reasons attributes of one choice finished for
// the common reasons, made once: attribute.StringSlice copies its slice.
var oneFinish = func() map[string]attribute.KeyValue {
	m := map[string]attribute.KeyValue{}
	for _, r := range []string{"stop", "length", "tool_calls", "content_filter", "function_call", "abort"} {
		m[r] = attribute.StringSlice(attrFinish, []string{r})
	}
	return m
}()

// finishReasons is the gen_ai.response.finish_reasons attribute of the
// reasons given.
func finishReasons(reasons []string) attribute.KeyValue {
	if len(reasons) == 1 {
		if kv, ok := oneFinish[reasons[0]]; ok {
			return kv
		}
	}
	return attribute.StringSlice(attrFinish, reasons)
}

// maxFinish bounds the finish reasons kept (one per choice).
const maxFinish = 16

// noteAnswer reads the response model and the finish reasons of an OpenAI
// chunk that finishes a choice, or of a whole answer (wire.Finish). Other
// shapes are not read.
func (s *spanState) noteAnswer(shape wire.Shape, data []byte) {
	if shape != wire.ShapeOpenAI {
		return
	}
	model, finish := wire.Finish(data, s.finish, maxFinish)
	if model != "" {
		s.model = clip(model)
	}
	s.finish = finish
}

// spanEnd is what ending a span reads, taken from the request when it
// ended, so that it may run on another goroutine (Config.Spans): the
// request's writer and ticket are not touched after it.
type spanEnd struct {
	rec        slo.Record
	base       slo.Targets // the operator's targets
	ticketed   bool
	grant      admission.Grant
	granted    time.Time
	retryAfter string
	end        time.Time
	spans      Spans // Config.Spans, which ends it; nil: the SDK, at once
	// How the span ends, in the span's own memory.
	ended  tracing.Ended
	events [2]sdktrace.Event
}

// endSpan ends the request's span: at once when it is not recorded (not
// sampled), else on Config.Spans's goroutine (at once without it) from a
// snapshot of the request. A span whose end Spans refuses (its queue is
// full) is never ended: the tracer has counted it as dropped.
func (p *Proxy) endSpan(x *exchange) {
	s := x.tr
	x.tr = nil // s is the span's end's, then statePool's
	if !s.span.IsRecording() {
		s.span.End()
		s.release()
		return
	}
	s.spanEnd = spanEnd{rec: x.rec, base: p.cfg.Targets, retryAfter: x.w.Header().Get("Retry-After"), end: time.Now(), spans: p.cfg.Spans}
	if t := x.ticket; t != nil {
		s.ticketed, s.grant, s.granted = true, t.Grant(), t.Granted()
	}
	if s.spans == nil {
		s.run()
		return
	}
	if !s.spans.Defer(s.runFn) { // refused: the tracer counted the span as dropped
		s.release()
	}
}

// run gathers the span's name, attributes, events and status from the
// judged record, and ends it (Spans.End, or the SDK's without Spans). The
// targets are set when they differ from the operator's: a class's, or the
// request's headers'.
func (s *spanState) run() {
	e := &s.spanEnd
	rec, base := &e.rec, e.base
	op, provider := GenAI(rec.Route)
	e.ended = tracing.Ended{Span: s.span, Name: op, End: e.end}
	events := e.events[:0]
	ap := attrPool.Get().(*[]attribute.KeyValue)
	a := (*ap)[:0]
	defer func() { // the span's end has copied them
		clear(a)
		*ap = a[:0]
		attrPool.Put(ap)
		clear(e.events[:])
		e.ended = tracing.Ended{}
		s.release()
	}()
	model := clip(rec.Model)
	if model != "" {
		e.ended.Name = op + " " + model
	}
	str := func(k, v string) {
		if v != "" {
			a = append(a, attribute.String(k, v))
		}
	}
	secs := func(k string, d int64) {
		if d > 0 {
			a = append(a, attribute.Float64(k, float64(d)/1e9))
		}
	}
	a = append(a, attribute.String(attrOperation, op), attribute.String(attrProvider, provider),
		attribute.String(attrOutcome, rec.Outcome.String()))
	if s.parsed { // a request refused before its body was read has no stream flag or model
		a = append(a, attribute.Bool(attrStream, s.stream))
	}
	str(attrRequestModel, model)
	str(attrResponseModel, s.model)
	if s.maxTokens > 0 {
		a = append(a, attribute.Int(attrMaxTokens, s.maxTokens))
	}
	if rec.Choices > 1 {
		a = append(a, attribute.Int(attrChoices, rec.Choices))
	}
	if rec.Outcome.Completed() && !rec.Estimated { // the engine's usage report
		a = append(a, attribute.Int(attrInputTokens, rec.PromptTokens), attribute.Int(attrOutputTokens, rec.OutputTokens*max(rec.Choices, 1)))
	}
	if len(s.finish) > 0 {
		a = append(a, finishReasons(s.finish))
	}
	if rec.Status != 0 {
		a = append(a, attribute.Int(attrStatus, rec.Status))
	}
	str(attrClass, rec.Class)
	str(attrTenant, rec.Tenant)
	if rec.Targets != base {
		secs(attrTargetTTFT, int64(rec.Targets.TTFT))
		secs(attrTargetTPOT, int64(rec.Targets.TPOT))
		secs(attrTargetE2E, int64(rec.Targets.E2E))
	}

	// Admission: refused, or granted at once or after waiting, with what
	// the limiter knew at the grant.
	switch {
	case rec.Outcome.Has(slo.Rejected):
		a = append(a, attribute.String(attrDecision, "refused"))
		str(attrReason, rec.Reason)
	case e.ticketed:
		g := e.grant
		decision := "admitted"
		if g.Held != 0 || rec.QueueWait > 0 {
			decision = "queued"
		}
		a = append(a, attribute.String(attrDecision, decision), attribute.Float64(attrQueueWait, rec.QueueWait.Seconds()),
			attribute.Int(attrCap, g.Limit), attribute.Int(attrRunning, g.Running))
		str(attrReason, g.Held.String())
		if g.EngineTTFT > 0 {
			a = append(a, attribute.Float64(attrPredTTFT, (rec.QueueWait+g.EngineTTFT).Seconds()))
		}
		secs(attrPredTPOT, int64(g.Step))
		events = append(events, sdktrace.Event{Name: eventGrant, Time: e.granted})
	}
	if rec.FirstObserved() {
		secs(attrTTFT, int64(rec.TTFT))
		secs(attrEngineTTFT, int64(rec.EngineTTFT))
		events = append(events, sdktrace.Event{Name: eventFirst, Time: rec.Arrival.Add(rec.TTFT)})
	}
	if tpot, ok := rec.TPOT(); ok {
		secs(attrTPOT, int64(tpot))
	}
	if v := e.retryAfter; v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			a = append(a, attribute.Int(attrRetryAfter, n))
		}
	}
	if !rec.Outcome.Completed() {
		et := rec.Reason
		if et == "" {
			et = rec.Outcome.String()
		}
		a = append(a, attribute.String(attrErrorType, et))
		if rec.Outcome.Has(slo.EngineError) {
			e.ended.Status = sdktrace.Status{Code: codes.Error, Description: et}
		}
	}
	e.ended.Attributes, e.ended.Events = a, events
	if e.spans != nil {
		e.spans.End(&e.ended)
	} else {
		e.ended.EndSDK()
	}
}
