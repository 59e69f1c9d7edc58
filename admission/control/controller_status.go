package control

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/kneecap/kneecap/slo"
)

// Float is a float64 that encodes in JSON as a number when it is finite
// and as null when it is NaN or infinite. encoding/json refuses those, and
// one of them anywhere in a document fails all of it: the status types use
// Float so that /status encodes whatever the model holds.
type Float float64

// MarshalJSON implements json.Marshaler.
func (f Float) MarshalJSON() ([]byte, error) {
	if !finite(float64(f)) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(f))
}

// ControllerStatus is the controller's state as /status shows it.
type ControllerStatus struct {
	Mode string `json:"mode"` // "adaptive"
	Cap  int    `json:"cap"`
	// PrefillLimit is how many requests may wait for their first token at
	// once (prefill pacing, see Controller.PrefillLimit); 0: pacing off.
	PrefillLimit int `json:"prefill_limit"`
	// Learning is true while no level has been measured under demand
	// long enough for its goodput to count (20 s; again after a detected
	// shift): the cap grows as fast as the model allows, and the reason
	// says so.
	Learning   bool      `json:"learning"`
	Reason     string    `json:"reason"`
	ChangedAt  time.Time `json:"changed_at,omitzero"`
	Percentile Float     `json:"percentile"`
	MinCap     int       `json:"min_cap"`
	MaxCap     int       `json:"max_cap"`
	// Model is the fitted mean model: gap(n) = a + b n per output chunk and
	// engine TTFT(n) = a + b n, in seconds.
	GapA  Float `json:"gap_a_seconds"`
	GapB  Float `json:"gap_b_seconds"`
	TTFTA Float `json:"engine_ttft_a_seconds"`
	TTFTB Float `json:"engine_ttft_b_seconds"`
	// Spread factors Q_P(observed / model mean).
	TPOTSpread Float `json:"tpot_spread"`
	TTFTSpread Float `json:"engine_ttft_spread"`
	// Attainment is the measured share of finished requests that met all
	// their targets over the memory window.
	Attainment Float  `json:"attainment"`
	Shifts     int    `json:"shifts"`
	LastShift  string `json:"last_shift,omitempty"`
	// PredictedWait is the predicted wait of a request joining an empty
	// queue now, in seconds.
	PredictedWait Float `json:"predicted_wait_seconds"`
	// Tokens is the model of the engine's costs in tokens and the token
	// budget it gives the limiter.
	Tokens TokenStatus `json:"tokens"`
	// Plateau is the run of levels whose goodput is within the noise of
	// the best, as the last decision saw it; nil: none (no model yet, or
	// no level meets the targets at the percentile).
	Plateau *PlateauStatus `json:"plateau,omitempty"`
	// Ramp is the slow start from where the gateway started: whether the
	// cap is still ramping, toward what, and what the ramp cost
	// (controller_ramp.go).
	Ramp RampStatus `json:"ramp"`
	// Levels are at most maxStatusLevels (64) levels around the cap (see
	// Status); LevelsOmitted counts the others that would have been listed.
	Levels        []LevelStatus `json:"levels"`
	LevelsOmitted int           `json:"levels_omitted,omitempty"`
}

// TokenStatus is the model of the engine's costs in tokens (see tokens)
// and the budget it sets: what the limiter weighs beside the count cap.
type TokenStatus struct {
	// Budget is true when the limiter holds the token budget (learned and
	// not turned off by KNEECAP_TOKEN_BUDGET=false).
	Budget bool `json:"budget"`
	// Prefill: base + steps x the decode step + per token x prompt tokens,
	// in seconds; 0 per token: not learned yet.
	PrefillBase     Float `json:"prefill_base_seconds"`
	PrefillSteps    Float `json:"prefill_steps"`
	PrefillPerToken Float `json:"prefill_seconds_per_token"`
	// Step: base + per running x running + per KV token x resident KV
	// tokens, in seconds; StepLimit is the longest step the TPOT target
	// allows at the percentile (0: no step budget).
	StepBase       Float `json:"step_base_seconds"`
	StepPerRunning Float `json:"step_per_running_seconds"`
	StepPerKVToken Float `json:"step_per_kv_token_seconds"`
	StepLimit      Float `json:"step_limit_seconds"`
	// HiddenKV is the KV tokens the engine holds beyond its running
	// requests' (read from its metrics); MeanOutput and MeanPrompt are the
	// recent requests' output (usage) and prompt (estimate) in tokens.
	HiddenKV   Float `json:"hidden_kv_tokens"`
	MeanOutput Float `json:"mean_output_tokens"`
	MeanPrompt Float `json:"mean_prompt_tokens"`
	// LongestMeeting is the longest prompt, in tokens, that meets the
	// operator's TTFT target with the engine to itself; longer ones are
	// served when the engine has room, never refused for their size alone.
	LongestMeeting int `json:"longest_prompt_meeting_ttft,omitempty"`
}

