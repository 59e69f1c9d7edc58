package tracing

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/kneecap/kneecap/tracing/otlptest"
)

// capture is a collector that keeps each export's body (unzipped), its
// headers, and answers with status (200 when 0) and header.
type capture struct {
	mu      sync.Mutex
	bodies  [][]byte
	headers []http.Header
	status  []int // the answers to give, in order; 200 after them
	retryAf string
}

func (c *capture) serve(w http.ResponseWriter, r *http.Request) {
	b, err := otlptest.ReadBody(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.bodies = append(c.bodies, b)
	c.headers = append(c.headers, r.Header.Clone())
	status := http.StatusOK
	if len(c.status) > 0 {
		status, c.status = c.status[0], c.status[1:]
	}
	c.mu.Unlock()
	if c.retryAf != "" && status != http.StatusOK {
		w.Header().Set("Retry-After", c.retryAf)
	}
	w.WriteHeader(status)
}

func newCapture(t *testing.T, status ...int) (*capture, string) {
	c := &capture{status: status}
	srv := httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(srv.Close)
	return c, srv.URL + "/v1/traces"
}

// testSpans are spans with every field the encoder writes: attributes of
// every type (invalid UTF-8 aside, which the official exporter cannot
// marshal), events, links, a remote parent, a trace state, dropped
// counts, two resources and two scopes.
func testSpans(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	res1 := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0", attribute.String("service.name", "kneecap"), attribute.Int("a", 1))
	res2 := resource.NewSchemaless(attribute.String("service.name", "other"))
	scope1 := instrumentation.Scope{Name: ScopeName}
	scope2 := instrumentation.Scope{Name: "s2", Version: "v1", SchemaURL: "https://x/schema", Attributes: attribute.NewSet(attribute.Bool("b", true))}
	ts, err := trace.ParseTraceState("k=v,k2=v2")
	if err != nil {
		t.Fatal(err)
	}
	tid := trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	sc := func(sid byte, remote bool) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{sid, 1}, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: remote})
	}
	t0 := time.Unix(1700000000, 123456789)
	all := []attribute.KeyValue{
		attribute.String("s", "chat m"), attribute.String("empty", ""), attribute.Bool("t", true), attribute.Bool("f", false),
		attribute.Int("zero", 0), attribute.Int("n", 300), attribute.Int64("neg", -7), attribute.Float64("x", 0.25), attribute.Float64("fz", 0),
		attribute.StringSlice("ss", []string{"stop", "length", ""}), attribute.IntSlice("is", []int{1, -2}), attribute.Float64Slice("fs", []float64{1.5}),
		attribute.BoolSlice("bs", []bool{true, false}), attribute.StringSlice("none", nil),
		{Key: attribute.Key("k" + strings.Repeat("x", 200)), Value: attribute.StringValue(strings.Repeat("y", 300))},
	}
	stubs := tracetest.SpanStubs{
		{
			Name: "chat m", SpanContext: sc(1, false), Parent: sc(2, true), SpanKind: trace.SpanKindServer,
			StartTime: t0, EndTime: t0.Add(1500 * time.Millisecond), Attributes: all,
			Events: []sdktrace.Event{{Name: "kneecap.grant", Time: t0.Add(time.Millisecond)}, {Name: "e2", Time: t0.Add(2 * time.Millisecond), Attributes: all[:3], DroppedAttributeCount: 2}},
			Links:  []sdktrace.Link{{SpanContext: sc(3, true), Attributes: all[5:7], DroppedAttributeCount: 1}, {SpanContext: sc(4, false)}},
			Status: sdktrace.Status{Code: codes.Error, Description: "engine_error"}, DroppedAttributes: 3, DroppedEvents: 4, DroppedLinks: 5,
			Resource: res1, InstrumentationScope: scope1,
		},
		{Name: "", SpanContext: sc(5, false), SpanKind: trace.SpanKindInternal, StartTime: t0, EndTime: t0, Resource: res2, InstrumentationScope: scope1},
		{Name: "b", SpanContext: sc(6, false), Parent: sc(1, false), SpanKind: trace.SpanKindClient, StartTime: t0, EndTime: t0.Add(time.Second), Status: sdktrace.Status{Code: codes.Ok}, Resource: res1, InstrumentationScope: scope2},
		{Name: "c", SpanContext: sc(7, false), SpanKind: trace.SpanKindUnspecified, Resource: res1, InstrumentationScope: scope1},
		{Name: "d", SpanContext: sc(8, false), Resource: res2, InstrumentationScope: scope2, Attributes: all[:2]},
	}
	return stubs.Snapshots()
}

