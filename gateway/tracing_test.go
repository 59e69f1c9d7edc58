package gateway

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kneecap/kneecap/proxy/proxytest"
	"github.com/kneecap/kneecap/tracing"
	"github.com/kneecap/kneecap/tracing/otlptest"
)

// TestTracingWired: with an OTLP endpoint among the settings, the gateway
// sends a span per generation request to it, counts exported and dropped
// spans on /metrics, and Run flushes and ends the exporter (goleak).
func TestTracingWired(t *testing.T) {
	rcv := otlptest.NewReceiver(t)
	tc, err := tracing.FromEnv(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.URL(), "OTEL_BSP_SCHEDULE_DELAY": "20"})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, &proxytest.Engine{Flavor: proxytest.VLLM}, Config{Tracing: tc})
	resp := postChat(t, h.traffic, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if resp != 200 {
		t.Fatalf("status %d", resp)
	}
	sp := rcv.Wait(t, 1, 10*time.Second)[0]
	if sp.Name != "chat m" || sp.Attrs["gen_ai.operation.name"] != "chat" || sp.Resource["service.name"] != "kneecap" {
		t.Errorf("%s", sp)
	}
	// The receiver has the span before the exporter has its answer and
	// counts it: wait for the count.
	_, body := get(t, h.admin+"/metrics")
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(body, "kneecap_tracing_spans_exported_total 1") && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		_, body = get(t, h.admin+"/metrics")
	}
	for _, m := range []string{"kneecap_tracing_spans_exported_total 1", "kneecap_tracing_spans_dropped_total 0", "gen_ai_server_time_to_first_token_seconds_bucket"} {
		if !strings.Contains(body, m) {
			t.Errorf("/metrics has no %q", m)
		}
	}
	h.stop(t)
}

// TestTracingSettingError: a bad OTEL_* value stops startup with one line
// naming it, as a bad KNEECAP_* one does.
func TestTracingSettingError(t *testing.T) {
	_, err := ConfigFromEnv([]string{"KNEECAP_UPSTREAM=http://127.0.0.1:8000", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"})
	var se *SettingError
	if !errors.As(err, &se) || se.Var != "OTEL_EXPORTER_OTLP_PROTOCOL" || strings.Contains(err.Error(), "\n") {
		t.Errorf("%v", err)
	}
	c, err := ConfigFromEnv([]string{"KNEECAP_UPSTREAM=http://127.0.0.1:8000"})
	if err != nil || c.Tracing.Enabled() {
		t.Errorf("tracing on without an endpoint: %v", err)
	}
}

// postChat sends a chat completion, reads the answer and returns its status.
func postChat(t *testing.T, base, body string) int {
	t.Helper()
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}
