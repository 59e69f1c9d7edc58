// Package otlptest is an OTLP/HTTP trace receiver for tests: an
// httptest server on 127.0.0.1 that decodes every export
// (ExportTraceServiceRequest, protobuf, gzip or not) with the official
// proto package and keeps its spans, so that a test checks what a
// collector would receive. Discard is one that reads and drops exports,
// for benchmarks.
//
// A Receiver is safe for concurrent use; the test that made it owns it
// (closed in t.Cleanup).
package otlptest

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, decoded.
type Span struct {
	Name                      string
	TraceID, SpanID, ParentID string // hex; ParentID "" for a root
	Kind                      string // SPAN_KIND_SERVER, ...
	Start, End                time.Time
	Attrs, Resource           map[string]any // string, bool, int64, float64 or []string
	Events                    []Event
	StatusCode, StatusMessage string
	Scope                     string
}

// Event is a span event.
type Event struct {
	Name string
	Time time.Time
}

// Receiver is an OTLP/HTTP trace receiver (see the package doc).
type Receiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []Span
	n   int // exports received
}

// NewReceiver starts a receiver, closed when the test ends.
func NewReceiver(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

// URL returns the receiver's base URL (what OTEL_EXPORTER_OTLP_ENDPOINT
// takes; it serves /v1/traces).
func (r *Receiver) URL() string { return r.srv.URL }

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.NotFound(w, req)
		return
	}
	b, err := ReadBody(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	spans := decode(&msg)
	r.mu.Lock()
	r.got = append(r.got, spans...)
	r.n++
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func decode(msg *coltracepb.ExportTraceServiceRequest) []Span {
	var out []Span
	for _, rs := range msg.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Name: s.GetName(), TraceID: fmt.Sprintf("%x", s.GetTraceId()), SpanID: fmt.Sprintf("%x", s.GetSpanId()),
					ParentID: fmt.Sprintf("%x", s.GetParentSpanId()), Kind: s.GetKind().String(),
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano())),
					Attrs: attrs(s.GetAttributes()), Resource: res, Scope: ss.GetScope().GetName(),
					StatusCode: s.GetStatus().GetCode().String(), StatusMessage: s.GetStatus().GetMessage(),
				}
				for _, e := range s.GetEvents() {
					sp.Events = append(sp.Events, Event{Name: e.GetName(), Time: time.Unix(0, int64(e.GetTimeUnixNano()))})
				}
				out = append(out, sp)
			}
		}
	}
	return out
}

func attrs(kvs []*commonpb.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.GetStringValue()
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = v.GetBoolValue()
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = v.GetIntValue()
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = v.GetDoubleValue()
		case *commonpb.AnyValue_ArrayValue:
			var ss []string
			for _, e := range v.GetArrayValue().GetValues() {
				ss = append(ss, e.GetStringValue())
			}
			m[kv.GetKey()] = ss
		}
	}
	return m
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// Exports returns the number of exports received.
func (r *Receiver) Exports() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// Wait waits up to timeout for n spans and returns those received; it
// fails the test with fewer.
func (r *Receiver) Wait(t testing.TB, n int, timeout time.Duration) []Span {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := r.Spans()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spans received within %v, want %d", len(got), timeout, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Discard is an OTLP/HTTP receiver that reads every export and answers
// it with an empty success, decoding nothing, closed when the test ends.
func Discard(t testing.TB) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// String renders the span as a collector's debug exporter would, one
// attribute a line in key order: for docs and test logs.
func (s Span) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Span %q kind=%s trace=%s span=%s parent=%s\n", s.Name, strings.TrimPrefix(s.Kind, "SPAN_KIND_"), s.TraceID, s.SpanID, s.ParentID)
	fmt.Fprintf(&b, "  duration=%v status=%s", s.End.Sub(s.Start).Round(time.Microsecond), strings.TrimPrefix(s.StatusCode, "STATUS_CODE_"))
	if s.StatusMessage != "" {
		fmt.Fprintf(&b, " %q", s.StatusMessage)
	}
	b.WriteByte('\n')
	keys := make([]string, 0, len(s.Attrs))
	for k := range s.Attrs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s: %v\n", k, s.Attrs[k])
	}
	for _, e := range s.Events {
		fmt.Fprintf(&b, "  event %s at +%v\n", e.Name, e.Time.Sub(s.Start).Round(time.Microsecond))
	}
	return b.String()
}

// ReadBody reads an export request's body, gunzipped when its
// Content-Encoding is gzip.
func ReadBody(req *http.Request) ([]byte, error) {
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			return nil, err
		}
		body = gz
	}
	return io.ReadAll(body)
}
