package tracing_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/kneecap/kneecap/tracing/otlptest"
)

// BenchmarkSpan starts and ends one span per op with 22 attributes and two
// events, as a generation request's, exported over OTLP/HTTP to a
// receiver that drops it: the whole cost of a traced request's span, on
// both the request's goroutine and the exporter's.
func BenchmarkSpan(b *testing.B) {
	tr, stop := start(b, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": otlptest.Discard(b).URL, "OTEL_TRACES_SAMPLER": "always_on"})
	defer stop()
	attrs := make([]attribute.KeyValue, 0, 22)
	for i := range 11 {
		attrs = append(attrs, attribute.String("gen_ai.attr"+string(rune('a'+i)), "value"), attribute.Float64("kneecap.f"+string(rune('a'+i)), 0.25))
	}
	kind := trace.WithSpanKind(trace.SpanKindServer)
	b.ReportAllocs()
	for b.Loop() {
		_, s := tr.Tracer().Start(context.Background(), "chat m", kind)
		s.SetAttributes(attrs...)
		s.AddEvent("kneecap.grant")
		s.AddEvent("kneecap.first_token")
		s.End()
	}
}
