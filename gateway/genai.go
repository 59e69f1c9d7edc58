package gateway

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kneecap/kneecap/proxy"
	"github.com/kneecap/kneecap/slo"
)

// genaiMetrics are OpenTelemetry's GenAI server metrics
// (gen_ai.server.time_to_first_token, .time_per_output_token and
// .request.duration, in seconds, with the conventions' advised bucket
// boundaries), named and labelled as OpenTelemetry's Prometheus exporter
// writes them (dots become underscores, the unit a _seconds suffix). They
// are fed from the records the proxy already makes, as the kneecap_*
// histograms are: no second measurement. client_golang makes them, beside
// the rest of /metrics, rather than the OpenTelemetry metrics SDK and its
// Prometheus bridge: that would be a second pipeline (its own readers and
// aggregation, a hashed attribute set per observation) for three
// histograms.
//
// gen_ai_request_model is the client's model field, so its values are
// bounded: a model becomes a label value once a request for it completed
// (the engine served it), up to maxModelLabels; any other is _OTHER, as
// the conventions name a value outside the known ones.
type genaiMetrics struct {
	ttft, tpot, duration *prometheus.HistogramVec

	mu     sync.RWMutex
	series map[genaiKey]*genaiSeries // only for label values, never a raw unknown model
	models map[string]bool           // the models that are label values
}

var _ proxy.Observer = (*genaiMetrics)(nil)

type genaiKey struct{ route, model, errType string }

type genaiSeries struct{ ttft, tpot, duration prometheus.Observer }

// maxModelLabels bounds the values of gen_ai_request_model.
const maxModelLabels = 32

// otherModel is the model label of a model beyond the bound, or not yet
// served.
const otherModel = "_OTHER"

// The conventions' advised bucket boundaries (gen-ai-metrics.md).
var (
	genaiTTFTBuckets     = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
	genaiTPOTBuckets     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}
	genaiRequestsBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
)

func newGenAIMetrics(reg prometheus.Registerer) *genaiMetrics {
	labels := []string{"gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model"}
	m := &genaiMetrics{
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_time_to_first_token_seconds",
			Help:    "Time to generate first token for successful responses (OpenTelemetry GenAI conventions): from the request's arrival at the gateway, its queue wait included, as kneecap_ttft_seconds{kind=\"client\"}.",
			Buckets: genaiTTFTBuckets,
		}, labels),
		tpot: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_time_per_output_token_seconds",
			Help:    "Time per output token generated after the first token for successful responses (OpenTelemetry GenAI conventions): (E2E - TTFT) / (output_tokens - 1), as kneecap_tpot_seconds.",
			Buckets: genaiTPOTBuckets,
		}, labels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_request_duration_seconds",
			Help:    "Generative AI server request duration (OpenTelemetry GenAI conventions): arrival to the last output of a completed request; arrival to its end, with error_type (kneecap's reason), of one that failed or was refused.",
			Buckets: genaiRequestsBuckets,
		}, append(labels, "error_type")),
		series: map[genaiKey]*genaiSeries{},
		models: map[string]bool{},
	}
	reg.MustRegister(m.ttft, m.tpot, m.duration)
	return m
}

// FirstChunk implements proxy.Observer; TTFT is taken from the record.
func (m *genaiMetrics) FirstChunk(proxy.FirstChunk) {}

// Chunk implements proxy.Observer.
func (m *genaiMetrics) Chunk(proxy.Chunk) {}

// Done implements proxy.Observer.
func (m *genaiMetrics) Done(r slo.Record) {
	completed := r.Outcome.Completed()
	errType := ""
	if !completed {
		if errType = r.Reason; errType == "" {
			errType = r.Outcome.String()
		}
	}
	s := m.seriesOf(genaiKey{r.Route, r.Model, errType}, completed)
	if !completed {
		s.duration.Observe(time.Since(r.Arrival).Seconds())
		return
	}
	s.duration.Observe(r.E2E.Seconds())
	if r.FirstObserved() {
		s.ttft.Observe(r.TTFT.Seconds())
	}
	if tpot, ok := r.TPOT(); ok {
		s.tpot.Observe(tpot.Seconds())
	}
}

// seriesOf returns the observers of k, whose model becomes a label value
// if served (see genaiMetrics). A known key takes a read lock and no
// allocation.
func (m *genaiMetrics) seriesOf(k genaiKey, served bool) *genaiSeries {
	m.mu.RLock()
	s := m.series[k]
	m.mu.RUnlock()
	if s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.models[k.model] {
		if served && len(m.models) < maxModelLabels {
			m.models[k.model] = true
		} else {
			k.model = otherModel
		}
	}
	if s = m.series[k]; s != nil {
		return s
	}
	op, provider := proxy.GenAI(k.route)
	s = &genaiSeries{duration: m.duration.WithLabelValues(op, provider, k.model, k.errType)}
	if k.errType == "" { // only completed requests have a first token and a TPOT
		s.ttft, s.tpot = m.ttft.WithLabelValues(op, provider, k.model), m.tpot.WithLabelValues(op, provider, k.model)
	}
	m.series[k] = s
	return s
}
