package tracing

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// genSpans are n ended spans shaped as a generation request's.
func genSpans(n int) []sdktrace.ReadOnlySpan {
	attrs := []attribute.KeyValue{attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.provider.name", "openai"), attribute.String("kneecap.outcome", "good"),
		attribute.Bool("gen_ai.request.stream", true), attribute.String("gen_ai.request.model", "m"), attribute.Int("gen_ai.usage.input_tokens", 5), attribute.Int("gen_ai.usage.output_tokens", 100),
		attribute.StringSlice("gen_ai.response.finish_reasons", []string{"length"}), attribute.Int("http.response.status_code", 200), attribute.String("kneecap.class", "default"),
		attribute.String("kneecap.admission.decision", "admitted"), attribute.Float64("kneecap.queue_wait_seconds", 0), attribute.Int("kneecap.admission.cap", 4096), attribute.Int("kneecap.admission.running", 1),
		attribute.String("kneecap.admission.reason", "none"), attribute.Float64("kneecap.predicted.ttft_seconds", 0.1), attribute.Float64("kneecap.predicted.tpot_seconds", 0.01),
		attribute.Float64("kneecap.ttft_seconds", 0.001), attribute.Float64("kneecap.engine_ttft_seconds", 0.001), attribute.Float64("kneecap.tpot_seconds", 0.0001)}
	res := resource.NewSchemaless(attribute.String("service.name", "kneecap"), attribute.String("host.name", "h"), attribute.String("telemetry.sdk.language", "go"))
	t0 := time.Now()
	var out []sdktrace.ReadOnlySpan
	for i := range n {
		st := tracetest.SpanStub{Name: "chat m", SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, byte(i)}, SpanID: trace.SpanID{1, byte(i)}, TraceFlags: 1}),
			SpanKind: trace.SpanKindServer, StartTime: t0, EndTime: t0.Add(time.Millisecond), Attributes: attrs,
			Events: []sdktrace.Event{{Name: "kneecap.grant", Time: t0}, {Name: "kneecap.first_token", Time: t0}}, Resource: res}
		out = append(out, st.Snapshot())
	}
	return out
}

// BenchmarkEncoder encodes batches of 512 spans shaped as a generation
// request's (20 attributes, two events) into one export request: the
// exporter's share of a span, the HTTP request aside.
func BenchmarkEncoder(b *testing.B) {
	var e encoder
	batch := genSpans(512)
	b.ReportAllocs()
	for b.Loop() {
		e.stage(batch)
		e.request(len(batch))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/span")
}
