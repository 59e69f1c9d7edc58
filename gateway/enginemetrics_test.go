package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kneecap/kneecap/enginemetrics"
	"github.com/kneecap/kneecap/sim"
)

func TestEngineMetricsSettings(t *testing.T) {
	up := "KNEECAP_UPSTREAM=http://127.0.0.1:8000/base"
	for _, tc := range []struct {
		env     string
		want    string // the URL scraped; "" when off
		wantVar string // the variable a bad value names
	}{
		{"", "http://127.0.0.1:8000/base/metrics", ""},
		{"KNEECAP_ENGINE_METRICS=off", "", ""},
		{"KNEECAP_ENGINE_METRICS=/metrics?model=qwen", "http://127.0.0.1:8000/base/metrics?model=qwen", ""},
		{"KNEECAP_ENGINE_METRICS=http://10.0.0.2:9400/metrics", "http://10.0.0.2:9400/metrics", ""},
		{"KNEECAP_ENGINE_METRICS=metrics", "", "KNEECAP_ENGINE_METRICS"},
		{"KNEECAP_ENGINE_METRICS=ftp://host/metrics", "", "KNEECAP_ENGINE_METRICS"},
		{"KNEECAP_ENGINE_METRICS=http:///metrics", "", "KNEECAP_ENGINE_METRICS"},
		{"KNEECAP_ENGINE_METRICS=/metrics#top", "", "KNEECAP_ENGINE_METRICS"},
		{"KNEECAP_ENGINE_METRICS_INTERVAL=10ms", "", "KNEECAP_ENGINE_METRICS_INTERVAL"},
		{"KNEECAP_ENGINE_METRICS_INTERVAL=2h", "", "KNEECAP_ENGINE_METRICS_INTERVAL"},
		{"KNEECAP_ENGINE_METRICS_INTERVAL=often", "", "KNEECAP_ENGINE_METRICS_INTERVAL"},
	} {
		c, err := ConfigFromEnv([]string{up, tc.env})
		if tc.wantVar != "" {
			var se *SettingError
			if !errors.As(err, &se) || se.Var != tc.wantVar || strings.Contains(err.Error(), "\n") {
				t.Errorf("%s: error %v, want one line naming %s", tc.env, err, tc.wantVar)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.env, err)
			continue
		}
		got := ""
		if u := c.EngineMetricsURL(); u != nil {
			got = u.String()
		}
		if got != tc.want {
			t.Errorf("%s: scrapes %q, want %q", tc.env, got, tc.want)
		}
	}
	// A Config built in code scrapes nothing unless told to.
	if u := (Config{}).EngineMetricsURL(); u != nil {
		t.Errorf("the zero Config scrapes %v", u)
	}
}

// The gateway in front of the simulator reads each flavour's KV cache as
// the engine counts it: vLLM and SGLang the KV of running requests,
// llama.cpp also the cells finished sequences left in its unified cache,
// which the gateway cannot see otherwise. The reading reaches the
// controller's host, /status and the metrics, and the scraper stops with
// the gateway.
func TestEngineMetricsBehindSimulator(t *testing.T) {
	for _, fl := range sim.Flavors() {
		t.Run(string(fl), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { runEngineMetricsBehindSim(t, fl) })
		})
	}
}

