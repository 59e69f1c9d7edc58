package proxy

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/proxy/proxytest"
)

// heldEngine is a proxytest engine that records the traceparent of every
// generation request and holds those sent with X-Hold until release.
type heldEngine struct {
	proxytest.Engine
	mu     sync.Mutex
	parent []string
	hold   chan struct{}
}

func (e *heldEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	e.parent = append(e.parent, r.Header.Get("Traceparent")+" "+r.Header.Get("Tracestate"))
	e.mu.Unlock()
	if r.Header.Get("X-Hold") != "" {
		<-e.hold
	}
	e.Engine.ServeHTTP(w, r)
}

func (e *heldEngine) seen() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.parent...)
}

// tracedSetup is a proxy with a tracer whose spans a recorder keeps.
func tracedSetup(t *testing.T, cfg Config) (*setup, *heldEngine, *tracetest.SpanRecorder) {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	cfg.Tracer = tp.Tracer("test")
	eng := &heldEngine{hold: make(chan struct{})}
	return newSetup(t, eng, cfg), eng, sr
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func events(s sdktrace.ReadOnlySpan) []string {
	var names []string
	for _, e := range s.Events() {
		names = append(names, e.Name)
	}
	return names
}

// ended waits for n ended spans.
func ended(t *testing.T, sr *tracetest.SpanRecorder, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(sr.Ended()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d spans ended, want %d", len(sr.Ended()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return sr.Ended()
}

const clientParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestTraceStream: a streamed request continues the client's trace, the
// engine gets the gateway span's context, and the span carries the GenAI
// conventions' attributes and kneecap's, set from the record; the API key
// appears nowhere.
func TestTraceStream(t *testing.T) {
	s, eng, sr := tracedSetup(t, Config{Limiter: admission.NewLimiter(admission.Config{Limit: 4})})
	body := readAll(t, post(t, s.gateway.URL, "/v1/chat/completions",
		`{"model":"m","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"a secret prompt"}]}`,
		"Traceparent", clientParent, "Tracestate", "vendor=x", "Authorization", "Bearer sk-very-secret"))
	if !strings.Contains(body, "[DONE]") {
		t.Fatalf("stream: %s", body)
	}
	sp := ended(t, sr, 1)[0]
	sc := sp.SpanContext()
	if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sp.Parent().SpanID().String() != "00f067aa0ba902b7" || !sp.Parent().IsRemote() {
		t.Errorf("span %s parent %s: not the client's trace", sc.TraceID(), sp.Parent().SpanID())
	}
	if got, want := eng.seen()[0], "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01 vendor=x"; got != want {
		t.Errorf("the engine got %q, want %q", got, want)
	}
	if sp.Name() != "chat m" || sp.SpanKind() != trace.SpanKindServer {
		t.Errorf("span %q kind %v", sp.Name(), sp.SpanKind())
	}
	a := attrs(sp)
	for k, want := range map[attribute.Key]any{
		"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "m",
		"gen_ai.response.model": "m", "gen_ai.request.max_tokens": int64(5), "gen_ai.request.stream": true,
		"gen_ai.usage.output_tokens": int64(4), "http.response.status_code": int64(200),
		"kneecap.admission.decision": "admitted", "kneecap.admission.cap": int64(4), "kneecap.admission.running": int64(1),
		"kneecap.outcome": "good", "gen_ai.usage.input_tokens": int64(7),
	} {
		if got := a[k].AsInterface(); got != want {
			t.Errorf("%s = %v, want %v", k, got, want)
		}
	}
	if fr := a["gen_ai.response.finish_reasons"].AsStringSlice(); len(fr) != 1 || fr[0] != "length" {
		t.Errorf("finish reasons %v", fr)
	}
	for _, k := range []attribute.Key{"kneecap.ttft_seconds", "kneecap.engine_ttft_seconds", "kneecap.tpot_seconds", "kneecap.queue_wait_seconds"} {
		if _, ok := a[k]; !ok {
			t.Errorf("no %s", k)
		}
	}
	if ev := strings.Join(events(sp), ","); ev != "kneecap.grant,kneecap.first_token" {
		t.Errorf("events %s", ev)
	}
	for _, kv := range sp.Attributes() {
		if v := kv.Value.Emit(); strings.Contains(v, "secret") {
			t.Errorf("%s = %q leaks the key or the prompt", kv.Key, v)
		}
	}
}

// TestTraceMalformedParent: a malformed traceparent starts a new trace
// (never an error), and the engine gets the new one, without the client's
// tracestate.
func TestTraceMalformedParent(t *testing.T) {
	s, eng, sr := tracedSetup(t, Config{})
	resp := post(t, s.gateway.URL, "/v1/chat/completions", chatBody, "Traceparent", "00-zzzz-0000-01", "Tracestate", "vendor=x")
	if readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	sp := ended(t, sr, 1)[0]
	if sp.Parent().IsValid() || !sp.SpanContext().IsValid() {
		t.Errorf("span parent %v, context %v: want a new trace", sp.Parent(), sp.SpanContext())
	}
	if got, want := eng.seen()[0], "00-"+sp.SpanContext().TraceID().String()+"-"+sp.SpanContext().SpanID().String()+"-01 "; got != want {
		t.Errorf("the engine got %q, want %q", got, want)
	}
}

// TestTraceQueuedAndRefused: a request that waited for the slot says so
// and why (the cap), with its queue wait and a grant event after it
// arrived; one refused for a full queue gets a span with its reason and
// Retry-After; one that is not JSON one with its error.
func TestTraceQueuedAndRefused(t *testing.T) {
	s, eng, sr := tracedSetup(t, Config{Limiter: admission.NewLimiter(admission.Config{Limit: 1, MaxQueue: 1})})
	resp := post(t, s.gateway.URL, "/v1/chat/completions", `{"model":`)
	if readAll(t, resp); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad body: status %d", resp.StatusCode)
	}
	first := make(chan struct{})
	go func() {
		defer close(first)
		readAll(t, post(t, s.gateway.URL, "/v1/chat/completions", chatBody, "X-Hold", "1"))
	}()
	for s.lim.State().Running == 0 {
		time.Sleep(time.Millisecond)
	}
	queued := make(chan struct{})
	go func() {
		defer close(queued)
		readAll(t, post(t, s.gateway.URL, "/v1/chat/completions", chatBody))
	}()
	for s.lim.State().Queued == 0 {
		time.Sleep(time.Millisecond)
	}
	resp = post(t, s.gateway.URL, "/v1/chat/completions", chatBody)
	if readAll(t, resp); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("third request: status %d, want 429", resp.StatusCode)
	}
	time.Sleep(20 * time.Millisecond) // the second waits a little
	close(eng.hold)
	<-first
	<-queued
	byDecision := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range ended(t, sr, 4) {
		d := attrs(sp)["kneecap.admission.decision"].AsString()
		if d == "" {
			d = attrs(sp)["error.type"].AsString()
		}
		byDecision[d] = sp
	}
	q := byDecision["queued"]
	if q == nil {
		t.Fatalf("no queued span: %v", byDecision)
	}
	if a := attrs(q); a["kneecap.admission.reason"].AsString() != "cap" || !(a["kneecap.queue_wait_seconds"].AsFloat64() > 0) {
		t.Errorf("queued: reason %q wait %v", a["kneecap.admission.reason"].AsString(), a["kneecap.queue_wait_seconds"].AsFloat64())
	}
	if ev := q.Events(); len(ev) == 0 || !ev[0].Time.After(q.StartTime()) {
		t.Errorf("queued: grant event %v not after the start %v", ev, q.StartTime())
	}
	r := byDecision["refused"]
	if r == nil {
		t.Fatalf("no refused span: %v", byDecision)
	}
	a := attrs(r)
	if a["kneecap.admission.reason"].AsString() != "queue_full" || a["kneecap.retry_after_seconds"].AsInt64() < 1 ||
		a["http.response.status_code"].AsInt64() != 429 || a["error.type"].AsString() != "queue_full" || r.Status().Code != codes.Unset {
		t.Errorf("refused: %v, status %v", a, r.Status())
	}
	if b := byDecision["invalid_json"]; b == nil || attrs(b)["http.response.status_code"].AsInt64() != 400 || b.Name() != "chat" {
		t.Errorf("bad body: %v", b)
	}
}

