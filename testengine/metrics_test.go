package testengine

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// get sends GET path with its own timeout and returns the status and the
// first max bytes of the body.
func get(t *testing.T, e *Engine, path string, timeout time.Duration, max int64) (int, string, error) {
	t.Helper()
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.URL().String()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, max))
	return resp.StatusCode, string(b), err
}

// GET /metrics: the engine's names while it serves, and each fault.
func TestMetrics(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		e := Start(t, k)
		resp := mustPost(t, newClient(t), e, "/v1/chat/completions", chatBody, HeaderGap, "100")
		code, body, err := get(t, e, "/metrics", 5*time.Second, 1<<20)
		_, _ = io.Copy(io.Discard, resp.Body)
		if err != nil || code != http.StatusOK {
			t.Fatalf("GET /metrics: %d %v", code, err)
		}
		want := map[Kind][]string{
			Uvicorn: {`vllm:num_requests_running{engine="0",model_name="test"} 1.0`, `vllm:kv_cache_usage_perc{engine="0",model_name="test"} 0.0078125`,
				`num_gpu_blocks="2048"`, "# TYPE vllm:num_preemptions_total counter"},
			HTTPLib: {"llamacpp:requests_processing 1\n", "llamacpp:kv_cache_tokens 320\n", "llamacpp:kv_cache_usage_ratio 0.0390625\n",
				"# TYPE llamacpp:prompt_tokens_total counter\n"},
		}[k]
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("/metrics lacks %q:\n%s", w, body)
			}
		}
	})
}

func TestMetricsFaults(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		for _, f := range MetricsFaults {
			t.Run(f, func(t *testing.T) {
				t.Parallel()
				e := Start(t, k, WithMetricsFault(f))
				timeout := 5 * time.Second
				if f == MetricsHang {
					timeout = time.Second
				}
				start := time.Now()
				code, body, err := get(t, e, "/metrics", timeout, 1<<20)
				switch f {
				case MetricsMissing:
					if want := map[Kind]int{Uvicorn: 404, HTTPLib: 501}[k]; err != nil || code != want {
						t.Errorf("%d %v, want %d", code, err, want)
					}
				case MetricsHang:
					if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < timeout {
						t.Errorf("answered %d %v after %v", code, err, time.Since(start))
					}
				case MetricsHuge:
					if err != nil || code != 200 || len(body) != 1<<20 || strings.Contains(body, k.metricsPrefix()) {
						t.Errorf("%d %v, %d bytes", code, err, len(body))
					}
				case MetricsNaN:
					nan := map[Kind]string{Uvicorn: "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"test\"} NaN", HTTPLib: "llamacpp:kv_cache_tokens nan\n"}[k]
					if err != nil || code != 200 || !strings.Contains(body, nan) {
						t.Errorf("%d %v:\n%s", code, err, body)
					}
				}
				// The engine still serves, and serves the same fault again.
				if code, _, err := get(t, e, "/health", 5*time.Second, 1<<10); err != nil || code != 200 {
					t.Errorf("/health after the fault: %d %v", code, err)
				}
				if f == MetricsMissing {
					e.Restart(t)
					if code, _, _ := get(t, e, "/metrics", 5*time.Second, 1<<10); code == 200 {
						t.Error("a restart forgot the fault")
					}
				}
			})
		}
	})
}

func (k Kind) metricsPrefix() string {
	if k == Uvicorn {
		return "vllm:"
	}
	return "llamacpp:"
}
