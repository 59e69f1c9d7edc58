package admission

import (
	"fmt"
	"time"

	"github.com/kneecap/kneecap/slo"
)

// ControllerStatus is the controller's state as /status shows it.
type ControllerStatus struct {
	Mode string `json:"mode"` // "adaptive"
	Cap  int    `json:"cap"`
	// PrefillLimit is how many requests may wait for their first token at
	// once (prefill pacing, see Controller.PrefillLimit); 0: pacing off.
	PrefillLimit int       `json:"prefill_limit"`
	Reason       string    `json:"reason"`
	ChangedAt    time.Time `json:"changed_at,omitzero"`
	Percentile   float64   `json:"percentile"`
	MinCap       int       `json:"min_cap"`
	MaxCap       int       `json:"max_cap"`
	// Model is the fitted mean model: gap(n) = a + b n per output chunk and
	// engine TTFT(n) = a + b n, in seconds.
	GapA  float64 `json:"gap_a_seconds"`
	GapB  float64 `json:"gap_b_seconds"`
	TTFTA float64 `json:"engine_ttft_a_seconds"`
	TTFTB float64 `json:"engine_ttft_b_seconds"`
	// Spread factors Q_P(observed / model mean).
	TPOTSpread float64 `json:"tpot_spread"`
	TTFTSpread float64 `json:"engine_ttft_spread"`
	// Attainment is the measured share of finished requests that met all
	// their targets over the memory window.
	Attainment float64 `json:"attainment"`
	Shifts     int     `json:"shifts"`
	LastShift  string  `json:"last_shift,omitempty"`
	// PredictedWait is the predicted wait of a request joining an empty
	// queue now, in seconds.
	PredictedWait float64       `json:"predicted_wait_seconds"`
	Levels        []LevelStatus `json:"levels"`
}

// LevelStatus is what the controller learned about one running count.
type LevelStatus struct {
	Running int `json:"running"`
	// Samples are the forgotten weights of gap and first-token samples.
	GapSamples  float64 `json:"gap_samples"`
	TTFTSamples float64 `json:"engine_ttft_samples"`
	// MeanGap and MeanEngineTTFT are measured at this level (0: none).
	MeanGap        float64 `json:"mean_gap_seconds"`
	MeanEngineTTFT float64 `json:"mean_engine_ttft_seconds"`
	// PredictedTPOT and PredictedEngineTTFT are the model's P-quantiles.
	PredictedTPOT       float64 `json:"predicted_tpot_seconds"`
	PredictedEngineTTFT float64 `json:"predicted_engine_ttft_seconds"`
	// Attainment is the predicted share of requests meeting the operator's
	// targets at this level; Meets is Attainment >= the percentile.
	Attainment float64 `json:"predicted_attainment"`
	Meets      bool    `json:"meets_targets"`
}

// Status reports the controller's state. It lists the levels from 1 to
// twice the cap (at most MaxCap, and at most 16 above the highest level
// measured) and any other level with measurements.
func (c *Controller) Status(now time.Time) ControllerStatus {
	s := c.tab.s
	st := ControllerStatus{
		Mode: "adaptive", Cap: c.cap, PrefillLimit: c.prefills, Reason: c.reason, ChangedAt: c.changedAt,
		Percentile: c.cfg.Percentile, MinCap: c.cfg.MinCap, MaxCap: c.cfg.MaxCap,
		GapA: c.gap.a, GapB: c.gap.b, TTFTA: c.ttft.a, TTFTB: c.ttft.b,
		TPOTSpread: s.qTPOT, TTFTSpread: s.qTTFT, Shifts: c.shifts, LastShift: c.lastShift,
	}
	st.Attainment = c.measuredAttainment(now)
	if w, ok := c.PredictWait(now, 0); ok {
		st.PredictedWait = w.Seconds()
	}
	t := c.targetsOf(slo.Targets{})
	ready := c.tab.ok
	for n := 1; n <= min(c.cfg.MaxCap, c.levelsSeen()+16); n++ {
		gw, gm := c.gap.level(n)
		tw, tm := c.ttft.level(n)
		if n > 2*c.cap && gw < 0.5 && tw < 0.5 {
			continue
		}
		l := LevelStatus{Running: n, GapSamples: gw, TTFTSamples: tw, MeanGap: gm, MeanEngineTTFT: tm}
		if ready {
			p := c.predict(n)
			l.PredictedTPOT, l.PredictedEngineTTFT = p.TPOT, p.TTFT
			if a := c.attainment(t); n < len(a) {
				l.Attainment = a[n]
				l.Meets = a[n] >= c.cfg.Percentile
			}
		}
		st.Levels = append(st.Levels, l)
	}
	return st
}

// measuredAttainment is the measured share of finished requests that met all their
// targets, over the memory window; 0 before any finished.
func (c *Controller) measuredAttainment(now time.Time) float64 {
	c.good.decay(now, c.cfg.Memory)
	c.finished.decay(now, c.cfg.Memory)
	if c.finished.w <= 0 {
		return 0
	}
	return c.good.w / c.finished.w
}

// debugLevels describes the levels around n for a debug log: per level the
// predicted attainment (operator's targets), the measured one and its
// weight, the predicted goodput, and the measured dwell.
func (c *Controller) debugLevels(now time.Time, n int) string {
	if !c.tab.ok {
		return "no model"
	}
	t := c.targetsOf(slo.Targets{})
	a := c.attainment(t)
	classes := c.classShares(now)
	var b []byte
	b = fmt.Appendf(b, "{gap a=%.1fms b=%.2fms qTPOT=%.2f mTPOT=%.2f shifts=%d %s k=%d} ", 1000*c.gap.a, 1000*c.gap.b, c.tab.s.qTPOT, c.tab.s.mTPOT, c.shifts, c.lastShift, c.prefills)
	for k := max(1, n-3); k <= min(c.cfg.MaxCap, n+3); k++ {
		ma, mw := 0.0, 0.0
		if m := c.measured[t].get(k); m.w > 0 {
			mw, ma = m.w, m.sum/m.w
		}
		dw, dg := 0.0, 0.0
		if d := c.dwell.get(k); d.w > 0 {
			dw, dg = d.w, d.sum/d.w
		}
		p := c.predict(k)
		gw, gm := c.gap.level(k)
		b = fmt.Appendf(b, "[%d A=%.2f meas=%.2f/%.0f G=%.3f dwell=%.0fs/%.3f ttftP=%.2f tpotP=%.3f hold=%.1f gap=%.1fms/%.0f curve=%.1fms] ",
			k, a[k], ma, mw, c.goodput(classes, k), dw, dg, p.TTFT, p.TPOT, p.Hold, 1000*gm, gw, 1000*c.gap.at(float64(k)))
	}
	return string(b)
}
