package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/admission/control"
	"github.com/kneecap/kneecap/proxy"
	"github.com/kneecap/kneecap/slo"
)

// ClassStatus is one priority class in /status.
type ClassStatus struct {
	Name    string `json:"name"`
	Running int    `json:"running"`
	Queued  int    `json:"queued"`
	Granted int64  `json:"granted"`
	Shed    int64  `json:"shed"`
}

// TenantStatus is one tenant of a class in /status: the most served
// tenants by name (an API key only as its hash), the rest as "other".
type TenantStatus struct {
	Class        string        `json:"class,omitempty"`
	Tenant       string        `json:"tenant"`
	Running      int           `json:"running"`
	Queued       int           `json:"queued"`
	Granted      int64         `json:"granted"`
	ServedTokens control.Float `json:"served_tokens"`
}

func classesStatus(lim *admission.Limiter, topN int) ([]ClassStatus, []TenantStatus) {
	var cs []ClassStatus
	for _, c := range lim.Classes() {
		cs = append(cs, ClassStatus{Name: c.Name, Running: c.Running, Queued: c.Queued, Granted: c.Granted, Shed: c.Shed})
	}
	var ts []TenantStatus
	for _, t := range tenants(lim, topN) {
		ts = append(ts, TenantStatus{Class: t.Class, Tenant: t.Tenant, Running: t.Running, Queued: t.Queued, Granted: t.Granted, ServedTokens: control.Float(t.Served)})
	}
	return cs, ts
}

// tenants is lim.Tenants(topN) ending with the row "other" always (zero
// when every tenant has a row of its own), so that its series exist from
// the start.
func tenants(lim *admission.Limiter, topN int) []admission.TenantStats {
	ts := lim.Tenants(topN)
	if n := len(ts); n == 0 || ts[n-1].Tenant != "other" || ts[n-1].Class != "" {
		ts = append(ts, admission.TenantStats{Tenant: "other"})
	}
	return ts
}

// classCollector exports the limiter's classes and its most served
// tenants at scrape time (at most topN tenant labels, plus "other").
type classCollector struct {
	lim  *admission.Limiter
	topN int

	running, queued, granted, shed, tRunning, tQueued, tServed *prometheus.Desc
}

func newClassCollector(lim *admission.Limiter, topN int) *classCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &classCollector{
		lim: lim, topN: topN,
		running: d("kneecap_class_running", "Generation requests holding a slot, by priority class.", "class"),
		queued:  d("kneecap_class_queued", "Generation requests waiting for a slot, by priority class.", "class"),
		granted: d("kneecap_class_granted_total", "Slots granted, by priority class.", "class"),
		shed:    d("kneecap_class_shed_total", "Queued requests displaced by a request of higher priority or of a tenant under its share, by the class of the displaced one.", "class"),
		tRunning: d("kneecap_tenant_running",
			"Generation requests holding a slot, by class and tenant: the tenants served the most tokens by name (an API key as its hash), the rest as tenant=\"other\".", "class", "tenant"),
		tQueued: d("kneecap_tenant_queued", "Generation requests waiting for a slot, by class and tenant (as kneecap_tenant_running).", "class", "tenant"),
		tServed: d("kneecap_tenant_served_tokens",
			"Weighted tokens served (prompt x KNEECAP_FAIR_PROMPT_WEIGHT + output x KNEECAP_FAIR_OUTPUT_WEIGHT), by class and tenant (as kneecap_tenant_running); a gauge, since a tenant may move in and out of the named ones.", "class", "tenant"),
	}
}

// Describe implements prometheus.Collector.
func (c *classCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.running, c.queued, c.granted, c.shed, c.tRunning, c.tQueued, c.tServed} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *classCollector) Collect(ch chan<- prometheus.Metric) {
	metric := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, t, v, labels...)
	}
	for _, k := range c.lim.Classes() {
		metric(c.running, prometheus.GaugeValue, float64(k.Running), k.Name)
		metric(c.queued, prometheus.GaugeValue, float64(k.Queued), k.Name)
		metric(c.granted, prometheus.CounterValue, float64(k.Granted), k.Name)
		metric(c.shed, prometheus.CounterValue, float64(k.Shed), k.Name)
	}
	for _, t := range tenants(c.lim, c.topN) {
		metric(c.tRunning, prometheus.GaugeValue, float64(t.Running), t.Class, t.Tenant)
		metric(c.tQueued, prometheus.GaugeValue, float64(t.Queued), t.Class, t.Tenant)
		metric(c.tServed, prometheus.GaugeValue, t.Served, t.Class, t.Tenant)
	}
}

// classRequests counts finished requests by class and outcome (goodput
// per class is the rate of outcome="good").
type classRequests struct{ v *prometheus.CounterVec }

var _ proxy.GapObserver = classRequests{}

// newClassRequests registers the counter, with the good requests of each
// class at zero from the start.
func newClassRequests(reg prometheus.Registerer, classes []admission.ClassConfig) classRequests {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kneecap_class_requests_total",
		Help: "Generation requests by priority class and outcome (as kneecap_requests_total).",
	}, []string{"class", "outcome"})
	for _, c := range classes {
		v.WithLabelValues(c.Name, slo.Good.String())
	}
	reg.MustRegister(v)
	return classRequests{v}
}

func (classRequests) FirstChunk(proxy.FirstChunk) {}
func (classRequests) Chunk(proxy.Chunk)           {}
func (classRequests) Gaps([]proxy.Chunk)          {} // a batch, not a call per chunk: it takes none
func (c classRequests) Done(r slo.Record) {
	c.v.WithLabelValues(r.Class, r.Outcome.String()).Inc()
}
