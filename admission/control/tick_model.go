package control

import (
	"fmt"
	"math"
	"time"

	"github.com/kneecap/kneecap/slo"
)

// Model: a decision checks both latencies at the cap for a shift
// (detectShift, shift), refits the curves and the token model and
// rebuilds the per-level table (refresh; see tick.go). The model itself
// is in model*.go; model_table.go reads the table (predict, attainment)
// for the plan, the moves and the deadline check.

// detectShift checks both latencies at the level the cap holds, and the
// decode step pooled over every level (stepShift).
func (c *Controller) detectShift(now time.Time) {
	if r, ok := c.gapShift.check(now, c.cap); ok {
		c.shift(now, "time per token", c.gap, r)
	} else if r, ok := c.stepShift.check(now, c.cfg.Memory); ok {
		c.shift(now, "time per token", c.gap, r)
	} else if r, ok := c.ttftShift.check(now, c.cap); ok {
		c.shift(now, "engine TTFT", c.ttft, r)
	}
}

// shift rescales a curve whose recent samples left its band and cuts the
// weight of everything learned before.
func (c *Controller) shift(now time.Time, what string, cv *curve, r float64) {
	cv.scale(r, 0.1)
	// The token model follows: a shift of the step rescales the decode
	// step, one of engine TTFT the prefill.
	if cv == c.gap {
		// A slower step makes slower prefills too (they are steps).
		c.tok.step.scale(r, 0.1)
		c.tok.prefill.scale(r, 0.3)
	} else {
		c.tok.prefill.scale(r, 0.1)
		c.tok.step.scale(1, 0.3)
	}
	other := c.ttft
	if cv == c.ttft {
		other = c.gap
	}
	other.scale(1, 0.3) // a shift in one rarely leaves the other as it was
	c.walked = false    // the plateau is learnt again
	clear(c.smooth)
	clear(c.failed) // what failed before may work now, and vice versa
	clear(c.probes)
	c.idle = decayed{}
	clear(c.dwell)    // goodput measured in the old regime
	clear(c.measured) // and attainment
	// A shift of engine TTFT makes the samples of it a different regime's:
	// they are forgotten. A shift of the time per token keeps them. The
	// step time follows the KV cache of the requests running, so with
	// heavy-tailed prompts a few long ones move it by a third and more for
	// as long as they run, and the detector fires about every minute
	// (scenario 12, seed 1: 12 shifts in 13 minutes); forgetting the
	// samples then left the next few first tokens, the long prompt's
	// neighbours, to predict every level (attainment 0 everywhere, the cap
	// halved to 1). The samples are measurements, moved between levels
	// along the TTFT curve, which follows the step. (Keeping the measured
	// goodput and attainment across a step shift as well helped scenario
	// 12 more but slowed the re-convergence after a real slowdown or
	// longer prompts, scenarios 4 and 5, on most seeds.)
	if cv == c.ttft {
		c.ttftR.reset()
		c.ttftSamples.reset()
	}
	c.shifts++
	c.shiftAt = now
	if cv == c.gap {
		c.stepShiftAt = now
	}
	c.lastShift = fmt.Sprintf("%s shifted x%.2f at %s", what, r, now.Format(time.TimeOnly))
	c.gapShift.reset()
	c.ttftShift.reset()
	c.stepShift.reset()
}

