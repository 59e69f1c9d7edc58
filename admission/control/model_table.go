package control

import (
	"math"
	"time"

	"github.com/kneecap/kneecap/slo"
)

// prediction is what the model predicts at one running count n.
type prediction struct {
	// TPOT and TTFT are the predicted P-quantiles of TPOT and engine TTFT.
	TPOT, TTFT float64
	// E2E is TTFT_P + (Q_P(output tokens) - 1) * TPOT_P.
	E2E float64
	// MeanTTFT is the predicted mean engine TTFT.
	MeanTTFT float64
	// Hold is the mean slot hold, MeanTTFT + (mean output - 1) * mean TPOT;
	// by Little's law the engine completes n/Hold requests per second.
	Hold float64
	// Gap is the mean time per output chunk and CurveTTFT the fitted
	// curve's mean engine TTFT, both at n. TGap is the mean time per output
	// token a request sees: Gap and its share of the prefills that stall
	// it (see spread.stallPer); TPOT spreads around it.
	Gap, CurveTTFT, TGap float64
}

// spread holds the measured spread factors for one decision.
type spread struct {
	qTPOT, qTTFT, mTPOT, mTTFT float64
	outP, outMean              float64
	// stallPer is the time per output token that each running request
	// adds to a request's TPOT by the prefills that stall it: while one
	// request runs, about as many others are admitted as run (Little's
	// law), each stalling its next token for a prefill, so its TPOT is
	// gap(n) + n x prefill / (output - 1). 0 before the token model knows
	// the prefill, or without the token budget.
	stallPer float64
}

// table is the model's predictions for the levels 1..len(p)-1, rebuilt by
// refresh; decisions between two refreshes read it through predict, which
// computes the levels above from the fitted curves.
type table struct {
	ok         bool
	bad        bool // not ok because a fit or prediction was not finite
	at         time.Time
	s          spread
	p          []prediction // index n, up to the highest level with measurements
	engineTTFT []sample     // live engine TTFT samples
	tp         []float64    // live TPOT ratios, sorted
	att        map[slo.Targets][]float64
	// attCap is the cap att was computed around.
	attCap int
}

// predictionAt is the prediction at a level with mean gap g, fitted engine
// TTFT f, and engine TTFT P-quantile q and median mf there, made no lower
// than prev, the prediction one level below.
func (s spread) predictionAt(n int, g, f, q, mf float64, prev prediction) prediction {
	tg := g + s.stallPer*float64(n)
	x := prediction{TPOT: s.qTPOT * tg, TTFT: math.Max(q, 0), MeanTTFT: math.Max(mf, 0), Gap: g, CurveTTFT: f, TGap: tg}
	x.TPOT = math.Max(x.TPOT, prev.TPOT)
	x.TTFT = math.Max(x.TTFT, prev.TTFT)
	x.MeanTTFT = math.Max(x.MeanTTFT, prev.MeanTTFT)
	x.E2E = x.TTFT + math.Max(s.outP-1, 0)*x.TPOT
	x.Hold = x.MeanTTFT + math.Max(s.outMean-1, 0)*s.mTPOT*tg
	return x
}

// curvesOnlyAbove reports whether the predictions above the stored levels
// can be computed on demand and equal what refresh would have stored: the
// curve-only values TPOT = qTPOT*gap(n), TTFT = qTTFT*ttft(n) and
// MeanTTFT = mTTFT*ttft(n) never fall with n (non-negative slopes and
// factors; rounding is monotone too), so the running maximum refresh keeps
// is at level n the larger of the last stored level and level n's own
// value. Otherwise (never seen: a fit keeps the slopes >= 0) refresh
// stores every level as before.
func (c *Controller) curvesOnlyAbove(s spread) bool {
	return c.gap.xOf == nil && c.gap.b >= 0 && c.ttft.b >= 0 &&
		s.qTPOT >= 0 && s.qTTFT >= 0 && s.mTTFT >= 0 && s.stallPer >= 0
}

// predict returns the prediction at n (clamped to [1, MaxCap]). Levels
// above the table follow the fitted curves (see refresh); the curves'
// coefficients change only in refresh and in a shift, which Decide always
// follows with refresh, so the value is what refresh would have stored.
func (c *Controller) predict(n int) prediction {
	n = max(1, min(n, c.cfg.MaxCap))
	if n < len(c.tab.p) {
		return c.tab.p[n]
	}
	if len(c.tab.p) < 2 {
		return prediction{} // no table yet
	}
	s := c.tab.s
	g, f := c.gap.at(float64(n)), c.ttft.at(float64(n))
	return s.predictionAt(n, g, f, s.qTTFT*f, s.mTTFT*f, c.tab.p[len(c.tab.p)-1])
}