// TestEncoderMatchesOTLP: the exporter's request is, decoded with the
// official proto package, the message the official exporter sends for
// the same spans, plain and gzipped, with the same headers.
func TestEncoderMatchesOTLP(t *testing.T) {
	spans := testSpans(t)
	for _, gz := range []bool{false, true} {
		ours, oursURL := newCapture(t)
		theirs, theirsURL := newCapture(t)
		client := &http.Client{Transport: &http.Transport{}}
		t.Cleanup(client.CloseIdleConnections)
		hdr := map[string]string{"Authorization": "Bearer k", "x-tenant": "t1"}
		e := newExporter(oursURL, hdr, gz, client)
		comp := otlptracehttp.NoCompression
		if gz {
			comp = otlptracehttp.GzipCompression
		}
		official, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(theirsURL), otlptracehttp.WithHTTPClient(client),
			otlptracehttp.WithHeaders(hdr), otlptracehttp.WithCompression(comp))
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // the second reuses the buffers
			if err := e.ExportSpans(context.Background(), spans); err != nil {
				t.Fatal(err)
			}
		}
		if err := official.ExportSpans(context.Background(), spans); err != nil {
			t.Fatal(err)
		}
		var got, want coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(ours.bodies[1], &got); err != nil {
			t.Fatal(err)
		}
		if err := proto.Unmarshal(theirs.bodies[0], &want); err != nil {
			t.Fatal(err)
		}
		// The official transform orders resources as a map does: compare
		// them in one order.
		for _, m := range []*coltracepb.ExportTraceServiceRequest{&got, &want} {
			slices.SortFunc(m.ResourceSpans, func(a, b *tracepb.ResourceSpans) int {
				return strings.Compare(prototext.Format(a.GetResource()), prototext.Format(b.GetResource()))
			})
		}
		if !proto.Equal(&got, &want) {
			t.Errorf("gzip %v: the request differs from the official exporter's:\n%s\nofficial:\n%s", gz, prototext.Format(&got), prototext.Format(&want))
		}
		for _, h := range []string{"Content-Type", "Content-Encoding", "User-Agent", "Authorization", "X-Tenant"} {
			if g, w := ours.headers[1].Get(h), theirs.headers[0].Get(h); g != w {
				t.Errorf("gzip %v: header %s %q, the official exporter's %q", gz, h, g, w)
			}
		}
		_ = official.Shutdown(context.Background())
	}
}

