package sim

import (
	"strconv"
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

// vllmBlockSize is the block size vllm:cache_config_info reports: vLLM's
// default on GPUs. The KV capacity published is KVCacheTokens / 16 blocks
// (every built-in profile's capacity is a multiple of 16).
const vllmBlockSize = 16

// metrics holds the flavour's Prometheus series: vLLM's vllm:*, SGLang's
// sglang:* or llama.cpp's llamacpp:* names (a field is nil where the
// flavour has no such series). Durations are wall-clock (what a client of
// a time-scaled simulator observes), converted to seconds here only.
// Observations come from the scheduler loop under Sim.mu.
type metrics struct {
	flavor   Flavor
	capacity int // Profile.KVCacheTokens

	running, waiting, kvUsage, gpuCache, kvTokens prometheus.Gauge
	ttft, itl, tpotLegacy, reqTPOT, e2e           prometheus.Observer
	preemptions, promptTokens, genTokens          prometheus.Counter
	success                                       *prometheus.CounterVec
	// The prefix cache's (Profile.PrefixCaching): vLLM's counters of
	// queried and hit prompt tokens, SGLang's hit rate of the last prefill
	// batch; nil without one. seen are the totals already counted.
	prefixQueries, prefixHits prometheus.Counter
	hitRate                   prometheus.Gauge
	seenQueries, seenHits     int64
}

func newMetrics(reg prometheus.Registerer, fl Flavor, p Profile) (*metrics, error) {
	m := &metrics{flavor: fl, capacity: p.KVCacheTokens}
	labels := prometheus.Labels{"model_name": p.Model}
	if fl == FlavorLlamaCpp {
		labels = nil // llama.cpp's series have no labels
	}
	var cs []prometheus.Collector
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
		cs = append(cs, g)
		return g
	}
	hist := func(name, help string, b []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: b, ConstLabels: labels})
		cs = append(cs, h)
		return h
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
		cs = append(cs, c)
		return c
	}
	if p.PrefixCaching {
		switch fl {
		case FlavorVLLM:
			m.prefixQueries = counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.")
			m.prefixHits = counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.")
		case FlavorSGLang:
			m.hitRate = gauge("sglang:cache_hit_rate", "The prefix cache hit rate.")
		}
	}
	switch fl {
	case FlavorSGLang:
		m.running = gauge("sglang:num_running_reqs", "The number of running requests.")
		m.waiting = gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.")
		m.kvTokens = gauge("sglang:num_used_tokens", "The number of used tokens.")
		m.kvUsage = gauge("sglang:token_usage", "The token usage.")
		gauge("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.").Set(float64(p.KVCacheTokens))
		m.ttft = hist("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets)
		m.itl = hist("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets)
		m.e2e = hist("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", e2eBuckets)
		m.promptTokens = counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.")
		m.genTokens = counter("sglang:generation_tokens_total", "Number of generation tokens processed.")
	case FlavorLlamaCpp:
		m.promptTokens = counter("llamacpp:prompt_tokens_total", "Number of prompt tokens processed.")
		m.genTokens = counter("llamacpp:tokens_predicted_total", "Number of generation tokens processed.")
		m.kvUsage = gauge("llamacpp:kv_cache_usage_ratio", "KV-cache usage. 1 means 100 percent usage.")
		m.kvTokens = gauge("llamacpp:kv_cache_tokens", "KV-cache tokens.")
		m.running = gauge("llamacpp:requests_processing", "Number of requests processing.")
		m.waiting = gauge("llamacpp:requests_deferred", "Number of requests deferred.")
	default:
		m.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
		m.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
		m.kvUsage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
		m.gpuCache = gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage (deprecated alias).")
		m.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets)
		m.itl = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets)
		m.tpotLegacy = hist("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds (deprecated alias of inter_token_latency).", itlBuckets)
		m.reqTPOT = hist("vllm:request_time_per_output_token_seconds", "Histogram of time per output token per request in seconds.", itlBuckets)
		m.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", e2eBuckets)
		m.preemptions = counter("vllm:num_preemptions_total", "Cumulative number of preemptions from the engine.")
		m.promptTokens = counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.")
		m.genTokens = counter("vllm:generation_tokens_total", "Number of generation tokens processed.")
		m.success = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: labels,
		}, []string{"finished_reason"})
		cs = append(cs, m.success)
		// An info gauge as vLLM's CacheConfig.metrics_info writes it (a
		// few of its labels), with the engine index of vLLM's v1 loggers.
		info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "vllm:cache_config_info", Help: "Information of the LLMEngine CacheConfig",
			ConstLabels: prometheus.Labels{
				"block_size": strconv.Itoa(vllmBlockSize), "num_gpu_blocks": strconv.Itoa(p.KVCacheTokens / vllmBlockSize),
				"cache_dtype": "auto", "enable_prefix_caching": "True", "gpu_memory_utilization": "0.9", "engine": "0",
			}})
		info.Set(1)
		cs = append(cs, info)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// gauges publishes the engine's state. vLLM's and SGLang's usage count
// only the KV held by requests (a cached block no request holds is free);
// llama.cpp's count every cell in its unified cache, finished sequences'
// cached cells included.
func (m *metrics) gauges(e *engine) {
	m.running.Set(float64(len(e.running)))
	m.waiting.Set(float64(e.numWaiting()))
	used := e.kvUsed
	if e.pc != nil {
		used += e.pc.pinned
		m.prefix(e.pc)
	}
	if m.flavor == FlavorLlamaCpp {
		used += e.cachedTokens()
	}
	u := min(float64(used)/float64(m.capacity), 1)
	m.kvUsage.Set(u)
	if m.gpuCache != nil {
		m.gpuCache.Set(u)
	}
	if m.kvTokens != nil {
		m.kvTokens.Set(float64(used))
	}
}

// prefix publishes the prefix cache's counts.
func (m *metrics) prefix(c *prefixCache) {
	if m.prefixQueries != nil {
		m.prefixQueries.Add(float64(c.queries - m.seenQueries))
		m.prefixHits.Add(float64(c.hits - m.seenHits))
		m.seenQueries, m.seenHits = c.queries, c.hits
	}
	if m.hitRate != nil && c.stepQueries > 0 {
		m.hitRate.Set(float64(c.stepHits) / float64(c.stepQueries))
	}
}

func observe(o prometheus.Observer, v float64) {
	if o != nil {
		o.Observe(v)
	}
}

func (m *metrics) firstToken(s *seq, now time.Time) {
	observe(m.ttft, now.Sub(s.arrival).Seconds())
	m.promptTokens.Add(float64(s.prompt))
	m.genTokens.Inc()
}

func (m *metrics) token(_ *seq, itl time.Duration) {
	sec := itl.Seconds()
	observe(m.itl, sec)
	observe(m.tpotLegacy, sec)
	m.genTokens.Inc()
}

func (m *metrics) finished(s *seq, now time.Time) {
	e2e := now.Sub(s.arrival)
	observe(m.e2e, e2e.Seconds())
	if s.generated > 1 {
		// TPOT as vLLM defines it: (E2E - TTFT) / (output tokens - 1). The
		// first token's time is not kept; the last token is now.
		observe(m.reqTPOT, (now.Sub(s.firstAt) / time.Duration(s.generated-1)).Seconds())
	}
	if m.success != nil {
		m.success.WithLabelValues(s.reason).Inc()
	}
}

func (m *metrics) preempted() {
	if m.preemptions != nil {
		m.preemptions.Inc()
	}
}
