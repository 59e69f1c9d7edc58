package gateway_test

import (
	"bytes"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kneecap/kneecap/gateway"
	"github.com/kneecap/kneecap/proxy/proxytest"
)

// gatewayStream is a vLLM-shaped stream of n output chunks with the
// include_usage report, as BenchmarkGatewayStream relays.
func gatewayStream(n int) []byte {
	var sb strings.Builder
	sb.WriteString("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n")
	for range n {
		sb.WriteString("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" tok\"},\"finish_reason\":null}]}\n\n")
	}
	sb.WriteString("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n")
	sb.WriteString("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":" +
		strconv.Itoa(n) + ",\"total_tokens\":" + strconv.Itoa(n+5) + "}}\n\n")
	sb.WriteString("data: [DONE]\n\n")
	return []byte(sb.String())
}

// switchEngine is proxytest.MemEngine with a body the test sets per run.
type switchEngine struct{ body []byte }

func (e *switchEngine) RoundTrip(r *http.Request) (*http.Response, error) {
	return proxytest.MemEngine{Body: e.body}.RoundTrip(r)
}

// TestGatewayRelayAllocations is the allocation guard of the whole traffic
// handler as kneecap serve wires it (router, in-flight tracking, admission,
// the gateway's controller with the cap fixed as the relay benchmark sets
// it, the SLO window, the metrics, the class counter): the allocations of
// a streamed request of 64 output chunks, and of 256 chunks more, must not
// grow. Counts, not times: testing.AllocsPerRun (GOMAXPROCS 1), after
// warm-up streams that let the window's sketches and the histograms'
// buckets reach their size.
//
// The bound is what this test measured (-v prints it): 53 allocations for
// a 64-chunk stream (about a dozen of them the test's own: its request and
// writer, MemEngine's response), none for 256 chunks more. A change that
// needs more must say why, and set the bound to its own measurement.
func TestGatewayRelayAllocations(t *testing.T) {
	_, a, more := gatewayAllocs(t)
	const maxPerRequest = 53
	if a > maxPerRequest {
		t.Errorf("%.0f allocations for a stream, want at most %d", a, maxPerRequest)
	}
	if more > 0 {
		t.Errorf("%.0f allocations for more output chunks, want none", more)
	}
}

// TestGatewayTracedRelayAllocations is TestGatewayRelayAllocations with
// every request traced and sampled: a span costs allocations per request
// (-v prints them; the span's end runs later, on the tracer's goroutine,
// which does not run here), and none per chunk: the chunks of a traced
// stream allocate nothing more than an untraced one's.
func TestGatewayTracedRelayAllocations(t *testing.T) {
	g, _, more := gatewayAllocs(t,
		// Never contacted: the tracer does not run, its queue holds every span.
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1", "OTEL_TRACES_SAMPLER=always_on", "OTEL_BSP_MAX_QUEUE_SIZE=10000")
	if g.Tracing().Dropped() != 0 {
		t.Fatalf("%d spans dropped: the counts are not a traced request's", g.Tracing().Dropped())
	}
	if more > 0 {
		t.Errorf("%.0f allocations for more output chunks, want none", more)
	}
}

// gatewayAllocs builds the gateway with env added to the relay benchmark's
// settings and returns it, the allocations of a streamed request of 64
// output chunks, and those of 256 chunks more.
func gatewayAllocs(t *testing.T, env ...string) (*gateway.Gateway, float64, float64) {
	t.Helper()
	if testing.Short() {
		t.Skip("warm-up streams")
	}
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	cfg, err := gateway.ConfigFromEnv(append([]string{"KNEECAP_UPSTREAM=http://engine", "KNEECAP_MAX_CONCURRENCY=4096", "KNEECAP_MAX_QUEUE=100000"}, env...))
	if err != nil {
		t.Fatal(err)
	}
	engine := &switchEngine{}
	g, err := gateway.New(cfg, gateway.WithTransport(engine), gateway.WithRegistry(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	h := g.Handler()
	reqBody := []byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	const short, long = 64, 320
	bodies := map[int][]byte{short: gatewayStream(short), long: gatewayStream(long)}
	serve := func(n int) {
		engine.body = bodies[n]
		r, _ := http.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(reqBody))
		r.RemoteAddr = "127.0.0.1:1234"
		h.ServeHTTP(&proxytest.DiscardWriter{H: http.Header{}}, r)
	}
	for range 50 {
		serve(long)
	}
	// No collection meanwhile: one empties the sync.Pools that a request
	// takes from, and the refills would count as its allocations.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	// Many runs: a value in a histogram bucket or a window epoch that no
	// earlier run saw allocates its storage once, and the count per run is
	// rounded down.
	a := testing.AllocsPerRun(1000, func() { serve(short) })
	b := testing.AllocsPerRun(1000, func() { serve(long) })
	t.Logf("allocations (%v): %.0f for a stream of %d output chunks, %.0f for %d chunks more", env, a, short, b-a, long-short)
	return g, a, b - a
}