// TestExporterRetries: 429, 502, 503 and 504 are retried (a Retry-After
// longer than the backoff is waited), other failures are not, and a
// partial success fails the export, as the official exporter does.
func TestExporterRetries(t *testing.T) {
	spans := testSpans(t)[:1]
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	for _, tc := range []struct {
		name     string
		status   []int
		attempts int
		fail     bool
	}{
		{"retried", []int{http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusBadGateway, http.StatusGatewayTimeout}, 5, false},
		{"not retried", []int{http.StatusBadRequest}, 1, true},
		{"server error", []int{http.StatusInternalServerError}, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, u := newCapture(t, tc.status...)
			e := newExporter(u, nil, false, client)
			var waits []time.Duration
			e.wait = func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }
			err := e.ExportSpans(context.Background(), spans)
			if (err != nil) != tc.fail || len(c.bodies) != tc.attempts {
				t.Errorf("err %v after %d attempts, want %d attempts", err, len(c.bodies), tc.attempts)
			}
			// 5 s, then 1.5x, each +-50 %
			for i, d := range waits {
				mid := 5 * time.Second * time.Duration(math.Pow(1.5, float64(i))*1000) / 1000
				if d < mid/2 || d > mid*3/2 {
					t.Errorf("wait %d: %v, want within 50 %% of %v", i, d, mid)
				}
			}
		})
	}
	t.Run("retry-after", func(t *testing.T) {
		c, u := newCapture(t, http.StatusTooManyRequests)
		c.retryAf = "40"
		e := newExporter(u, nil, false, client)
		var waits []time.Duration
		e.wait = func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }
		if err := e.ExportSpans(context.Background(), spans); err != nil || len(c.bodies) != 2 {
			t.Fatalf("err %v after %d attempts", err, len(c.bodies))
		}
		if len(waits) != 1 || waits[0] != 40*time.Second {
			t.Errorf("waited %v, want the collector's Retry-After of 40 s", waits)
		}
	})
	t.Run("context", func(t *testing.T) {
		c, u := newCapture(t, http.StatusServiceUnavailable)
		e := newExporter(u, nil, false, client)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := e.ExportSpans(ctx, spans); err == nil || len(c.bodies) != 0 {
			t.Errorf("err %v after %d attempts with its context ended", err, len(c.bodies))
		}
	})
	t.Run("partial success", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{PartialSuccess: &coltracepb.ExportTracePartialSuccess{RejectedSpans: 1, ErrorMessage: "no"}})
			w.Header().Set("Content-Type", "application/x-protobuf")
			_, _ = w.Write(b)
		}))
		t.Cleanup(srv.Close)
		e := newExporter(srv.URL+"/v1/traces", nil, false, client)
		if err := e.ExportSpans(context.Background(), spans); err == nil || !strings.Contains(err.Error(), "1 spans rejected") {
			t.Errorf("partial success: %v", err)
		}
	})
}

// TestEncoderInvalidUTF8: a string that is not UTF-8 (a model name cut
// within a character, say) reaches the collector with its bad bytes
// replaced, instead of failing the whole export as it does with the
// official exporter.
func TestEncoderInvalidUTF8(t *testing.T) {
	bad := "mod\xe2\x82"
	stubs := tracetest.SpanStubs{{Name: "chat " + bad, SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}}),
		Attributes: []attribute.KeyValue{attribute.String("gen_ai.request.model", bad), attribute.StringSlice(bad, []string{bad})}, Resource: resource.Empty()}}
	var e encoder
	var got coltracepb.ExportTraceServiceRequest
	e.stage(stubs.Snapshots())
	if err := proto.Unmarshal(e.request(1), &got); err != nil {
		t.Fatal(err)
	}
	s := got.GetResourceSpans()[0].GetScopeSpans()[0].GetSpans()[0]
	if s.GetName() != "chat mod\uFFFD" || s.GetAttributes()[0].GetValue().GetStringValue() != "mod\uFFFD" ||
		s.GetAttributes()[1].GetKey() != "mod\uFFFD" || s.GetAttributes()[1].GetValue().GetArrayValue().GetValues()[0].GetStringValue() != "mod\uFFFD" {
		t.Errorf("%s", prototext.Format(s))
	}
}

// TestEncoderStaged: a request takes the oldest staged spans and leaves
// the others for the next one, which carries their own resources and
// scopes.
func TestEncoderStaged(t *testing.T) {
	spans := testSpans(t)
	var e encoder
	e.stage(spans[:3])
	names := func(b []byte) []string {
		var m coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, rs := range m.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					out = append(out, rs.GetResource().GetAttributes()[len(rs.GetResource().GetAttributes())-1].GetValue().GetStringValue()+"/"+ss.GetScope().GetName()+"/"+s.GetName())
				}
			}
		}
		return out
	}
	if got := names(e.request(2)); !slices.Equal(got, []string{"kneecap/" + ScopeName + "/chat m", "other/" + ScopeName + "/"}) {
		t.Errorf("first request: %q", got)
	}
	e.stage(spans[3:])
	if got := names(e.request(10)); !slices.Equal(got, []string{"kneecap/s2/b", "kneecap/" + ScopeName + "/c", "other/s2/d"}) {
		t.Errorf("second request: %q", got)
	}
	if e.staged() != 0 || len(e.groups) != 0 || len(e.spans) != 0 {
		t.Errorf("left staged: %d spans, %d groups, %d bytes", e.staged(), len(e.groups), len(e.spans))
	}
}