// PlateauStatus is the plateau of the goodput curve (see
// tick_plan.go): the levels From to To serve goodput within Noise
// (req/s) of the best, Best; LeftEdge is the lowest level whose goodput,
// averaged over 30 s, is within 1 % of the best: the same goodput at the
// least latency, where the cap walks under sustained demand. FairEdge is
// the lowest level within 3 %, where it walks while a tenant runs every
// request it has and less than its share (TenantShort: its own, true
// while most recent decisions saw one).
type PlateauStatus struct {
	From        int   `json:"from"`
	To          int   `json:"to"`
	LeftEdge    int   `json:"left_edge"`
	FairEdge    int   `json:"fair_edge"`
	TenantShort bool  `json:"tenant_short"`
	Best        Float `json:"best_goodput_requests_per_second"`
	Noise       Float `json:"noise"`
}

// LevelStatus is what the controller learned about one running count.
type LevelStatus struct {
	Running int `json:"running"`
	// Samples are the forgotten weights of gap and first-token samples.
	GapSamples  Float `json:"gap_samples"`
	TTFTSamples Float `json:"engine_ttft_samples"`
	// MeanGap and MeanEngineTTFT are measured at this level (0: none).
	MeanGap        Float `json:"mean_gap_seconds"`
	MeanEngineTTFT Float `json:"mean_engine_ttft_seconds"`
	// PredictedTPOT and PredictedEngineTTFT are the model's P-quantiles.
	PredictedTPOT       Float `json:"predicted_tpot_seconds"`
	PredictedEngineTTFT Float `json:"predicted_engine_ttft_seconds"`
	// Attainment is the predicted share of requests meeting the operator's
	// targets at this level; Meets is Attainment >= the percentile.
	Attainment Float `json:"predicted_attainment"`
	Meets      bool  `json:"meets_targets"`
	// Goodput is the goodput in req/s the controller weighs for this
	// level when it chooses the cap: n / hold(n) x the predicted
	// attainment over the classes' shares (0 below an attainment of 0.5:
	// never an operating point), blended with the goodput measured while
	// the cap held n once that held 20 s under demand.
	Goodput Float `json:"predicted_goodput_requests_per_second"`
	// Dwell is how long the cap held this level under demand (forgotten
	// with the model's memory), MeasuredGoodput the good completions per
	// second of that time: the measured points behind Goodput (0: none).
	Dwell           Float `json:"dwell_seconds"`
	MeasuredGoodput Float `json:"measured_goodput_requests_per_second"`
	// MeasuredAttainment is the share of requests with the operator's
	// targets that met them among those that ended while the cap held this
	// level, MeasuredRequests their (forgotten) count; 0: none.
	MeasuredAttainment Float `json:"measured_attainment"`
	MeasuredRequests   Float `json:"measured_requests"`
}

