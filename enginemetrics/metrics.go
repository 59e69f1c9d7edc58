package enginemetrics

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, for checks of dashboards and rules against the code. The
// kv ones are present only while a fresh reading knows their value.
const (
	MetricUp         = "kneecap_engine_scrape_up"
	MetricErrors     = "kneecap_engine_scrape_errors_total"
	MetricDuration   = "kneecap_engine_scrape_duration_seconds"
	MetricKVUsage    = "kneecap_engine_kv_usage_ratio"
	MetricKVTokens   = "kneecap_engine_kv_tokens"
	MetricKVCapacity = "kneecap_engine_kv_capacity_tokens"
)

// MetricNames lists every metric a Scraper registers, those present only
// with a reading included.
func MetricNames() []string {
	return []string{MetricUp, MetricErrors, MetricDuration, MetricKVUsage, MetricKVTokens, MetricKVCapacity}
}

// metrics is the Prometheus view of a Scraper: the scrapes, fed by Run, and
// the reading, read at collection time.
type metrics struct {
	up       prometheus.Gauge
	errors   *prometheus.CounterVec
	duration prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, s *Scraper) (*metrics, error) {
	m := &metrics{
		up: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: MetricUp,
			Help: "1 if the last scrape of the engine's own metrics endpoint gave a reading, 0 otherwise (or none yet).",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricErrors,
			Help: "Failed scrapes of the engine's metrics endpoint by reason (missing, status, unreachable, slow, too_large, garbled, invalid).",
		}, []string{"reason"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    MetricDuration,
			Help:    "Time one scrape of the engine's metrics endpoint took, failed ones included (at most the scrape timeout).",
			Buckets: prometheus.ExponentialBucketsRange(0.001, 10, 14),
		}),
	}
	for _, st := range FailureStates {
		m.errors.WithLabelValues(string(st))
	}
	for _, c := range []prometheus.Collector{m.up, m.errors, m.duration, readingCollector{s}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observe(d time.Duration, state State) {
	m.duration.Observe(d.Seconds())
	if state == StateOK {
		m.up.Set(1)
		return
	}
	m.up.Set(0)
	m.errors.WithLabelValues(string(state)).Inc()
}

// readingCollector exports the fresh reading's known values; an unknown or
// stale value is absent rather than NaN, so that sums and alerts over a
// fleet stay defined.
type readingCollector struct{ s *Scraper }

var (
	descKVUsage = prometheus.NewDesc(MetricKVUsage,
		"Share of the engine's KV cache in use, 0 to 1, as the engine publishes it (vllm:kv_cache_usage_perc, sglang:token_usage, llamacpp:kv_cache_usage_ratio); absent when unknown or stale.", nil, nil)
	descKVTokens = prometheus.NewDesc(MetricKVTokens,
		"KV cache tokens in use as the engine counts them (llama.cpp: finished sequences' cells kept in its unified cache included); absent when unknown or stale.", nil, nil)
	descKVCapacity = prometheus.NewDesc(MetricKVCapacity,
		"The engine's KV cache capacity in tokens (vLLM: num_gpu_blocks x block_size, SGLang: max_total_num_tokens); absent when unknown or stale.", nil, nil)
)

func (c readingCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descKVUsage
	ch <- descKVTokens
	ch <- descKVCapacity
}

func (c readingCollector) Collect(ch chan<- prometheus.Metric) {
	r, ok := c.s.Latest()
	if !ok {
		return
	}
	for _, g := range [...]struct {
		d *prometheus.Desc
		v float64
	}{{descKVUsage, r.KVUsage}, {descKVTokens, r.KVTokens}, {descKVCapacity, r.KVCapacity}} {
		if !math.IsNaN(g.v) {
			ch <- prometheus.MustNewConstMetric(g.d, prometheus.GaugeValue, g.v)
		}
	}
}
