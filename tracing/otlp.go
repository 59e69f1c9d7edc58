package tracing

import (
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// encoder writes ended spans (the SDK's, or kneecap's own: Ended) as an OTLP
// ExportTraceServiceRequest in protobuf (opentelemetry-proto's
// collector/trace/v1), the bytes the official exporter sends, without its
// step through the generated message types: that step allocates a few
// objects per attribute, and with them it was most of a span's cost on
// the exporter's goroutine. The message is the one the official
// exporter's transform builds, field for field (TestEncoderMatchesOTLP
// decodes both with the official proto package and compares them);
// strings that are not valid UTF-8, which the official exporter cannot
// marshal at all (it fails the whole batch), have their bad bytes
// replaced.
//
// Spans are encoded as they are staged (stage), each into a Span message
// kept in one buffer, so that the SDK's objects of an ended span live no
// longer than its staging; request wraps the oldest of them in their
// resource and scope. An encoder is used by one goroutine at a time, and
// keeps its buffers from request to request.
type encoder struct {
	spans  []byte  // the staged spans' Span messages, each a ScopeSpans field
	ends   []int   // where each staged span's message ends in spans
	group  []int   // each staged span's group (groups)
	groups []group // the resources and scopes of the staged spans
	b      []byte  // the last request
	done   []bool  // request's spans already written
}

// group is a resource and an instrumentation scope.
type group struct {
	res   *resource.Resource
	rkey  attribute.Distinct
	scope instrumentation.Scope
}

// Field numbers of opentelemetry-proto (v1) that the encoder writes.
const (
	fRequestResourceSpans = 1 // ExportTraceServiceRequest

	fResourceSpansResource   = 1 // ResourceSpans
	fResourceSpansScopeSpans = 2
	fResourceSpansSchemaURL  = 3

	fResourceAttributes = 1 // Resource
	fResourceDropped    = 2

	fScopeSpansScope     = 1 // ScopeSpans
	fScopeSpansSpans     = 2
	fScopeSpansSchemaURL = 3

	fScopeName       = 1 // InstrumentationScope
	fScopeVersion    = 2
	fScopeAttributes = 3

	fSpanTraceID      = 1 // Span
	fSpanSpanID       = 2
	fSpanTraceState   = 3
	fSpanParentSpanID = 4
	fSpanName         = 5
	fSpanKind         = 6
	fSpanStart        = 7
	fSpanEnd          = 8
	fSpanAttributes   = 9
	fSpanDroppedAttrs = 10
	fSpanEvents       = 11
	fSpanDroppedEvts  = 12
	fSpanLinks        = 13
	fSpanDroppedLinks = 14
	fSpanStatus       = 15
	fSpanFlags        = 16

	fStatusMessage = 2 // Status
	fStatusCode    = 3

	fEventTime         = 1 // Span.Event
	fEventName         = 2
	fEventAttributes   = 3
	fEventDroppedAttrs = 4

	fLinkTraceID      = 1 // Span.Link
	fLinkSpanID       = 2
	fLinkAttributes   = 4
	fLinkDroppedAttrs = 5
	fLinkFlags        = 6

	fKeyValueKey   = 1 // KeyValue
	fKeyValueValue = 2

	fAnyString = 1 // AnyValue's oneof
	fAnyBool   = 2
	fAnyInt    = 3
	fAnyDouble = 4
	fAnyArray  = 5
	fAnyKVList = 6
	fAnyBytes  = 7

	fArrayValues  = 1 // ArrayValue
	fKVListValues = 1 // KeyValueList

	// SpanFlags: the low 8 bits are the W3C trace flags; these two say
	// whether the parent is known to be remote, and whether it is.
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

// staged returns the number of spans staged.
func (e *encoder) staged() int { return len(e.ends) }

// stage encodes spans after those staged already.
func (e *encoder) stage(spans []sdktrace.ReadOnlySpan) {
	for _, s := range spans {
		if s != nil {
			e.stageOne(s)
		}
	}
}

// stageOne encodes s after the spans staged already.
func (e *encoder) stageOne(s spanView) {
	res := s.Resource()
	g := group{res: res, rkey: equivalent(res), scope: s.InstrumentationScope()}
	gi := slices.IndexFunc(e.groups, func(h group) bool { return h.rkey == g.rkey && h.scope == g.scope })
	if gi < 0 {
		gi = len(e.groups)
		e.groups = append(e.groups, g)
	}
	e.span(s)
	e.ends = append(e.ends, len(e.spans))
	e.group = append(e.group, gi)
}

// request returns the ExportTraceServiceRequest of the n oldest staged
// spans (at most all), valid until the next call, and unstages them.
// Spans are grouped by resource and then by instrumentation scope, in the
// order they first appear (the SDK's spans of one provider share both).
func (e *encoder) request(n int) []byte {
	n = min(n, len(e.ends))
	e.b = e.b[:0]
	e.done = slices.Grow(e.done[:0], n)[:n]
	clear(e.done)
	msg := func(i int) []byte {
		from := 0
		if i > 0 {
			from = e.ends[i-1]
		}
		return e.spans[from:e.ends[i]]
	}
	for i := range n {
		if e.done[i] {
			continue
		}
		g := e.groups[e.group[i]]
		rs := len(e.b)
		if g.res != nil {
			r := len(e.b)
			e.attributes(fResourceAttributes, g.res.Attributes()) // in key order, as res.Iter
			e.end(fResourceSpansResource, r)
		}
		for j := i; j < n; j++ {
			if e.done[j] || e.groups[e.group[j]].rkey != g.rkey {
				continue
			}
			gj := e.group[j]
			scope := e.groups[gj].scope
			ss := len(e.b)
			e.scope(scope)
			for k := j; k < n; k++ {
				if !e.done[k] && e.group[k] == gj {
					e.b = append(e.b, msg(k)...)
					e.done[k] = true
				}
			}
			e.string(fScopeSpansSchemaURL, scope.SchemaURL)
			e.end(fResourceSpansScopeSpans, ss)
		}
		if g.res != nil {
			e.string(fResourceSpansSchemaURL, g.res.SchemaURL())
		}
		e.end(fRequestResourceSpans, rs)
	}
	e.unstage(n)
	return e.b
}

// unstage drops the n oldest staged spans.
func (e *encoder) unstage(n int) {
	if n == 0 {
		return
	}
	cut := e.ends[n-1]
	rest := copy(e.spans, e.spans[cut:])
	e.spans = e.spans[:rest]
	m := copy(e.ends, e.ends[n:])
	e.ends = e.ends[:m]
	for i := range e.ends {
		e.ends[i] -= cut
	}
	e.group = e.group[:copy(e.group, e.group[n:])]
	if len(e.ends) == 0 {
		clear(e.groups) // let the resources go
		e.groups = e.groups[:0]
	}
}

func equivalent(r *resource.Resource) attribute.Distinct {
	if r == nil {
		return attribute.Distinct{}
	}
	return r.Equivalent()
}

// end makes the bytes written since start the value of field num, a
// length-delimited field, by moving them behind its tag and length.
func (e *encoder) end(num protowire.Number, start int) {
	n := len(e.b) - start
	var hdr [16]byte
	h := protowire.AppendTag(hdr[:0], num, protowire.BytesType)
	h = protowire.AppendVarint(h, uint64(n))
	e.b = append(e.b, h...)
	copy(e.b[start+len(h):], e.b[start:start+n])
	copy(e.b[start:], h)
}

func (e *encoder) scope(s instrumentation.Scope) {
	if s == (instrumentation.Scope{}) {
		return // the official transform sends no scope then
	}
	start := len(e.b)
	e.string(fScopeName, s.Name)
	e.string(fScopeVersion, s.Version)
	e.attributes(fScopeAttributes, s.Attributes.ToSlice())
	e.end(fScopeSpansScope, start)
}

// span appends s's Span message, a ScopeSpans field, to e.spans.
func (e *encoder) span(s spanView) {
	e.b, e.spans = e.spans, e.b // the field writers append to e.b
	defer func() { e.b, e.spans = e.spans, e.b }()
	start := len(e.b)
	sc, parent := s.SpanContext(), s.Parent()
	tid, sid := sc.TraceID(), sc.SpanID()
	e.bytes(fSpanTraceID, tid[:])
	e.bytes(fSpanSpanID, sid[:])
	if ts := sc.TraceState(); ts.Len() > 0 {
		e.string(fSpanTraceState, ts.String())
	}
	if psid := parent.SpanID(); psid.IsValid() {
		e.bytes(fSpanParentSpanID, psid[:])
	}
	e.string(fSpanName, s.Name())
	e.uint(fSpanKind, uint64(spanKind(s.SpanKind())))
	e.fixed64(fSpanStart, unixNano(s.StartTime().UnixNano()))
	e.fixed64(fSpanEnd, unixNano(s.EndTime().UnixNano()))
	e.attributes(fSpanAttributes, s.Attributes())
	e.uint(fSpanDroppedAttrs, clampUint32(s.DroppedAttributes()))
	for _, ev := range s.Events() {
		es := len(e.b)
		e.fixed64(fEventTime, unixNano(ev.Time.UnixNano()))
		e.string(fEventName, ev.Name)
		e.attributes(fEventAttributes, ev.Attributes)
		e.uint(fEventDroppedAttrs, clampUint32(ev.DroppedAttributeCount))
		e.end(fSpanEvents, es)
	}
	e.uint(fSpanDroppedEvts, clampUint32(s.DroppedEvents()))
	for _, l := range s.Links() {
		ls := len(e.b)
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		e.bytes(fLinkTraceID, ltid[:])
		e.bytes(fLinkSpanID, lsid[:])
		// No trace_state (fLinkTraceState): the official transform sends
		// none for a link. kneecap's spans have no links.
		e.attributes(fLinkAttributes, l.Attributes)
		e.uint(fLinkDroppedAttrs, clampUint32(l.DroppedAttributeCount))
		e.fixed32(fLinkFlags, flags(l.SpanContext.TraceFlags(), l.SpanContext))
		e.end(fSpanLinks, ls)
	}
	e.uint(fSpanDroppedLinks, clampUint32(s.DroppedLinks()))
	st := s.Status()
	ss := len(e.b) // present even when unset, as the official transform sends it
	e.string(fStatusMessage, st.Description)
	e.uint(fStatusCode, uint64(statusCode(st.Code)))
	e.end(fSpanStatus, ss)
	e.fixed32(fSpanFlags, flags(sc.TraceFlags(), parent))
	e.end(fScopeSpansSpans, start)
}
