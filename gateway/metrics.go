package gateway

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/proxy"
	"github.com/kneecap/kneecap/slo"
)

// metrics is the Prometheus view of the gateway. Histograms and counters
// are fed as an observer of the proxy; gauges of state (limit, running,
// queue, goodput, attainment, demand) are read at scrape time.
type metrics struct {
	requests     *prometheus.CounterVec
	ttft         *prometheus.HistogramVec
	ttftClient   prometheus.Observer
	ttftEngine   prometheus.Observer
	tpot         prometheus.Histogram
	itl          *itlHistogram
	e2e          prometheus.Histogram
	queueWait    prometheus.Histogram
	outputTokens prometheus.Counter
	rejections   *prometheus.CounterVec
	missed       *prometheus.CounterVec
	notStreamed  *prometheus.CounterVec
	// reassembled and whole count the admitted requests that were not
	// streamed, for /status.
	reassembled, whole atomic.Int64
}

var _ proxy.GapObserver = (*metrics)(nil)

// histogram options shared by the latency histograms: classic buckets for
// every scraper, plus native (sparse) buckets where the server accepts them.
func histogram(name, help string, buckets []float64) prometheus.HistogramOpts {
	return prometheus.HistogramOpts{
		Name: name, Help: help, Buckets: buckets,
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  160,
		NativeHistogramMinResetDuration: time.Hour,
	}
}

func newMetrics(reg prometheus.Registerer) *metrics {
	ttftBuckets := prometheus.ExponentialBucketsRange(0.01, 60, 20)
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kneecap_requests_total",
			Help: "Generation requests by route (chat, completions) and outcome (good, missed_ttft, missed_tpot, missed_e2e and their + combinations, rejected, engine_error, client_cancelled, invalid_request).",
		}, []string{"route", "outcome"}),
		ttft: prometheus.NewHistogramVec(histogram("kneecap_ttft_seconds",
			"Time to first output chunk of streamed requests: kind=client from arrival at the gateway (queue included), kind=engine from forwarding.",
			ttftBuckets), []string{"kind"}),
		tpot: prometheus.NewHistogram(histogram("kneecap_tpot_seconds",
			"Time per output token after the first, (E2E - TTFT) / (output_tokens - 1), of streamed requests with two or more output tokens.",
			prometheus.ExponentialBucketsRange(0.001, 2, 20))),
		e2e: prometheus.NewHistogram(histogram("kneecap_e2e_seconds",
			"Time from arrival to the last output of completed requests.",
			prometheus.ExponentialBucketsRange(0.05, 600, 20))),
		queueWait: prometheus.NewHistogram(histogram("kneecap_queue_wait_seconds",
			"Time admitted requests waited in the gateway's queue for a slot.",
			prometheus.ExponentialBucketsRange(0.001, 60, 20))),
		outputTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kneecap_output_tokens_total",
			Help: "Output tokens of completed requests, from the engine's usage reports (counted chunks where none came).",
		}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kneecap_rejections_total",
			Help: "Requests refused by admission, by reason (queue_full, queue_timeout, deadline, draining).",
		}, []string{"reason"}),
		missed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kneecap_slo_missed_total",
			Help: "Completed requests that missed a target, by target (ttft, tpot, e2e); a request may miss several.",
		}, []string{"target"}),
		notStreamed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kneecap_not_streamed_requests_total",
			Help: "Admitted generation requests whose clients did not stream, by route and how they were relayed: reassembled (streamed from the engine, measured, answered whole) or whole (relayed as they were, only their end-to-end time and usage measured).",
		}, []string{"route", "relay"}),
	}
	itl, err := newITLHistogram(histogram("kneecap_itl_seconds",
		"Gaps between successive output chunks, pooled over requests.",
		prometheus.ExponentialBucketsRange(0.001, 5, 20)))
	if err != nil {
		panic(err) // only for options newITLHistogram does not take
	}
	m.itl = itl
	m.ttftClient = m.ttft.WithLabelValues("client")
	m.ttftEngine = m.ttft.WithLabelValues("engine")
	for _, r := range []string{"queue_full", "queue_timeout", "deadline", "draining"} {
		m.rejections.WithLabelValues(r)
	}
	for _, t := range []string{"ttft", "tpot", "e2e"} {
		m.missed.WithLabelValues(t)
	}
	reg.MustRegister(m.requests, m.ttft, m.tpot, m.itl, m.e2e, m.queueWait, m.outputTokens, m.rejections, m.missed, m.notStreamed)
	return m
}

