package tracing

// The fields of a Span message: flags, kinds, status codes and attribute
// values, as the official transform maps them (see encoder in otlp.go).

import (
	"math"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

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

// keyValue writes a KeyValue. A scalar value's lengths are known in
// advance, so that it is written in one pass; arrays and maps are moved
// into place (end). Each string is checked for UTF-8 once.
func (e *encoder) keyValue(num protowire.Number, key string, v attribute.Value) {
	key = valid(key)
	var sv string
	var n int // the AnyValue's size
	switch v.Type() {
	case attribute.STRING:
		sv = valid(v.AsString())
		n = 1 + protowire.SizeVarint(uint64(len(sv))) + len(sv)
	case attribute.BOOL:
		n = 2
	case attribute.INT64: // a oneof's member is written even when zero
		n = 1 + protowire.SizeVarint(uint64(v.AsInt64()))
	case attribute.FLOAT64:
		n = 9
	case attribute.EMPTY:
	default: // arrays, maps, bytes, and what the official transform calls INVALID
		start := len(e.b)
		e.string(fKeyValueKey, key)
		vs := len(e.b)
		e.value(v)
		e.end(fKeyValueValue, vs)
		e.end(num, start)
		return
	}
	size := 1 + protowire.SizeVarint(uint64(n)) + n
	if key != "" {
		size += 1 + protowire.SizeVarint(uint64(len(key))) + len(key)
	}
	b := protowire.AppendTag(e.b, num, protowire.BytesType)
	b = appendVarint(b, uint64(size))
	if key != "" {
		b = append(b, fKeyValueKey<<3|byte(protowire.BytesType))
		b = appendVarint(b, uint64(len(key)))
		b = append(b, key...)
	}
	b = append(b, fKeyValueValue<<3|byte(protowire.BytesType))
	b = appendVarint(b, uint64(n))
	switch v.Type() {
	case attribute.STRING:
		b = append(b, fAnyString<<3|byte(protowire.BytesType))
		b = appendVarint(b, uint64(len(sv)))
		b = append(b, sv...)
	case attribute.BOOL:
		b = append(b, fAnyBool<<3|byte(protowire.VarintType), byte(protowire.EncodeBool(v.AsBool())))
	case attribute.INT64:
		b = append(b, fAnyInt<<3|byte(protowire.VarintType))
		b = appendVarint(b, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		b = append(b, fAnyDouble<<3|byte(protowire.Fixed64Type))
		b = protowire.AppendFixed64(b, math.Float64bits(v.AsFloat64()))
	}
	e.b = b
}

// appendVarint is protowire.AppendVarint with the one-byte case inlined.
func appendVarint(b []byte, v uint64) []byte {
	if v < 0x80 {
		return append(b, byte(v))
	}
	return protowire.AppendVarint(b, v)
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
	case attribute.BOOLSLICE: // each As...Slice copies the slice: once
		s := v.AsBoolSlice()
		e.array(len(s), func(i int) attribute.Value { return attribute.BoolValue(s[i]) })
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
	s = valid(s)
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	e.b = appendVarint(e.b, uint64(len(s)))
	e.b = append(e.b, s...)
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
