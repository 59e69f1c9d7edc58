package faults

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kneecap/kneecap/testengine"
	"github.com/kneecap/kneecap/tracing"
	"github.com/kneecap/kneecap/tracing/otlptest"
)

// traced is what a client saw of one request sent with a traceparent of
// its own, and the traceparent the engine said it got.
type traced struct {
	status      int
	retryAfter  string
	engineSaw   string
	traceID     string // the client's
	body        string
	requestTime time.Duration
}

// sendTraced sends one chat completion with a traceparent of trace id
// n (a 32-hex-digit number) and the engine headers hdr, and reads it all.
func sendTraced(ctx context.Context, c *http.Client, base string, n int, body string, hdr ...string) (traced, error) {
	tid := fmt.Sprintf("%032x", 0xabc000+n)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return traced{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Traceparent", "00-"+tid+"-00f067aa0ba902b7-01")
	req.Header.Set("Authorization", "Bearer sk-never-in-a-span")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return traced{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return traced{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), engineSaw: resp.Header.Get(testengine.HeaderTraceparent),
		traceID: tid, body: string(b), requestTime: time.Since(start)}, err
}

// TestTracesThroughEngine: the gateway in front of the uvicorn engine
// (vLLM's HTTP stack) sends its spans over OTLP/HTTP to a receiver that
// decodes them with the official proto package. A streamed request, one
// that is not streamed, one that waits in the queue and one refused (the
// queue full) each continue their client's trace, carry the GenAI
// conventions' attributes and kneecap's; the engine sees the gateway
// span's context in its traceparent. Run with -v, it prints the spans.
func TestTracesThroughEngine(t *testing.T) {
	eng := testengine.Start(t, testengine.Uvicorn)
	rcv := otlptest.NewReceiver(t)
	h := startGateway(t, eng, "KNEECAP_MAX_CONCURRENCY=1", "KNEECAP_MAX_QUEUE=1", "KNEECAP_SLO_TTFT=10s", "KNEECAP_SLO_TPOT=1s",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+rcv.URL(), "OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_SERVICE_NAME=kneecap-faults")
	c := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(c.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	stream, err := sendTraced(ctx, c, h.traffic, 1, fmt.Sprintf(chatStream, 8))
	if err != nil || stream.status != 200 {
		t.Fatalf("streamed: %v %+v", err, stream)
	}
	whole, err := sendTraced(ctx, c, h.traffic, 2, fmt.Sprintf(chatWhole, 8))
	if err != nil || whole.status != 200 {
		t.Fatalf("not streamed: %v %+v", err, whole)
	}

	// One request holds the slot (its first token 1.5 s away), one waits
	// for it, one finds the queue full.
	var wg sync.WaitGroup
	var held, queued traced
	wg.Go(func() {
		held, _ = sendTraced(ctx, c, h.traffic, 3, fmt.Sprintf(chatStream, 4), testengine.HeaderFirstDelay, "1500")
	})
	waitState(t, h, func(running, queued int) bool { return running == 1 })
	wg.Go(func() { queued, _ = sendTraced(ctx, c, h.traffic, 4, fmt.Sprintf(chatStream, 4)) })
	waitState(t, h, func(running, queued int) bool { return queued == 1 })
	refused, err := sendTraced(ctx, c, h.traffic, 5, fmt.Sprintf(chatStream, 4))
	if err != nil || refused.status != 429 {
		t.Fatalf("refused: %v %+v", err, refused)
	}
	wg.Wait()
	if held.status != 200 || queued.status != 200 {
		t.Fatalf("held %+v, queued %+v", held, queued)
	}

	spans := map[string]otlptest.Span{}
	for _, sp := range rcv.Wait(t, 5, 10*time.Second) {
		spans[sp.TraceID] = sp
		t.Logf("\n%s", sp)
		if strings.Contains(fmt.Sprint(sp.Attrs), "sk-never") {
			t.Errorf("the API key in %s", sp)
		}
	}
	check := func(name string, c traced, want map[string]any, has ...string) otlptest.Span {
		t.Helper()
		sp, ok := spans[c.traceID]
		if !ok {
			t.Fatalf("%s: no span in the client's trace %s", name, c.traceID)
		}
		if sp.ParentID != "00f067aa0ba902b7" || sp.Kind != "SPAN_KIND_SERVER" || sp.Resource["service.name"] != "kneecap-faults" {
			t.Errorf("%s: %s", name, sp)
		}
		for k, v := range want {
			if fmt.Sprint(sp.Attrs[k]) != fmt.Sprint(v) {
				t.Errorf("%s: %s = %v, want %v", name, k, sp.Attrs[k], v)
			}
		}
		for _, k := range has {
			if _, ok := sp.Attrs[k]; !ok {
				t.Errorf("%s: no %s", name, k)
			}
		}
		if c.status == 200 {
			t.Logf("%s: the engine got traceparent: %s", name, c.engineSaw)
			if want := "00-" + sp.TraceID + "-" + sp.SpanID + "-01"; c.engineSaw != want {
				t.Errorf("%s: the engine saw traceparent %q, want the gateway span's %q", name, c.engineSaw, want)
			}
		}
		return sp
	}
	answered := map[string]any{
		"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "test",
		"gen_ai.response.model": "test", "gen_ai.request.max_tokens": 8, "gen_ai.usage.output_tokens": 8,
		"gen_ai.usage.input_tokens": 2, "gen_ai.response.finish_reasons": "[length]",
		"http.response.status_code": 200, "kneecap.admission.decision": "admitted", "kneecap.admission.cap": 1,
		"kneecap.admission.running": 1, "kneecap.outcome": "good",
	}
	sp := check("streamed", stream, with(answered, "gen_ai.request.stream", true),
		"kneecap.ttft_seconds", "kneecap.engine_ttft_seconds", "kneecap.tpot_seconds", "kneecap.queue_wait_seconds")
	if sp.Name != "chat test" || len(sp.Events) != 2 {
		t.Errorf("streamed: %s", sp)
	}
	check("not streamed", whole, with(answered, "gen_ai.request.stream", false), "kneecap.ttft_seconds")
	q := check("queued", queued, map[string]any{"kneecap.admission.decision": "queued", "kneecap.admission.reason": "cap", "kneecap.outcome": "good"},
		"kneecap.queue_wait_seconds", "kneecap.ttft_seconds")
	if w, _ := q.Attrs["kneecap.queue_wait_seconds"].(float64); w < 1 {
		t.Errorf("queued: waited %v s for a slot held 1.5 s", w)
	}
	check("refused", refused, map[string]any{"kneecap.admission.decision": "refused", "kneecap.admission.reason": "queue_full",
		"http.response.status_code": 429, "error.type": "queue_full", "kneecap.retry_after_seconds": refused.retryAfter, "kneecap.outcome": "rejected"})
	settle(t, h, eng)
	h.stop(t)
}

func with(m map[string]any, k string, v any) map[string]any {
	out := map[string]any{k: v}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// waitState waits up to 10 s until the gateway's limiter is in the state
// ok asks for.
func waitState(t *testing.T, h *gw, ok func(running, queued int) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for st := h.g.Limiter().State(); !ok(st.Running, st.Queued); st = h.g.Limiter().State() {
		if time.Now().After(deadline) {
			t.Fatalf("limiter state %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTracingCollectorFaults: a collector that is down (connection
// refused) or that accepts and never answers leaves traffic unaffected:
// every stream completes as fast as without tracing, the lost spans are
// counted (kneecap_tracing_spans_dropped_total), the gateway stops within
// tracing.ShutdownTimeout of its drain, and nothing is left behind
// (settle; goleak when the package ends).
func TestTracingCollectorFaults(t *testing.T) {
	for _, fault := range []string{"down", "hangs"} {
		t.Run(fault, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			if fault == "down" {
				ln.Close() // its port refuses connections
			} else {
				hang(t, ln)
			}
			eng := testengine.Start(t, testengine.Uvicorn)
			h := startGateway(t, eng, append([]string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + addr,
				"OTEL_BSP_SCHEDULE_DELAY=10", "OTEL_BSP_MAX_QUEUE_SIZE=4", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE=2",
				"OTEL_BSP_EXPORT_TIMEOUT=60000", "OTEL_EXPORTER_OTLP_TIMEOUT=60000"}, faultEnv...)...)
			c := &http.Client{Transport: &http.Transport{}}
			t.Cleanup(c.CloseIdleConnections)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			var mu sync.Mutex
			var slowest time.Duration
			for w := range 4 {
				wg.Go(func() {
					for i := range 8 {
						s, err := sendTraced(ctx, c, h.traffic, w*100+i, fmt.Sprintf(chatStream, 8), testengine.HeaderGap, "5")
						if err != nil || s.status != 200 || !strings.Contains(s.body, "[DONE]") {
							t.Errorf("stream with the collector %s: %v %+v", fault, err, s)
							return
						}
						mu.Lock()
						slowest = max(slowest, s.requestTime)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			// 8 chunks 5 ms apart: well under a second on an idle machine,
			// never an export's 60 s timeout.
			if slowest > 5*time.Second {
				t.Errorf("the slowest of 32 streams took %v", slowest)
			}
			tr := h.g.Tracing()
			deadline := time.Now().Add(10 * time.Second)
			for tr.Dropped() == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if n := h.counter(t, "kneecap_tracing_spans_dropped_total"); n == 0 || tr.Exported() != 0 {
				t.Errorf("dropped %v, exported %d", n, tr.Exported())
			}
			settle(t, h, eng)
			began := time.Now()
			h.stop(t)
			if took := time.Since(began); took > tracing.ShutdownTimeout+3*time.Second {
				t.Errorf("the gateway took %v to stop", took)
			}
			if n := tr.Dropped(); n != 32 {
				t.Errorf("%d spans dropped in all, want the 32 of the requests", n)
			}
		})
	}
}

// hang accepts connections on ln and never answers; everything is closed
// when the test ends.
func hang(t *testing.T, ln net.Listener) {
	conns := make(chan net.Conn, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case conns <- c:
			default:
				c.Close()
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
}
