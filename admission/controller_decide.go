package admission

import (
	"fmt"
	"github.com/kneecap/kneecap/slo"
	"math"
	"sort"
	"time"
)

// prediction is what the model predicts at one running count n.
type prediction struct {
	// TPOT and TTFT are the predicted P-quantiles of TPOT and engine TTFT:
	//	TPOT_P(n) = Q_P(tpot / gap(n_i)) * gap(n)
	//	TTFT_P(n) = Q_P(ttft / ttft(n_i)) * ttft(n)
	TPOT, TTFT float64
	// E2E is TTFT_P + (Q_P(output tokens) - 1) * TPOT_P.
	E2E float64
	// Hold is the mean slot hold, TTFT_mean + (mean output - 1) * TPOT_mean;
	// by Little's law the engine completes n/Hold requests per second.
	Hold float64
}

// spread holds the measured spread factors for one decision.
type spread struct {
	qTPOT, qTTFT, mTPOT, mTTFT float64
	outP, outMean              float64
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
	return s
}

func (c *Controller) predict(n int, s spread) prediction {
	g, f := c.gap.at(float64(n)), c.ttft.at(float64(n))
	p := prediction{TPOT: s.qTPOT * g, TTFT: s.qTTFT * f}
	p.E2E = p.TTFT + math.Max(s.outP-1, 0)*p.TPOT
	p.Hold = s.mTTFT*f + math.Max(s.outMean-1, 0)*s.mTPOT*g
	return p
}

// meets reports whether the prediction meets targets t stretched by scale.
func (p prediction) meets(t slo.Targets, scale float64) bool {
	ok := p.TPOT <= scale*t.TPOT.Seconds() && p.TTFT <= scale*t.TTFT.Seconds()
	if t.E2E > 0 {
		ok = ok && p.E2E <= scale*t.E2E.Seconds()
	}
	return ok
}