// TestTraceOffPassesParent: without a tracer the client's traceparent goes
// to the engine as it came.
func TestTraceOffPassesParent(t *testing.T) {
	eng := &heldEngine{hold: make(chan struct{})}
	s := newSetup(t, eng, Config{})
	readAll(t, post(t, s.gateway.URL, "/v1/chat/completions", chatBody, "Traceparent", clientParent))
	if got := eng.seen()[0]; got != clientParent+" " {
		t.Errorf("the engine got %q", got)
	}
}

// TestTraceUnsampledParent: under the parent-based sampler a client's
// unsampled traceparent gives a span that is not recorded; the engine
// still gets the gateway span's context, in the client's trace, unsampled
// (flags 00), with the client's tracestate.
func TestTraceUnsampledParent(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())), sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	eng := &heldEngine{hold: make(chan struct{})}
	s := newSetup(t, eng, Config{Tracer: tp.Tracer("test")})
	unsampled := strings.TrimSuffix(clientParent, "01") + "00"
	resp := post(t, s.gateway.URL, "/v1/chat/completions", chatBody, "Traceparent", unsampled, "Tracestate", "vendor=x")
	if readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	got := eng.seen()[0]
	if !strings.HasPrefix(got, "00-4bf92f3577b34da6a3ce929d0e0e4736-") || !strings.HasSuffix(got, "-00 vendor=x") || strings.Contains(got, "00f067aa0ba902b7") {
		t.Errorf("the engine got %q, want the client's trace, a span of the gateway's, unsampled, the client's tracestate", got)
	}
	if n := len(sr.Ended()); n != 0 {
		t.Errorf("%d spans recorded for an unsampled parent", n)
	}
}