// rejectedByReason reads kneecap_rejections_total: the requests refused
// since the gateway started, by reason. It reads the counters the data
// path already keeps, so /status and the live page's history cost a
// refused request nothing more.
func (m *metrics) rejectedByReason() map[string]int64 {
	ch := make(chan prometheus.Metric)
	go func() {
		m.rejections.Collect(ch)
		close(ch)
	}()
	out := make(map[string]int64)
	for c := range ch {
		var d dto.Metric
		if c.Write(&d) != nil {
			continue
		}
		for _, l := range d.GetLabel() {
			if l.GetName() == "reason" {
				out[l.GetValue()] = int64(d.GetCounter().GetValue())
			}
		}
	}
	return out
}

// FirstChunk implements proxy.Observer; TTFTs are taken from the record.
func (m *metrics) FirstChunk(proxy.FirstChunk) {}

// Chunk implements proxy.Observer; the proxy calls Gaps instead.
func (m *metrics) Chunk(c proxy.Chunk) {
	m.itl.add(1, func(int) float64 { return c.Gap.Seconds() })
}

// Gaps implements proxy.GapObserver: a stream's gaps, in batches.
func (m *metrics) Gaps(cs []proxy.Chunk) {
	m.itl.add(len(cs), func(i int) float64 { return cs[i].Gap.Seconds() })
}

// Done implements proxy.Observer.
func (m *metrics) Done(r slo.Record) {
	o := r.Outcome
	m.requests.WithLabelValues(r.Route, o.String()).Inc()
	switch {
	case o.Has(slo.Rejected):
		m.rejections.WithLabelValues(r.Reason).Inc()
		return
	case o.Has(slo.InvalidRequest):
		return
	}
	m.queueWait.Observe(r.QueueWait.Seconds())
	if !r.Streamed {
		relay := "whole"
		if r.Reassembled {
			relay = "reassembled"
			m.reassembled.Add(1)
		} else {
			m.whole.Add(1)
		}
		m.notStreamed.WithLabelValues(r.Route, relay).Inc()
	}
	if !o.Completed() {
		return
	}
	for _, t := range [...]struct {
		bit  slo.Outcome
		name string
	}{{slo.MissedTTFT, "ttft"}, {slo.MissedTPOT, "tpot"}, {slo.MissedE2E, "e2e"}} {
		if o.Has(t.bit) {
			m.missed.WithLabelValues(t.name).Inc()
		}
	}
	m.outputTokens.Add(float64(r.OutputTokens))
	m.e2e.Observe(r.E2E.Seconds())
	if r.FirstObserved() {
		m.ttftClient.Observe(r.TTFT.Seconds())
		m.ttftEngine.Observe(r.EngineTTFT.Seconds())
	}
	if tpot, ok := r.TPOT(); ok {
		m.tpot.Observe(tpot.Seconds())
	}
}

// stateCollector exports the gauges that are read from the limiter and the
// window at scrape time, computing the window's statistics once per scrape.
type stateCollector struct {
	lim     *admission.Limiter
	win     *slo.Window
	targets slo.Targets

	running, queued, limit, goodput, attainment, demand, target   *prometheus.Desc
	prefillTokens, residentKV, held                               *prometheus.Desc
	away, idle, returns, refusedAgain, gaveUp, lateness, honoured *prometheus.Desc
}

