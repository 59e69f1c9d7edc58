package gateway

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/kneecap/kneecap/eppmetrics"
	"github.com/kneecap/kneecap/sim"
)

// TestEPPMetrics: with KNEECAP_EPP_METRICS=vllm the traffic port's /metrics
// is the engine's body with its waiting and running series kneecap's (its
// queue counted), the engine's other series passed through; off, it is the
// engine's own. The admin port has the kneecap-named series either way, on
// /metrics and alone on /metrics/epp.
func TestEPPMetrics(t *testing.T) {
	for _, mode := range []string{"vllm", "off"} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { runEPPMetrics(t, mode) })
		})
	}
}

func runEPPMetrics(t *testing.T, mode string) {
	profile, err := sim.LookupProfile("gb10-fp8")
	if err != nil {
		t.Fatal(err)
	}
	h := startBehindSim(t, sim.Config{Profile: profile, Flavor: sim.FlavorVLLM, Seed: 1},
		[]string{"KNEECAP_MAX_CONCURRENCY=1", "KNEECAP_SLO_TTFT=10m", "KNEECAP_SLO_TPOT=10s", "KNEECAP_EPP_METRICS=" + mode}, WithStaticCap())
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			body := `{"model":"m","stream":true,"max_tokens":400,"ignore_eos":true,"messages":[{"role":"user","content":"request ` + string(rune('a'+i)) + `"}]}`
			resp, err := h.client.Post("http://gateway/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		})
	}
	for h.g.Limiter().State().Queued < 2 {
		synctest.Wait()
	}
	get := func(c *http.Client, url string) string {
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	traffic := get(h.client, "http://gateway/metrics")
	admin := get(h.admin, "http://admin/metrics")
	eppOnly := get(h.admin, "http://admin/metrics/epp")
	wg.Wait()
	h.stop()

	if !strings.Contains(admin, "\n"+eppmetrics.MetricWaiting+" 2\n") {
		t.Errorf("the admin port has no %s 2:\n%s", eppmetrics.MetricWaiting, grepLines(admin, "kneecap_epp"))
	}
	if !strings.Contains(eppOnly, "\n"+eppmetrics.MetricWaiting+" 2\n") || strings.Contains(eppOnly, "kneecap_requests_total") {
		t.Errorf("/metrics/epp is not the view alone:\n%s", eppOnly)
	}
	if !strings.Contains(traffic, "vllm:prompt_tokens_total") {
		t.Errorf("the engine's other series were not passed through:\n%s", traffic)
	}
	waiting := grepLines(traffic, "vllm:num_requests_waiting")
	switch mode {
	case "vllm":
		if waiting != "vllm:num_requests_waiting 2" {
			t.Errorf("vllm:num_requests_waiting: %q, want kneecap's one series of 2", waiting)
		}
	case "off":
		if !strings.HasPrefix(waiting, "vllm:num_requests_waiting{") {
			t.Errorf("vllm:num_requests_waiting: %q, want the engine's own", waiting)
		}
	}
}

// grepLines returns the sample lines of s that contain sub, joined by
// newlines.
func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestEPPSettings(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want string // "" parses
	}{
		{"KNEECAP_EPP_METRICS=vllm", ""},
		{"KNEECAP_EPP_METRICS=sglang", ""},
		{"KNEECAP_EPP_METRICS=off", ""},
		{"KNEECAP_EPP_METRICS=llamacpp", "KNEECAP_EPP_METRICS: must be off, vllm or sglang"},
		{"KNEECAP_EPP_SATURATED_WAITING=0", ""},
		{"KNEECAP_EPP_SATURATED_WAITING=-1", "KNEECAP_EPP_SATURATED_WAITING: must be between 0 and 1000000"},
	} {
		_, err := ConfigFromEnv([]string{"KNEECAP_UPSTREAM=http://127.0.0.1:8000", tc.env})
		if got := errString(err); got != tc.want {
			t.Errorf("%s: error %q, want %q", tc.env, got, tc.want)
		}
	}
	cfg, _ := ConfigFromEnv([]string{"KNEECAP_UPSTREAM=http://127.0.0.1:8000"})
	if cfg.EPPMetrics != "off" || cfg.EPPSaturatedWaiting != eppmetrics.DefaultSaturatedWaiting {
		t.Fatalf("defaults: %q, %d", cfg.EPPMetrics, cfg.EPPSaturatedWaiting)
	}
}
