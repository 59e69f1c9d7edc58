package control

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// controllerMetrics are the kneecap_controller_* metrics. With a nil
// registerer they are kept but not exported.
type controllerMetrics struct {
	cap      prometheus.Gauge
	changes  *prometheus.CounterVec
	shifts   prometheus.Gauge
	deadline prometheus.Counter
	predTPOT prometheus.Gauge
	predTTFT prometheus.Gauge
	predWait prometheus.Gauge
	gapA     prometheus.Gauge
	gapB     prometheus.Gauge
	attain   prometheus.Gauge
	prefills prometheus.Gauge
	// the token model (see tokens)
	prefillToken, prefillSteps, stepLimit prometheus.Gauge
	step                                  *prometheus.GaugeVec
	plateau                               *prometheus.GaugeVec // the plateau's levels (see tick_plan.go)
	// the ramp (see controller_ramp.go)
	ramping, rampToward, rampRefused, rampIdle prometheus.Gauge
}

func newControllerMetrics(reg prometheus.Registerer) (*controllerMetrics, error) {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: "kneecap_controller_" + name, Help: help})
	}
	m := &controllerMetrics{
		cap: g("cap", "Concurrency cap chosen by the adaptive controller."),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kneecap_controller_changes_total", Help: "Changes of the cap, by direction (raise, lower).",
		}, []string{"direction"}),
		shifts: g("shifts", "Workload or engine shifts detected (the model's memory was cut)."),
		deadline: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kneecap_controller_deadline_rejections_total",
			Help: "Requests refused at once because predicted wait + engine TTFT exceeded their TTFT target.",
		}),
		predTPOT:     g("predicted_tpot_seconds", "Predicted TPOT at the cap, at the target percentile."),
		predTTFT:     g("predicted_engine_ttft_seconds", "Predicted engine TTFT at the cap, at the target percentile."),
		predWait:     g("predicted_wait_seconds", "Predicted queue wait of a request joining an empty queue."),
		gapA:         g("model_gap_base_seconds", "Fitted fixed part a of the time per output chunk, a + b x running."),
		gapB:         g("model_gap_per_running_seconds", "Fitted part b per running request of the time per output chunk."),
		attain:       g("attainment_ratio", "Measured share of finished requests that met all their targets."),
		prefills:     g("prefill_limit", "Requests that may wait for their first token at once (prefill pacing; 0: off)."),
		prefillToken: g("prefill_seconds_per_token", "Learned prefill time per prompt token (the token budget; 0: not learned)."),
		prefillSteps: g("prefill_steps", "Learned decode steps a prefill waits and takes, beside its tokens."),
		stepLimit:    g("step_limit_seconds", "Longest decode step the TPOT target allows at the percentile: the token budget's step limit (0: none)."),
		step: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kneecap_controller_step_seconds",
			Help: "Learned decode step: base + per_running x running + per_kv_token x resident KV tokens, by term.",
		}, []string{"term"}),
		plateau: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kneecap_controller_plateau_level",
			Help: "The plateau of the goodput curve: its first and last level (from, to), with goodput within 3 % of the best, its left edge (left_edge), the lowest level within 1 % of the best, and its fair edge (fair_edge), the lowest within 3 %, where the cap walks for a tenant held below its share by its own demand; 0: no plateau.",
		}, []string{"edge"}),
		ramping:     g("ramping", "1 while the cap ramps from where the gateway started (doubling, then narrowing, while the targets hold), 0 once it ended."),
		rampToward:  g("ramp_toward", "The level of the ramp's last raise (0: none yet)."),
		rampRefused: g("ramp_refused", "Requests refused while the cap ramped: what the ramp cost in refusals."),
		rampIdle:    g("ramp_idle_slot_seconds", "Slot time left idle while demand waited during the ramp, in seconds of one slot."),
	}
	m.changes.WithLabelValues("raise")
	m.changes.WithLabelValues("lower")
	for _, term := range []string{"base", "per_running", "per_kv_token"} {
		m.step.WithLabelValues(term)
	}
	for _, e := range []string{"from", "to", "left_edge", "fair_edge"} {
		m.plateau.WithLabelValues(e)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.cap, m.changes, m.shifts, m.deadline,
			m.predTPOT, m.predTTFT, m.predWait, m.gapA, m.gapB, m.attain, m.prefills,
			m.prefillToken, m.prefillSteps, m.stepLimit, m.step, m.plateau,
			m.ramping, m.rampToward, m.rampRefused, m.rampIdle} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *controllerMetrics) change(from, to int) {
	m.cap.Set(float64(to))
	if to > from {
		m.changes.WithLabelValues("raise").Inc()
	} else {
		m.changes.WithLabelValues("lower").Inc()
	}
}

// observe copies the controller's state after a decision.
func (m *controllerMetrics) observe(c *Controller, now time.Time) {
	m.shifts.Set(float64(c.shifts))
	m.gapA.Set(c.gap.a)
	m.gapB.Set(c.gap.b)
	if c.tab.ok {
		p := c.predict(c.cap)
		m.predTPOT.Set(p.TPOT)
		m.predTTFT.Set(p.TTFT)
	}
	if w, ok := c.PredictWait(now, 0); ok {
		m.predWait.Set(w.Seconds())
	}
	m.attain.Set(c.measuredAttainment(now))
	m.prefills.Set(float64(c.prefills))
	k := c.tok.costs(c.Costs().StepLimit, 0)
	m.prefillToken.Set(k.PrefillPerToken)
	m.prefillSteps.Set(k.PrefillSteps)
	m.stepLimit.Set(k.StepLimit.Seconds())
	m.step.WithLabelValues("base").Set(k.StepBase.Seconds())
	m.step.WithLabelValues("per_running").Set(k.StepPerRunning.Seconds())
	m.step.WithLabelValues("per_kv_token").Set(k.StepPerKVToken)
	m.plateau.WithLabelValues("from").Set(float64(c.plat.from))
	m.plateau.WithLabelValues("to").Set(float64(c.plat.to))
	m.plateau.WithLabelValues("left_edge").Set(float64(c.plat.left))
	m.plateau.WithLabelValues("fair_edge").Set(float64(c.plat.fairLeft))
	m.ramping.Set(indicator(c.ramp.on))
	m.rampToward.Set(float64(c.ramp.toward))
	m.rampRefused.Set(float64(c.ramp.refused))
	m.rampIdle.Set(c.ramp.idle)
}
