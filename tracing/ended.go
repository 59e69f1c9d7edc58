package tracing

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Ended is how a span ends: what the proxy knows of a request once it has
// ended, for a span the Tracer started and that is still open. [Tracer.End]
// writes it to the exporter as it is, without the SDK's span keeping it
// first; [Ended.EndSDK] sets it on the SDK's span and ends that.
type Ended struct {
	Span       trace.Span // started by the Tracer; recording
	Name       string
	End        time.Time
	Attributes []attribute.KeyValue // unique keys, each valid
	Events     []sdktrace.Event
	Status     sdktrace.Status
}

// EndSDK sets e's name, attributes, events and status on its SDK span and
// ends it at e.End, as the SDK's API does it: the span's processors get
// the SDK's snapshot of it.
func (e *Ended) EndSDK() {
	s := e.Span
	s.SetName(e.Name)
	s.SetAttributes(e.Attributes...)
	for _, ev := range e.Events {
		s.AddEvent(ev.Name, trace.WithTimestamp(ev.Time), trace.WithAttributes(ev.Attributes...))
	}
	if e.Status.Code != 0 {
		s.SetStatus(e.Status.Code, e.Status.Description)
	}
	s.End(trace.WithTimestamp(e.End))
}

// End ends e's span. With kneecap's exporter (http/protobuf) and the SDK's
// default span limits (or limits that cut nothing of a gateway's span) it
// is encoded from e at once, into the batch it will leave with: the SDK's
// span gives its identity, parent, kind, start, resource and scope, and is
// not ended (nothing of the SDK keeps an open span: it is let go), so that
// the SDK's work of an end (its copy and deduplication of the attributes,
// its events and snapshot, about half of what a span cost before) is not
// done. Otherwise, for a span that is not the SDK's, or one that holds
// attributes, events or links of its own (given at its start: Ended does
// not carry them), it is EndSDK.
//
// End is called only by an end given to Defer, on Run's goroutine, which
// owns the exporter; e and its slices are not kept after it returns. A
// span that finds the queue full is dropped and counted, as in OnEnd.
func (t *Tracer) End(e *Ended) {
	ro, ok := e.Span.(sdktrace.ReadOnlySpan)
	if !ok || !t.direct || !e.Span.IsRecording() || !e.Span.SpanContext().IsSampled() {
		e.EndSDK()
		return
	}
	if len(ro.Attributes()) > 0 || len(ro.Events()) > 0 || len(ro.Links()) > 0 {
		e.EndSDK()
		return
	}
	t.q.stageEnded(endedSpan{Ended: e, ro: ro})
}

// directLimits reports whether the SDK's span limits of the environment
// (OTEL_SPAN_*_LIMIT, OTEL_ATTRIBUTE_*_LIMIT, which the SDK applies) leave
// a gateway's span as it is: no more than 64 attributes, strings of up to
// 256 bytes and 2 events, without attributes, are kept whole. Then End may
// write spans without the SDK's span applying them.
func directLimits(l sdktrace.SpanLimits) bool {
	fits := func(limit, need int) bool { return limit < 0 || limit >= need }
	return fits(l.AttributeCountLimit, 64) && fits(l.AttributeValueLengthLimit, 256) && fits(l.EventCountLimit, 2)
}

// spanView is what the encoder reads of a span: an sdktrace.ReadOnlySpan's
// methods, which endedSpan has too.
type spanView interface {
	SpanContext() trace.SpanContext
	Parent() trace.SpanContext
	Name() string
	SpanKind() trace.SpanKind
	StartTime() time.Time
	EndTime() time.Time
	Attributes() []attribute.KeyValue
	DroppedAttributes() int
	Events() []sdktrace.Event
	DroppedEvents() int
	Links() []sdktrace.Link
	DroppedLinks() int
	Status() sdktrace.Status
	Resource() *resource.Resource
	InstrumentationScope() instrumentation.Scope
}

var (
	_ spanView = sdktrace.ReadOnlySpan(nil)
	_ spanView = endedSpan{}
)

// endedSpan is an Ended read as the encoder reads a span: what Ended has
// from it, the rest from the SDK's open span.
type endedSpan struct {
	*Ended
	ro sdktrace.ReadOnlySpan
}

func (s endedSpan) SpanContext() trace.SpanContext              { return s.ro.SpanContext() }
func (s endedSpan) Parent() trace.SpanContext                   { return s.ro.Parent() }
func (s endedSpan) Name() string                                { return s.Ended.Name }
func (s endedSpan) SpanKind() trace.SpanKind                    { return s.ro.SpanKind() }
func (s endedSpan) StartTime() time.Time                        { return s.ro.StartTime() }
func (s endedSpan) EndTime() time.Time                          { return s.Ended.End }
func (s endedSpan) Attributes() []attribute.KeyValue            { return s.Ended.Attributes }
func (s endedSpan) DroppedAttributes() int                      { return 0 }
func (s endedSpan) Events() []sdktrace.Event                    { return s.Ended.Events }
func (s endedSpan) DroppedEvents() int                          { return 0 }
func (s endedSpan) Links() []sdktrace.Link                      { return nil }
func (s endedSpan) DroppedLinks() int                           { return 0 }
func (s endedSpan) Status() sdktrace.Status                     { return s.Ended.Status }
func (s endedSpan) Resource() *resource.Resource                { return s.ro.Resource() }
func (s endedSpan) InstrumentationScope() instrumentation.Scope { return s.ro.InstrumentationScope() }