// attainment returns, for n = 0..len-1, the predicted share of requests
// with targets t that would meet all of them at running count n (a zero
// target is no bound and always met):
//
//	A(n) = A_ttft(n) * A_tpot(n) * [E2E_P(n) <= T_e2e]
//	A_ttft(n) = sum_i w_i s(T_ttft - y_i - ttft(n) + ttft(n_i)) / sum_i w_i
//	A_tpot(n) = mean_j s(T_tpot - r_j gap(n))
//
// with the engine TTFT samples y_i weighted as in localQuantile, the TPOT
// ratios r_j of finished requests, and s a logistic step 0.5 % of the target
// wide, so that attainment moves smoothly as samples come and go. Where
// requests finished under a cap level, their measured attainment takes over.
// The result falls with n outward from the cap only (not from level 1:
// samples at a low level can come from a transient, a request that waited
// behind many prefills and got its first token after they ended). Levels
// far above the cap (beyond 2 cap + 16), where no single step can reach,
// are 0, and so is every level past the end of the slice, which reaches
// one level beyond the cap, MinCap and the last level computed, not MaxCap
// (with a cap of 10^7 one /status allocated 76 MiB); read it with attAt
// where an index may lie beyond. Results are cached until the next refresh
// or change of the cap.
func (c *Controller) attainment(t slo.Targets) []float64 {
	if c.tab.attCap != c.cap { // anchored at the cap (below): stale
		c.tab.att, c.tab.attCap = map[slo.Targets][]float64{}, c.cap
	}
	if a, ok := c.tab.att[t]; ok {
		return a
	}
	maxN := c.cfg.MaxCap
	top := min(maxN, 2*c.cap+16, c.levelsSeen()+16)
	a := make([]float64, max(top, c.cap, c.cfg.MinCap)+2)
	tt, tp, te := t.TTFT.Seconds(), t.TPOT.Seconds(), t.E2E.Seconds()
	step := func(u, width float64) float64 { return 1 / (1 + math.Exp(-u/width)) }
	for n := 1; n <= top; n++ {
		x := c.predict(n)
		at := 1.0
		if tt > 0 {
			at = step(tt-x.TTFT, 0.005*tt) // before any sample: the prediction
			if len(c.tab.engineTTFT) > 0 {
				sw, sa := 0.0, 0.0
				for _, smp := range c.tab.engineTTFT {
					w := math.Exp(-float64(c.tab.at.Sub(smp.t))/float64(c.cfg.Memory) - math.Abs(float64(n-smp.n)))
					y := smp.y + x.CurveTTFT - c.ttft.at(float64(smp.n))
					sw += w
					sa += w * step(tt-y, 0.005*tt)
				}
				if sw > 0 {
					at = sa / sw
				}
			}
		}
		ap := 1.0
		if tp > 0 {
			if len(c.tab.tp) >= 3 {
				sa := 0.0
				for _, r := range c.tab.tp {
					sa += step(tp-r*x.TGap, 0.005*tp)
				}
				ap = sa / float64(len(c.tab.tp))
			} else {
				ap = step(tp-x.TPOT, 0.005*tp)
			}
		}
		ae := 1.0
		if te > 0 && x.E2E > te {
			ae = 0
		}
		a[n] = at * ap * ae
		if math.IsNaN(a[n]) {
			a[n] = 0 // unreachable: refresh keeps non-finite models out
		}
	}
	// Feedback: where the cap has held a level long enough for requests
	// to finish there, the share that met the targets as the client felt
	// them (queue wait included) takes over from the prediction,
	// w = min(1, finished / measuredFull). It carries what the model
	// leaves out or gets wrong (how often prefills collide at this cap,
	// the queue, a transient in the samples near n).
	for n, d := range c.measured[t] {
		if n < 1 || n > top {
			continue
		}
		d.decay(c.tab.at, c.cfg.Memory)
		if d.w >= measuredMin {
			w := math.Min(1, d.w/measuredFull)
			a[n] = w*d.sum/d.w + (1-w)*a[n]
		}
	}
	// Fewer requests running never make latency worse: outward from the
	// cap, where the model has the most samples, a level above is at most
	// as good as the one below it and a level below at least as good as the
	// one above. Without this, a level above the cap that drew a lucky
	// handful of samples near it looked better than the cap and drew raises
	// that missed (A(5) = 0.06, A(6) = 0.79 after scenario 4's prompts
	// doubled), and a level below that drew samples of a transient looked
	// worse than the cap.
	cp := max(1, min(c.cap, top))
	for n := cp + 1; n <= top; n++ {
		a[n] = math.Min(a[n], a[n-1])
	}
	for n := cp - 1; n >= 1; n-- {
		a[n] = math.Max(a[n], a[n+1])
	}
	c.tab.att[t] = a
	return a
}

// attAt is a[n], or 0 beyond the slice (see attainment).
func attAt(a []float64, n int) float64 {
	if n < 0 || n >= len(a) {
		return 0
	}
	return a[n]
}

// levelsSeen is the highest running count with a sample of either latency:
// nothing is asked of levels far above it (a fixed cap of 100000 would
// otherwise have its attainment computed at every level for /status).
func (c *Controller) levelsSeen() int {
	return max(len(c.gap.levels), len(c.ttft.levels), 2) - 1
}
