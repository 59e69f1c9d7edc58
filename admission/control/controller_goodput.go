package control

import (
	"math"
	"time"
)

// The goodput of each level as the plan weighs it: the model's prediction
// (Little's law times the predicted attainment of each class), blended
// with the goodput measured while the cap held the level under demand
// (noteDwell); goodputBest picks among levels by it.

// dwellAtCap reports whether the cap has held long enough for its measured
// goodput to be part of its prediction (see goodput), so that a move down
// for goodput rests on a measurement and not on an extrapolation.
func (c *Controller) dwellAtCap() bool {
	return c.dwell.get(c.cap).w >= minDwell
}

// goodput is the predicted goodput at n:
//
//	G(n) = n / (Hold(n) + idle) * sum_k share_k * A_k(n)
//
// Little's law times the predicted share meeting each class's targets,
// where idle is the measured time a freed slot waits for its next request
// while there is demand (clients return at whole-second Retry-Afters): a
// small cap loses a larger share of its time to it.
func (c *Controller) goodput(classes []class, n int) float64 {
	h := c.predict(n).Hold
	if h <= 0 {
		return 0
	}
	h += c.idle.mean()
	att := 0.0
	for _, k := range classes {
		if a := c.attainment(k.t); n < len(a) {
			att += k.share * a[n]
		}
	}
	if att < minAttainment {
		return 0 // not an operating point, whatever was measured before
	}
	g := float64(n) / h * att
	// Feedback: where the cap has held long enough, the goodput measured
	// there (good completions per second of holding) takes over from the
	// prediction, w = min(1, dwell / 60s); it carries what the model
	// leaves out (slots idle between clients, queue waits, misses).
	if d := c.dwell.get(n); d.w >= minDwell {
		w := math.Min(1, d.w/fullDwell)
		g = w*d.sum/d.w + (1-w)*g
	}
	return g
}

// noteDwell credits the time since the last decision to the cap held, if
// there was demand (queued, refused, or running at the cap), and
// counts good completions to the cap that saw them end. Both decay with
// the model's memory: a level measured a while ago still informs the
// choice, but less.
func (c *Controller) noteDwell(now time.Time, load Load) {
	if !c.lastDwell.IsZero() {
		if dt := now.Sub(c.lastDwell).Seconds(); dt > 0 && dt < 10 {
			tau := c.cfg.Memory
			for n, d := range c.dwell {
				if d.decay(now, tau); d.w < 1e-3 {
					delete(c.dwell, n)
				}
			}
			// Only time with demand measures what the level can serve: a
			// level idling under light load would read as a poor one.
			if load.PeakQueued > 0 || load.Rejected > 0 || load.PeakRunning >= c.cap {
				l := c.dwell.at(c.cap)
				l.decay(now, tau)
				l.w += dt
				l.sum += float64(c.goodSince)
			}
		}
	}
	c.lastDwell, c.goodSince = now, 0
}

// goodputBest returns, among levels lo..hi, the largest whose predicted
// goodput is within goodputSlack of the highest, and that highest. Of
// levels with equal goodput the larger one is chosen: a slot left idle
// between a release and the next admission costs a small cap a larger
// share of its throughput, and where the engine is saturated more running
// requests do not cost goodput.
func (c *Controller) goodputBest(classes []class, lo, hi int) (int, float64) {
	lo, hi = max(lo, c.cfg.MinCap), min(hi, c.cfg.MaxCap)
	if hi < lo {
		return lo, c.goodput(classes, lo)
	}
	g := make([]float64, hi-lo+1)
	gMax := 0.0
	for n := lo; n <= hi; n++ {
		g[n-lo] = c.goodput(classes, n)
		gMax = max(gMax, g[n-lo])
	}
	for n := hi; n >= lo; n-- {
		if g[n-lo] >= (1-goodputSlack)*gMax {
			return n, gMax
		}
	}
	return lo, gMax
}