// largestMeeting is the largest n in [MinCap, MaxCap] whose prediction
// meets t at scale (predictions grow with n, so a binary search), or MinCap.
func (c *Controller) largestMeeting(t slo.Targets, scale float64, s spread) int {
	lo, hi := c.cfg.MinCap, c.cfg.MaxCap
	if !c.predict(lo, s).meets(t, scale) {
		return lo
	}
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if c.predict(mid, s).meets(t, scale) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

type class struct {
	t     slo.Targets
	share float64
}

func (c *Controller) classShares(now time.Time) []class {
	var out []class
	total := 0.0
	for t, d := range c.classes {
		d.decay(now, c.cfg.Memory)
		if d.w > 1e-3 {
			out = append(out, class{t, d.w})
			total += d.w
		}
	}
	if total == 0 {
		return []class{{c.targetsOf(slo.Targets{}), 1}}
	}
	for i := range out {
		out[i].share /= total
	}
	sort.Slice(out, func(i, j int) bool { return out[i].share > out[j].share })
	return out
}

// best chooses the cap at one scale of the targets. For each class of
// targets k, n_k is the largest n that meets k; among the n_k it picks the
// one with the highest predicted goodput
//
//	goodput(n) = n / Hold(n) * sum of share_k over classes with n <= n_k
//
// With one class this is the largest n whose P-quantiles meet the targets.
func (c *Controller) best(classes []class, scale float64, s spread) int {
	if len(classes) == 1 {
		return c.largestMeeting(classes[0].t, scale, s)
	}
	limits := make([]int, len(classes))
	for i, k := range classes {
		limits[i] = c.largestMeeting(k.t, scale, s)
	}
	bestN, bestG := c.cfg.MinCap, -1.0
	for _, n := range limits {
		share := 0.0
		for i, k := range classes {
			if n <= limits[i] {
				share += k.share
			}
		}
		h := c.predict(n, s).Hold
		if h <= 0 {
			continue
		}
		g := float64(n) / h * share
		if g > bestG*(1+1e-9) || (math.Abs(g-bestG) <= bestG*1e-9 && n < bestN) {
			bestN, bestG = n, g
		}
	}
	return bestN
}

// Decide refits the model and moves the cap:
//   - lower, by at most half the cap, when the cap misses the targets and
//     the engine ran above the largest level that meets them, towards that
//     level;
//   - raise, by at most a quarter of the cap and at most every 2s, when a
//     larger level meets the targets shrunk by the hysteresis (5 %: the
//     cap holds still while its P-quantiles lie within [0.95, 1] of the
//     targets) and there is
//     demand: requests queued or refused, or the engine within
//     max(1, cap/8) of the cap;
//   - probe one above the cap, at most once per Memory, when there is
//     demand, the cap meets the shrunk targets, and the level above has no
//     recent samples
//     (the model cannot know it: with one level measured, it extrapolates
//     proportionally, which is conservative);
//   - otherwise hold.
func (c *Controller) Decide(now time.Time, load Load) Decision {
	c.lastDecide = now
	c.gap.fit(now)
	c.ttft.fit(now)
	if c.cfg.Fixed {
		return Decision{Cap: c.cap, Reason: c.reason}
	}
	if !c.gap.ok || !c.ttft.ok {
		c.reason = "learning: no measurements yet"
		return Decision{Cap: c.cap, Reason: c.reason}
	}
	s := c.spreadAt(now)
	classes := c.classShares(now)
	up := c.best(classes, 1-hysteresis, s)
	down := c.best(classes, 1, s)
	demand := load.PeakQueued > 0 || load.Rejected > 0 ||
		load.PeakRunning >= c.cap-max(1, c.cap/8)
	old := c.cap
	switch {
	case down < c.cap && c.cap > c.cfg.MinCap && load.PeakRunning > down:
		c.cap = max(down, c.cap-max(1, int(float64(c.cap)*lowerStep)), c.cfg.MinCap)
		p := c.predict(old, s)
		c.reason = fmt.Sprintf("lower %d->%d: at %d predicted P%.0f TPOT %s, engine TTFT %s; target level %d",
			old, c.cap, old, 100*c.cfg.Percentile, dur(p.TPOT), dur(p.TTFT), down)
	case up > c.cap && demand && now.Sub(c.lastRaise) >= raiseEvery:
		c.cap = min(up, c.cap+max(1, int(float64(c.cap)*raiseStep)), c.cfg.MaxCap)
		p := c.predict(c.cap, s)
		c.reason = fmt.Sprintf("raise %d->%d: at %d predicted P%.0f TPOT %s, engine TTFT %s; target level %d",
			old, c.cap, c.cap, 100*c.cfg.Percentile, dur(p.TPOT), dur(p.TTFT), up)
		c.lastRaise = now
	case demand && up >= c.cap && c.shouldProbe() && now.Sub(c.lastProbe) >= c.cfg.Memory:
		c.cap++
		c.reason = fmt.Sprintf("probe %d->%d: no recent measurements above %d and demand", old, c.cap, old)
		c.lastRaise, c.lastProbe = now, now
	default:
		return Decision{Cap: c.cap, Reason: c.reason}
	}
	c.changedAt = now
	return Decision{Cap: c.cap, Changed: true, Reason: c.reason}
}

// shouldProbe reports whether the level above the cap is unknown: the
// model rests on one level (no slope can be fitted) and the level above has
// few recent samples, while the extrapolation forbids it. Probing it is the only
// way to learn; the cap comes back down if the new level misses.
func (c *Controller) shouldProbe() bool {
	if c.cap >= c.cfg.MaxCap || c.gap.points >= 2 {
		return false
	}
	gw, _ := c.gap.level(c.cap + 1)
	return gw < 20
}

func dur(sec float64) time.Duration {
	return time.Duration(sec * float64(time.Second)).Round(100 * time.Microsecond)
}