func runEngineMetricsBehindSim(t *testing.T, fl sim.Flavor) {
	p := sim.Tiny
	p.PrefixCacheTokens, p.StepPerCachedToken, p.UnifiedCache = 1<<20, time.Microsecond, true
	p.KVCacheTokens = 16384 // four requests of 1504 tokens and what they leave
	var fromHost *enginemetrics.Scraper
	h := startBehindSim(t, sim.Config{Profile: p, Flavor: fl, Seed: 1}, []string{"KNEECAP_MAX_CONCURRENCY=4", "KNEECAP_SLO_TTFT=60s", "KNEECAP_SLO_TPOT=1s"},
		WithCapControl(func(host Host) (CapControl, error) {
			fromHost = host.EngineMetrics
			return nil, nil // the static cap
		}))
	if fromHost == nil || fromHost != h.g.EngineMetrics() {
		t.Fatal("the controller's host has not the gateway's scraper")
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			body := `{"model":"m","stream":true,"max_tokens":1500,"ignore_eos":true,"messages":[{"role":"user","content":"one two three four"}]}`
			resp, err := h.client.Post("http://gateway/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		})
	}
	time.Sleep(1100 * time.Millisecond) // the scrape at 0.9995 s, with 4 requests running
	r, ok := h.g.EngineMetrics().Latest()
	if !ok || r.Engine != string(fl) || r.Running != 4 || !(r.KVTokens > 4*4 && r.KVTokens <= float64(p.KVCacheTokens)) {
		t.Fatalf("under load: %+v %v", r, ok)
	}
	wg.Wait()
	time.Sleep(2 * time.Second) // two scrapes of the idle engine
	st := h.engine.Stats()
	r, ok = h.g.EngineMetrics().Latest()
	wantTokens, wantCap := 0.0, float64(p.KVCacheTokens)
	if fl == sim.FlavorLlamaCpp {
		wantTokens, wantCap = float64(st.CachedTokens), math.NaN()
	}
	if !ok || r.Running != 0 || r.KVTokens != wantTokens || !sameFloat(r.KVCapacity, wantCap) || st.CachedTokens != 4*(4+1499) {
		t.Fatalf("idle: %+v %v, want %v tokens of capacity %v (engine: %+v)", r, ok, wantTokens, wantCap, st)
	}

	// /status and the metrics show it.
	resp, err := h.admin.Get("http://admin/status")
	if err != nil {
		t.Fatal(err)
	}
	var status struct {
		EngineMetrics struct {
			State   string `json:"state"`
			Scrapes int64  `json:"scrapes"`
			Reading struct {
				Engine   string   `json:"engine"`
				KVTokens *float64 `json:"kv_tokens"`
			} `json:"reading"`
		} `json:"engine_metrics"`
	}
	err = json.NewDecoder(resp.Body).Decode(&status)
	_ = resp.Body.Close()
	// A scrape every second from just before the first tick (0.9995 s).
	if em := status.EngineMetrics; err != nil || em.State != "ok" || em.Scrapes < 3 || em.Reading.Engine != string(fl) ||
		em.Reading.KVTokens == nil || *em.Reading.KVTokens != wantTokens {
		t.Errorf("/status engine_metrics %+v (%v)", status.EngineMetrics, err)
	}
	body := getText(t, h.admin, "http://admin/metrics")
	for _, w := range []string{"kneecap_engine_scrape_up 1", fmt.Sprintf("kneecap_engine_kv_tokens %v", wantTokens),
		`kneecap_engine_scrape_errors_total{reason="slow"} 0`, fmt.Sprintf("kneecap_engine_scrape_duration_seconds_count %d", status.EngineMetrics.Scrapes)} {
		if !strings.Contains(body, w) {
			t.Errorf("/metrics lacks %q", w)
		}
	}
	if fl == sim.FlavorLlamaCpp {
		h.engine.FlushCache()
		time.Sleep(time.Second)
		if r, _ := h.g.EngineMetrics().Latest(); r.KVTokens != 0 {
			t.Errorf("after a flush: %v tokens", r.KVTokens)
		}
	}
	h.stop()
}

func sameFloat(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }

func getText(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Off, nothing runs and /status says so.
func TestEngineMetricsOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startBehindSim(t, sim.Config{Profile: sim.Tiny, Seed: 1}, []string{"KNEECAP_ENGINE_METRICS=off"})
		if h.g.EngineMetrics() != nil {
			t.Fatal("a scraper while off")
		}
		time.Sleep(3 * time.Second)
		if st := h.g.Status().EngineMetrics; st.State != enginemetrics.StateOff {
			t.Errorf("status %+v", st)
		}
		if body := getText(t, h.admin, "http://admin/metrics"); strings.Contains(body, "kneecap_engine_") {
			t.Error("kneecap_engine_* metrics while off")
		}
		h.stop()
	})
}