func newStateCollector(lim *admission.Limiter, win *slo.Window, targets slo.Targets) *stateCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &stateCollector{
		lim: lim, win: win, targets: targets,
		running:    d("kneecap_running", "Generation requests holding a slot (running on the engine)."),
		queued:     d("kneecap_queued", "Generation requests waiting in the gateway's queue."),
		limit:      d("kneecap_concurrency_limit", "The current cap on generation requests running on the engine."),
		goodput:    d("kneecap_goodput_requests_per_second", "Completed requests that met every target, per second, over the SLO window."),
		attainment: d("kneecap_slo_attainment_ratio", "Share of judged requests (good, missed, rejected, engine errors) that were good over the SLO window; NaN with none."),
		demand: d("kneecap_demand_ratio",
			"Concurrency demanded relative to the cap by Little's law: (running + queued + rejections/s x mean E2E over the window) / limit. Above 1: demand beyond the knee (the autoscaling signal)."),
		target: d("kneecap_slo_target_seconds", "The operator's latency targets (absent when unset).", "target"),
		prefillTokens: d("kneecap_admission_prefill_tokens",
			"Prompt tokens (estimated) of granted requests still waiting for their first token: the prefill work under way."),
		residentKV: d("kneecap_admission_kv_tokens",
			"KV tokens the running requests hold in the engine as the gateway counts them (estimated prompts and output so far)."),
		held: d("kneecap_admission_held_total",
			"Requests held in the queue, once per reason that held each: cap, pacing, prefill (token budget: TTFT deadlines), step (token budget: TPOT), reserved.", "reason"),
		away: d("kneecap_admission_away",
			"Refused requests expected back: told a Retry-After that has not yet passed (with a grace), not yet seen again, not refused on their client's last try."),
		idle: d("kneecap_admission_idle_slot_seconds_total",
			"Slot time left idle while demand waited: integrated over time, the slots free under the cap, at most the requests queued plus the refused requests expected back."),
		returns: d("kneecap_admission_returns_total",
			"Refused requests that came back (the same tenant, route and body)."),
		refusedAgain: d("kneecap_admission_refused_again_total",
			"Refusals of a request that had been refused before."),
		gaveUp: d("kneecap_admission_gave_up_total",
			"Refusals of a request on its client's last try (X-Stainless-Retry-Count 2, or a third refusal): failed requests in the clients' applications."),
		lateness: d("kneecap_admission_return_lateness_seconds",
			"How long after its Retry-After a refused request came back (negative: early), a moving mean."),
		honoured: d("kneecap_admission_honoured_retry_after_seconds",
			"The longest Retry-After the clients are seen to wait out (0: none came back more than a second early); refused requests are promised slots no further ahead."),
	}
}

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.running, c.queued, c.limit, c.goodput, c.attainment, c.demand, c.target,
		c.prefillTokens, c.residentKV, c.held, c.away, c.idle, c.returns, c.refusedAgain, c.gaveUp, c.lateness, c.honoured} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.lim.State()
	ws := c.win.Stats(st.Now)
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(c.running, float64(st.Running))
	gauge(c.queued, float64(st.Queued))
	gauge(c.limit, float64(st.Limit))
	gauge(c.goodput, ws.Goodput)
	att := math.NaN()
	if ws.Judged > 0 {
		att = ws.Attainment
	}
	gauge(c.attainment, att)
	gauge(c.demand, DemandRatio(st, ws))
	gauge(c.prefillTokens, float64(st.PrefillTokens))
	gauge(c.residentKV, float64(st.ResidentKV))
	o := c.lim.Outside()
	gauge(c.away, float64(o.Away))
	gauge(c.lateness, o.Lateness.Seconds())
	gauge(c.honoured, o.Honoured.Seconds())
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	counter(c.idle, o.IdleSlotTime.Seconds())
	counter(c.returns, float64(o.Returned))
	counter(c.refusedAgain, float64(o.RefusedAgain))
	counter(c.gaveUp, float64(o.GaveUp))
	h := c.lim.Held()
	for _, r := range [...]struct {
		name string
		n    int64
	}{{"cap", h.Cap}, {"pacing", h.Pacing}, {"prefill", h.Prefill}, {"step", h.Step}, {"reserved", h.Reserved}} {
		ch <- prometheus.MustNewConstMetric(c.held, prometheus.CounterValue, float64(r.n), r.name)
	}
	for _, t := range [...]struct {
		name string
		d    time.Duration
	}{{"ttft", c.targets.TTFT}, {"tpot", c.targets.TPOT}, {"e2e", c.targets.E2E}} {
		if t.d > 0 {
			gauge(c.target, t.d.Seconds(), t.name)
		}
	}
}

// DemandRatio is the concurrency demanded relative to the cap, by Little's
// law: (running + queued + rejections/s x mean E2E) / limit. Rejected
// requests would each have occupied a slot for about a mean E2E; when no
// request completed in the window the limiter's mean slot hold time stands
// in for it. Above 1 means demand beyond the cap.
func DemandRatio(st admission.State, ws slo.Stats) float64 {
	hold := ws.E2E.Mean
	if ws.E2E.Count == 0 {
		hold = st.MeanHold
	}
	demand := float64(st.Running+st.Queued) + ws.RejectionRate*hold.Seconds()
	return demand / float64(max(st.Limit, 1))
}