// Status reports the controller's state. Of the levels from 1 to twice the
// cap (at most MaxCap, and at most 16 above the highest level measured)
// and any other level with measurements, it lists at most 64: those around
// the cap (with a fixed cap, around the mean running count).
func (c *Controller) Status(now time.Time) ControllerStatus {
	s := c.tab.s
	st := ControllerStatus{
		Mode: "adaptive", Cap: c.cap, PrefillLimit: c.prefills, Reason: c.reason, ChangedAt: c.changedAt,
		Percentile: Float(c.cfg.Percentile), MinCap: c.cfg.MinCap, MaxCap: c.cfg.MaxCap,
		GapA: Float(c.gap.a), GapB: Float(c.gap.b), TTFTA: Float(c.ttft.a), TTFTB: Float(c.ttft.b),
		TPOTSpread: Float(s.qTPOT), TTFTSpread: Float(s.qTTFT), Shifts: c.shifts, LastShift: c.lastShift,
	}
	if st.Learning = c.learning(); st.Learning && !strings.HasPrefix(st.Reason, "learning") {
		st.Reason += " (still learning: no level measured under demand for 20s yet)"
	}
	st.Attainment = Float(c.measuredAttainment(now))
	if p := c.plat; p.to > 0 {
		st.Plateau = &PlateauStatus{From: p.from, To: p.to, LeftEdge: p.left, FairEdge: p.fairLeft, TenantShort: c.tenantShort(),
			Best: Float(p.best), Noise: Float(p.noise)}
	}
	st.Tokens = c.tokenStatus()
	st.Ramp = c.rampStatus(now)
	if w, ok := c.PredictWait(now, 0); ok {
		st.PredictedWait = Float(w.Seconds())
	}
	ready := c.tab.ok
	var a []float64
	var classes []class
	if ready {
		a = c.attainment(c.op)
		classes = c.statusShares(now)
	}
	var levels []int
	levels, st.LevelsOmitted = c.statusLevels()
	for _, n := range levels {
		gw, gm := c.gap.level(n)
		tw, tm := c.ttft.level(n)
		l := LevelStatus{Running: n, GapSamples: Float(gw), TTFTSamples: Float(tw), MeanGap: Float(gm), MeanEngineTTFT: Float(tm)}
		if d := c.dwell.get(n); d.w > 0 {
			l.Dwell, l.MeasuredGoodput = Float(d.w), Float(d.sum/d.w)
		}
		if m := c.measured[c.op].get(n); m.w > 0 {
			l.MeasuredRequests, l.MeasuredAttainment = Float(m.w), Float(m.sum/m.w)
		}
		if ready {
			p := c.predict(n)
			l.PredictedTPOT, l.PredictedEngineTTFT = Float(p.TPOT), Float(p.TTFT)
			l.Attainment = Float(attAt(a, n))
			l.Meets = attAt(a, n) >= c.cfg.Percentile
			l.Goodput = Float(c.goodput(classes, n))
		}
		st.Levels = append(st.Levels, l)
	}
	return st
}

// statusShares is classShares for Status: the same shares, without ageing
// the stored weights. classShares ages them in place, as decisions do; a
// reader of /status must leave exactly what the next decision reads.
func (c *Controller) statusShares(now time.Time) []class {
	saved := make(map[slo.Targets]decayed, len(c.classes))
	for t, d := range c.classes {
		saved[t] = *d
	}
	out := c.classShares(now)
	for t, d := range c.classes {
		*d = saved[t]
	}
	return out
}

// statusLevels returns the levels Status lists, in order, and how many
// others it would have listed without the bound of maxStatusLevels.
func (c *Controller) statusLevels() (levels []int, omitted int) {
	for n := 1; n <= min(c.cfg.MaxCap, c.levelsSeen()+16); n++ {
		gw, _ := c.gap.level(n)
		tw, _ := c.ttft.level(n)
		if n > 2*c.cap && gw < 0.5 && tw < 0.5 {
			continue
		}
		levels = append(levels, n)
	}
	if len(levels) <= maxStatusLevels {
		return levels, 0
	}
	centre := c.cap
	if c.cfg.Fixed && c.busy.w > 0 {
		centre = max(1, int(math.Min(math.Round(c.busy.mean()), float64(c.cfg.MaxCap))))
	}
	i, _ := slices.BinarySearch(levels, centre) // levels are sorted
	lo := max(0, min(i-maxStatusLevels/2, len(levels)-maxStatusLevels))
	return levels[lo : lo+maxStatusLevels], len(levels) - maxStatusLevels
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
	t := c.op
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
			k, attAt(a, k), ma, mw, c.goodput(classes, k), dw, dg, p.TTFT, p.TPOT, p.Hold, 1000*gm, gw, 1000*c.gap.at(float64(k)))
	}
	return string(b)
}

// learning reports whether the controller is still learning: adaptive,
// and no level has dwelt under demand long enough for its measured
// goodput to count (dwell is cleared by a detected shift).
func (c *Controller) learning() bool {
	if c.cfg.Fixed {
		return false
	}
	for _, d := range c.dwell {
		if d.w >= minDwell {
			return false
		}
	}
	return true
}
