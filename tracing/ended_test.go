package tracing

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// TestEndedMatchesSDK: a span Tracer.End writes from an Ended (without the
// SDK's end) is the message of the same span ended through the SDK's API
// (EndSDK: its snapshot, encoded as TestEncoderMatchesOTLP checks against
// the official exporter), field for field: identity, remote parent, trace
// state, kind, times, attributes, events and status.
func TestEndedMatchesSDK(t *testing.T) {
	tr, c := capturedTracer(t)
	if !tr.direct {
		t.Fatal("kneecap's exporter with the default limits: End should write spans itself")
	}
	ts, err := trace.ParseTraceState("k=v")
	if err != nil {
		t.Fatal(err)
	}
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5},
		TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	_, s := tr.Tracer().Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "chat", trace.WithSpanKind(trace.SpanKindServer))
	t0 := time.Now()
	e := &Ended{Span: s, Name: "chat m", End: t0.Add(2 * time.Second),
		Attributes: []attribute.KeyValue{attribute.String("gen_ai.operation.name", "chat"), attribute.Bool("gen_ai.request.stream", true),
			attribute.Int("kneecap.admission.cap", 7), attribute.Float64("kneecap.ttft_seconds", 0.25),
			attribute.StringSlice("gen_ai.response.finish_reasons", []string{"stop", "length"})},
		Events: []sdktrace.Event{{Name: "kneecap.grant", Time: t0.Add(time.Millisecond)}, {Name: "kneecap.first_token", Time: t0.Add(time.Second)}},
		Status: sdktrace.Status{Code: codes.Error, Description: "engine_error"}}

	req := exportOnce(t, tr, c, func() {
		tr.End(e)  // written from e, the SDK's span still open
		e.EndSDK() // the same span through the SDK: its snapshot, to the queue
	})
	if tr.Exported() != 2 || tr.Dropped() != 0 {
		t.Fatalf("exported %d, dropped %d", tr.Exported(), tr.Dropped())
	}
	spans := req.GetResourceSpans()[0].GetScopeSpans()[0].GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%s", prototext.Format(req))
	}
	if !proto.Equal(spans[0], spans[1]) {
		t.Errorf("written from Ended:\n%s\nthrough the SDK:\n%s", prototext.Format(spans[0]), prototext.Format(spans[1]))
	}
	if got := spans[0].GetParentSpanId(); len(got) != 8 || got[0] != 4 || len(spans[0].GetEvents()) != 2 || spans[0].GetName() != "chat m" {
		t.Errorf("%s", prototext.Format(spans[0]))
	}
}

// TestEndedUnderLimits: span limits that would cut a gateway's span
// (OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT below its attributes) send every span
// through the SDK, which applies them: a span of 4 attributes leaves with
// 2 and 2 counted as dropped.
func TestEndedUnderLimits(t *testing.T) {
	t.Setenv("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "2")
	tr, c := capturedTracer(t)
	if tr.direct {
		t.Error("End writes spans itself under an attribute count limit of 2")
	}
	_, s := tr.Tracer().Start(context.Background(), "chat")
	e := &Ended{Span: s, Name: "chat m", End: time.Now(), Attributes: []attribute.KeyValue{
		attribute.Int("a", 1), attribute.Int("b", 2), attribute.Int("c", 3), attribute.Int("d", 4)}}
	req := exportOnce(t, tr, c, func() { tr.End(e) })
	sp := req.GetResourceSpans()[0].GetScopeSpans()[0].GetSpans()[0]
	if len(sp.GetAttributes()) != 2 || sp.GetDroppedAttributesCount() != 2 || sp.GetName() != "chat m" {
		t.Errorf("%s", prototext.Format(sp))
	}
	if !directLimits(sdktrace.SpanLimits{AttributeCountLimit: -1, AttributeValueLengthLimit: -1, EventCountLimit: 128}) ||
		directLimits(sdktrace.SpanLimits{AttributeCountLimit: 128, AttributeValueLengthLimit: 100, EventCountLimit: 128}) ||
		directLimits(sdktrace.SpanLimits{AttributeCountLimit: 128, AttributeValueLengthLimit: -1, EventCountLimit: 1}) {
		t.Error("directLimits")
	}
}

// TestEndedKeepsWhatTheSpanHolds: a span given attributes and a link at
// its start (which an Ended does not carry) ends through the SDK, which
// keeps them beside the Ended's.
func TestEndedKeepsWhatTheSpanHolds(t *testing.T) {
	tr, c := capturedTracer(t)
	link := trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{9}})}
	_, s := tr.Tracer().Start(context.Background(), "chat", trace.WithAttributes(attribute.String("server.address", "e")), trace.WithLinks(link))
	e := &Ended{Span: s, Name: "chat m", End: time.Now(), Attributes: []attribute.KeyValue{attribute.Int("a", 1)}}
	req := exportOnce(t, tr, c, func() { tr.End(e) })
	sp := req.GetResourceSpans()[0].GetScopeSpans()[0].GetSpans()[0]
	if len(sp.GetAttributes()) != 2 || len(sp.GetLinks()) != 1 || sp.GetName() != "chat m" {
		t.Errorf("%s", prototext.Format(sp))
	}
}

// capturedTracer is a tracer exporting to a capture (export_test.go) only
// when Run ends (the schedule delay is a minute).
func capturedTracer(t *testing.T) (*Tracer, *capture) {
	t.Helper()
	c, url := newCapture(t)
	cfg, err := FromEnv(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_BSP_SCHEDULE_DELAY": "60000"})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tr, c
}

// exportOnce runs tr with end deferred to its goroutine, ends it (which
// flushes) and returns its one export, decoded.
func exportOnce(t *testing.T, tr *Tracer, c *capture, end func()) *coltracepb.ExportTraceServiceRequest {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = tr.Run(ctx); close(done) }()
	if !tr.Defer(end) {
		t.Fatal("Defer refused")
	}
	cancel()
	<-done
	var req coltracepb.ExportTraceServiceRequest
	if len(c.bodies) != 1 {
		t.Fatalf("%d exports", len(c.bodies))
	}
	if err := proto.Unmarshal(c.bodies[0], &req); err != nil {
		t.Fatal(err)
	}
	return &req
}
