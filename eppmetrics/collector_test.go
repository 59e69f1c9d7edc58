package eppmetrics

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kneecap/kneecap/admission"
)

// TestCollector: the kneecap-named series on a registry, as the admin port
// serves them, and the engine's LoRA and cache geometry passed on.
func TestCollector(t *testing.T) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(vllmBody))
	}))
	defer engine.Close()
	s := startScraper(t, engine.URL)
	lim := admission.NewLimiter(admission.Config{Limit: 4, MaxQueue: 4})
	stop := queueing(t, lim, 1)
	defer stop()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(New(Config{Limiter: lim, Engine: s, MaxQueue: 4}).Collector())
	fams, _ := scrape(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if got := value(t, fams, MetricWaiting); got != 4 {
		t.Errorf("%s %v, want 4 (1 queued + 3 in the engine)", MetricWaiting, got)
	}
	if got := value(t, fams, MetricRunning); got != 1 {
		t.Errorf("%s %v, want 1 (4 slots, 3 of them waiting in the engine)", MetricRunning, got)
	}
	if got := value(t, fams, MetricKVUsage); got != 0.42 {
		t.Errorf("%s %v, want 0.42", MetricKVUsage, got)
	}
	if got := value(t, fams, MetricSaturated); got != 0 {
		t.Errorf("%s %v, want 0", MetricSaturated, got)
	}
	labels := func(name string) map[string]string {
		m := map[string]string{}
		if f := fams[name]; f != nil && len(f.GetMetric()) == 1 {
			for _, l := range f.GetMetric()[0].GetLabel() {
				m[l.GetName()] = l.GetValue()
			}
		}
		return m
	}
	if l := labels(MetricLoRA); l["running_lora_adapters"] != "sql-lora" || l["max_lora"] != "4" {
		t.Errorf("%s labels %v", MetricLoRA, l)
	}
	if l := labels(MetricCacheInfo); l["block_size"] != "16" || l["num_gpu_blocks"] != "1000" {
		t.Errorf("%s labels %v", MetricCacheInfo, l)
	}
	for _, name := range MetricNames() {
		if fams[name] == nil {
			t.Errorf("%s missing", name)
		}
	}
}
