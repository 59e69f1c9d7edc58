package sim

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Histogram buckets as vLLM defines them, so dashboards built for vLLM read
// the simulator unchanged.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	e2eBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
		40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// metrics holds the vllm:* series. Durations are wall-clock (what a client
// of a time-scaled simulator observes), converted to seconds here only.
// Observations come from the scheduler loop under Sim.mu.
type metrics struct {
	running, waiting, kvUsage, gpuCache  prometheus.Gauge
	ttft, itl, tpotLegacy, reqTPOT, e2e  prometheus.Observer
	preemptions, promptTokens, genTokens prometheus.Counter
	success                              *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, model string) (*metrics, error) {
	labels := prometheus.Labels{"model_name": model}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
	}
	hist := func(name, help string, b []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: b, ConstLabels: labels})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	}
	ttft := hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets)
	itl := hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets)
	tpotLegacy := hist("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds (deprecated alias of inter_token_latency).", itlBuckets)
	reqTPOT := hist("vllm:request_time_per_output_token_seconds", "Histogram of time per output token per request in seconds.", itlBuckets)
	e2e := hist("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", e2eBuckets)
	m := &metrics{
		running:      gauge("vllm:num_requests_running", "Number of requests in model execution batches."),
		waiting:      gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
		kvUsage:      gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
		gpuCache:     gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage (deprecated alias)."),
		ttft:         ttft,
		itl:          itl,
		tpotLegacy:   tpotLegacy,
		reqTPOT:      reqTPOT,
		e2e:          e2e,
		preemptions:  counter("vllm:num_preemptions_total", "Cumulative number of preemptions from the engine."),
		promptTokens: counter("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
		genTokens:    counter("vllm:generation_tokens_total", "Number of generation tokens processed."),
		success: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: labels,
		}, []string{"finished_reason"}),
	}
	for _, c := range []prometheus.Collector{m.running, m.waiting, m.kvUsage, m.gpuCache, ttft, itl, tpotLegacy,
		reqTPOT, e2e, m.preemptions, m.promptTokens, m.genTokens, m.success} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) gauges(e *engine) {
	m.running.Set(float64(len(e.running)))
	m.waiting.Set(float64(e.numWaiting()))
	u := float64(e.kvUsed) / float64(e.p.KVCacheTokens)
	m.kvUsage.Set(u)
	m.gpuCache.Set(u)
}

func (m *metrics) firstToken(s *seq, now time.Time) {
	m.ttft.Observe(now.Sub(s.arrival).Seconds())
	m.promptTokens.Add(float64(s.prompt))
	m.genTokens.Inc()
}

func (m *metrics) token(_ *seq, itl time.Duration) {
	sec := itl.Seconds()
	m.itl.Observe(sec)
	m.tpotLegacy.Observe(sec)
	m.genTokens.Inc()
}

func (m *metrics) finished(s *seq, now time.Time) {
	e2e := now.Sub(s.arrival)
	m.e2e.Observe(e2e.Seconds())
	if s.generated > 1 {
		// TPOT as vLLM defines it: (E2E - TTFT) / (output tokens - 1). The
		// first token's time is not kept; the last token is now.
		m.reqTPOT.Observe((now.Sub(s.firstAt) / time.Duration(s.generated-1)).Seconds())
	}
	m.success.WithLabelValues(s.reason).Inc()
}

func (m *metrics) preempted() { m.preemptions.Inc() }