// refresh refits the curves and rebuilds the table. At each level n:
//
//	gap(n)    = w*measured mean + (1-w)*(a + b n),  w = min(1, weight/200)
//	TPOT_P(n) = Q_P(tpot / gap(n_i)) * gap(n)
//
// Engine TTFT's spread grows with the running count (prefills collide more
// often), so its P-quantile and median at n are estimated from the recent
// samples near n (see localQuantile). Predictions are made non-decreasing
// in n: more requests running never make a step faster.
func (c *Controller) refresh(now time.Time) {
	c.tok.refit(now)
	c.gap.fit(now)
	c.ttft.fit(now)
	c.tab.ok = c.gap.ok && c.ttft.ok
	c.tab.bad = false
	if !c.tab.ok {
		return
	}
	defer c.checkFinite()
	s := c.spreadAt(now)
	c.tab.s = s
	live := c.ttftSamples.live(now)
	c.tab.at, c.tab.engineTTFT, c.tab.att = now, live, map[slo.Targets][]float64{}
	c.tab.tp = c.tpotR.values(now)
	if k := len(c.tab.tp); k > 64 { // a thinned sample keeps the cost bounded
		thin := make([]float64, 64)
		for i := range thin {
			thin[i] = c.tab.tp[i*k/64]
		}
		c.tab.tp = thin
	}
	buf := make([]wsample, 0, len(live))
	lo, hi := localSpan(live)
	// Above the highest level with a measured gap and beyond the reach of
	// the live TTFT samples, a prediction follows the fitted curves alone:
	// predict computes those levels when asked instead of storing MaxCap
	// of them (with a cap fixed at 100000, 6 MB rebuilt every second).
	maxN := c.cfg.MaxCap
	top := maxN
	if c.curvesOnlyAbove(s) {
		top = min(maxN, max(len(c.gap.levels)-1, hi, 1))
	}
	if cap(c.tab.p) < top+1 {
		c.tab.p = make([]prediction, top+1)
	}
	c.tab.p = c.tab.p[:top+1]
	var prev prediction
	tokGap := c.tokenGap(now)
	for n := 1; n <= top; n++ {
		g := c.gap.at(float64(n))
		if tokGap != nil {
			g = tokGap(n)
		}
		if w, m := c.gap.level(n); w > 0 {
			k := math.Min(1, w/fullGapWeight)
			g = k*m + (1-k)*g
		}
		f := c.ttft.at(float64(n))
		q, mf := s.qTTFT*f, s.mTTFT*f
		if n < lo || n > hi {
			// No live sample is near enough to weigh: localQuantile would
			// find none (this skip keeps a large MaxCap cheap).
		} else if w, total := localWeights(live, n, now, c.cfg.Memory, c.ttft.at, buf); total > 0 {
			// localQuantile at P and at 0.5, from one weighing.
			q, mf = weightedQuantile(w, total, c.cfg.Percentile), weightedQuantile(w, total, 0.5)
			buf = w
		}
		prev = s.predictionAt(n, g, f, q, mf, prev)
		c.tab.p[n] = prev
	}
}

func (c *Controller) spreadAt(now time.Time) spread {
	p := c.cfg.Percentile
	tp := c.tpotR.values(now)
	tf := c.ttftR.values(now)
	out := c.outTokens.values(now)
	s := spread{
		qTPOT: quantile(tp, p, tpotPrior, 3, 20),
		qTTFT: quantile(tf, p, ttftPrior, 3, 20),
		mTPOT: 1, mTTFT: 1,
		outP: quantile(out, p, 0, 1, 1), outMean: mean(out),
	}
	if len(tp) > 0 {
		s.mTPOT = mean(tp)
	}
	if len(tf) > 0 {
		s.mTTFT = mean(tf)
	}
	s.stallPer = c.stallPer(s.outMean)
	return s
}

// checkFinite marks the table unknown (not ok, bad) if anything in it is
// NaN or infinite: every sample that reaches the model is finite and every
// ratio has a positive denominator, so this does not happen; if it ever
// does, Decide holds the cap and Admit lets requests queue, as before
// anything was learnt, instead of deciding on NaN (every comparison with
// it is false, which reads as a miss and lowers the cap).
func (c *Controller) checkFinite() {
	s := c.tab.s
	ok := finite(c.gap.a) && finite(c.gap.b) && finite(c.ttft.a) && finite(c.ttft.b) &&
		finite(s.qTPOT) && finite(s.qTTFT) && finite(s.mTPOT) && finite(s.mTTFT) && finite(s.outP) && finite(s.outMean) && finite(s.stallPer)
	for n := 1; ok && n < len(c.tab.p); n++ {
		p := &c.tab.p[n]
		ok = finite(p.TPOT) && finite(p.TTFT) && finite(p.E2E) && finite(p.MeanTTFT) && finite(p.Hold) && finite(p.Gap) && finite(p.CurveTTFT) && finite(p.TGap)
	}
	if !ok {
		c.tab.ok, c.tab.bad = false, true
	}
}
