package tracing

import (
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// encoder writes the SDK's ended spans as an OTLP
// ExportTraceServiceRequest in protobuf (opentelemetry-proto's
// collector/trace/v1), the bytes the official exporter sends, without its
// step through the generated message types: that step allocates a few
// objects per attribute, and with them it was most of a span's cost on
// the exporter's goroutine. The message is the one the official
// exporter's transform builds, field for field (TestEncoderMatchesOTLP
// decodes both with the official proto package and compares them);
// strings that are not valid UTF-8, which the official exporter cannot
// marshal at all (it fails the whole batch), have their bad bytes
// replaced. An encoder is reused from export to export by one goroutine;
// its buffer is kept.
type encoder struct {
	b    []byte
	done []bool // spans already written, by index into the batch
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

// request encodes spans as one ExportTraceServiceRequest and returns its
// bytes, valid until the next call. Spans are grouped by resource and then
// by instrumentation scope, in the order they first appear (the SDK's
// spans of one provider share both).
func (e *encoder) request(spans []sdktrace.ReadOnlySpan) []byte {
	e.b = e.b[:0]
	e.done = slices.Grow(e.done[:0], len(spans))[:len(spans)]
	clear(e.done)
	for i, s := range spans {
		if e.done[i] || s == nil {
			continue
		}
		res := s.Resource()
		rkey := equivalent(res)
		rs := len(e.b)
		if res != nil {
			r := len(e.b)
			e.attributes(fResourceAttributes, res.Attributes()) // in key order, as res.Iter
			e.end(fResourceSpansResource, r)
		}
		for j := i; j < len(spans); j++ {
			if e.done[j] || spans[j] == nil || equivalent(spans[j].Resource()) != rkey {
				continue
			}
			scope := spans[j].InstrumentationScope()
			ss := len(e.b)
			e.scope(scope)
			for k := j; k < len(spans); k++ {
				if e.done[k] || spans[k] == nil || spans[k].InstrumentationScope() != scope || equivalent(spans[k].Resource()) != rkey {
					continue
				}
				e.span(spans[k])
				e.done[k] = true
			}
			e.string(fScopeSpansSchemaURL, scope.SchemaURL)
			e.end(fResourceSpansScopeSpans, ss)
		}
		if res != nil {
			e.string(fResourceSpansSchemaURL, res.SchemaURL())
		}
		e.end(fRequestResourceSpans, rs)
	}
	return e.b
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

func (e *encoder) span(s sdktrace.ReadOnlySpan) {
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

// flags is a span's or link's SpanFlags: the W3C flags, and whether the
// parent (or the linked span) is remote.
func flags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | flagHasIsRemote
	if parent.IsRemote() {
		f |= flagIsRemote
	}
	return f
}

// spanKind is SpanKind's value in the proto's enum (unspecified is 0).
func spanKind(k trace.SpanKind) int {
	switch k {
	case trace.SpanKindInternal, trace.SpanKindServer, trace.SpanKindClient, trace.SpanKindProducer, trace.SpanKindConsumer:
		return int(k) // the API's values are the proto's
	}
	return 0
}

// statusCode is the proto's: unset 0, ok 1, error 2.
func statusCode(c codes.Code) int {
	switch c {
	case codes.Ok:
		return 1
	case codes.Error:
		return 2
	}
	return 0
}

func unixNano(n int64) uint64 { return uint64(max(0, n)) }

func clampUint32(v int) uint64 {
	return uint64(min(max(v, 0), math.MaxUint32))
}

// attributes writes each attribute as a KeyValue field num.
func (e *encoder) attributes(num protowire.Number, kvs []attribute.KeyValue) {
	for _, kv := range kvs {
		e.keyValue(num, string(kv.Key), kv.Value)
	}
}

// keyValue writes a KeyValue; a scalar value's lengths are known in
// advance, so that only arrays and maps are moved into place.
func (e *encoder) keyValue(num protowire.Number, key string, v attribute.Value) {
	key = valid(key)
	n, ok := scalarSize(v)
	if !ok {
		start := len(e.b)
		e.string(fKeyValueKey, key)
		vs := len(e.b)
		e.value(v)
		e.end(fKeyValueValue, vs)
		e.end(num, start)
		return
	}
	size := sizeBytes(fKeyValueKey, len(key)) + sizeBytes(fKeyValueValue, n)
	if key == "" {
		size -= sizeBytes(fKeyValueKey, 0)
	}
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	e.b = protowire.AppendVarint(e.b, uint64(size))
	e.string(fKeyValueKey, key)
	e.b = protowire.AppendTag(e.b, fKeyValueValue, protowire.BytesType)
	e.b = protowire.AppendVarint(e.b, uint64(n))
	e.value(v)
}

// sizeBytes is the size of a length-delimited field of n bytes.
func sizeBytes(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// scalarSize is the size of the AnyValue of a value that is not an array
// or a map; false for those.
func scalarSize(v attribute.Value) (int, bool) {
	switch v.Type() {
	case attribute.BOOL:
		return 2, true
	case attribute.INT64: // a oneof's member is written even when zero
		return 1 + protowire.SizeVarint(uint64(v.AsInt64())), true
	case attribute.FLOAT64:
		return 9, true
	case attribute.STRING:
		return sizeBytes(fAnyString, len(valid(v.AsString()))), true
	case attribute.EMPTY:
		return 0, true
	case attribute.BOOLSLICE, attribute.INT64SLICE, attribute.FLOAT64SLICE, attribute.STRINGSLICE,
		attribute.BYTESLICE, attribute.SLICE, attribute.MAP:
		return 0, false
	}
	return sizeBytes(fAnyString, len("INVALID")), true
}

// value writes an AnyValue's fields (the oneof member), as the official
// transform maps attribute types to them.
func (e *encoder) value(v attribute.Value) {
	switch v.Type() {
	case attribute.BOOL:
		e.b = protowire.AppendTag(e.b, fAnyBool, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		e.b = protowire.AppendTag(e.b, fAnyInt, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		e.b = protowire.AppendTag(e.b, fAnyDouble, protowire.Fixed64Type)
		e.b = protowire.AppendFixed64(e.b, math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		e.b = protowire.AppendTag(e.b, fAnyString, protowire.BytesType)
		e.b = protowire.AppendString(e.b, valid(v.AsString()))
	case attribute.BYTESLICE:
		e.b = protowire.AppendTag(e.b, fAnyBytes, protowire.BytesType)
		e.b = protowire.AppendBytes(e.b, v.AsByteSlice())
	case attribute.EMPTY:
	case attribute.BOOLSLICE:
		e.array(len(v.AsBoolSlice()), func(i int) attribute.Value { return attribute.BoolValue(v.AsBoolSlice()[i]) })
	case attribute.INT64SLICE:
		s := v.AsInt64Slice()
		e.array(len(s), func(i int) attribute.Value { return attribute.Int64Value(s[i]) })
	case attribute.FLOAT64SLICE:
		s := v.AsFloat64Slice()
		e.array(len(s), func(i int) attribute.Value { return attribute.Float64Value(s[i]) })
	case attribute.STRINGSLICE:
		s := v.AsStringSlice()
		e.array(len(s), func(i int) attribute.Value { return attribute.StringValue(s[i]) })
	case attribute.SLICE:
		s := v.AsSlice()
		e.array(len(s), func(i int) attribute.Value { return s[i] })
	case attribute.MAP:
		start := len(e.b)
		e.attributes(fKVListValues, v.AsMap())
		e.end(fAnyKVList, start)
	default:
		e.b = protowire.AppendTag(e.b, fAnyString, protowire.BytesType)
		e.b = protowire.AppendString(e.b, "INVALID")
	}
}

// array writes an ArrayValue of n values (an AnyValue each; the empty
// array too).
func (e *encoder) array(n int, at func(int) attribute.Value) {
	start := len(e.b)
	for i := range n {
		vs := len(e.b)
		e.value(at(i))
		e.end(fArrayValues, vs)
	}
	e.end(fAnyArray, start)
}

// string writes a string field unless it is empty (proto3's default is
// not sent).
func (e *encoder) string(num protowire.Number, s string) {
	if s == "" {
		return
	}
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	e.b = protowire.AppendString(e.b, valid(s))
}

func (e *encoder) bytes(num protowire.Number, b []byte) {
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	e.b = protowire.AppendBytes(e.b, b)
}

// uint writes a varint field unless it is zero.
func (e *encoder) uint(num protowire.Number, v uint64) {
	if v == 0 {
		return
	}
	e.b = protowire.AppendTag(e.b, num, protowire.VarintType)
	e.b = protowire.AppendVarint(e.b, v)
}

func (e *encoder) fixed64(num protowire.Number, v uint64) {
	if v == 0 {
		return
	}
	e.b = protowire.AppendTag(e.b, num, protowire.Fixed64Type)
	e.b = protowire.AppendFixed64(e.b, v)
}

func (e *encoder) fixed32(num protowire.Number, v uint32) {
	if v == 0 {
		return
	}
	e.b = protowire.AppendTag(e.b, num, protowire.Fixed32Type)
	e.b = protowire.AppendFixed32(e.b, v)
}

// valid is s, or s with each run of bytes that is not UTF-8 replaced by
// U+FFFD: a proto3 string must be UTF-8, and a decoder may refuse the
// whole request otherwise.
func valid(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
