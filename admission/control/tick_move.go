package control

import (
	"fmt"
	"time"
)

// Move: the one move of the cap a decision makes (see tick.go).

// holdReason says why the cap holds although it misses P, or "" when it
// does not: no level is predicted to meet P and the cap promises the most
// goodput (targets at the engine's edge).
func (c *Controller) holdReason(pl plan) string {
	if pl.aCap >= c.cfg.Percentile-missTolerance || !pl.over || pl.target != c.cap {
		return ""
	}
	return fmt.Sprintf("hold %d: predicted attainment %.2f < %.2f, and no level meets P%.0f for more goodput: goodput is highest here (%.3f req/s)",
		c.cap, pl.aCap, c.cfg.Percentile, 100*c.cfg.Percentile, pl.gCap)
}

// raiseTo is the level a raise towards the plan's target moves the cap
// to, from Decide or from a request that would queue (raiseOnDemand): by
// a quarter of the cap at most (at least one), within the engine's limit
// and usefulCap, below the first level barred by a recent failure (a
// level barred for missing P may still be chosen for goodput), and by one
// from the plateau's left edge (the measured goodput that allowed the
// raise is one level's).
func (c *Controller) raiseTo(now time.Time, pl plan) int {
	old := c.cap
	n := max(old, min(pl.target, old+max(1, int(float64(old)*raiseStep)), c.engineBound(now), c.usefulCap()))
	for k := old + 2; k <= n && !pl.over; k++ {
		if !c.mayRaiseTo(now, k) {
			n = k - 1
			break
		}
	}
	if c.walked || c.tenantBounded() {
		n = min(n, old+1)
	}
	return n
}

func (c *Controller) raiseReason(old int, pl plan, how string) string {
	p := c.predict(c.cap)
	why := "meets the targets"
	if pl.over {
		why = fmt.Sprintf("below P%.0f but more goodput", 100*c.cfg.Percentile)
	}
	return fmt.Sprintf("raise %d->%d%s: at %d predicted attainment %.2f (P%.0f TPOT %s, engine TTFT %s), %s: goodput %.3f req/s at %d vs %.3f at %d",
		old, c.cap, how, c.cap, c.attainment(c.op)[c.cap], 100*c.cfg.Percentile,
		dur(p.TPOT), dur(p.TTFT), why, pl.gT, pl.target, pl.gCap, old)
}

// failure is the record of the cap having been lowered from a level.
type failure struct {
	at    time.Time
	count int
}

// mayRaiseTo reports whether level n is not barred by a recent failure
// there: a level measured to miss is not retried at once on the strength
// of an extrapolation, which would make the cap flap between n-1 and n.
func (c *Controller) mayRaiseTo(now time.Time, n int) bool {
	f, ok := c.failed[n]
	if !ok {
		return true
	}
	b := failBackoff << min(f.count-1, 4)
	if now.Sub(f.at) >= min(b, maxFailBackoff) {
		if now.Sub(f.at) > 2*maxFailBackoff {
			delete(c.failed, n)
		}
		return true
	}
	return false
}

// shouldProbe reports whether the level above the cap is unknown: the
// model rests on one level (no slope can be fitted) and the level above has
// few recent samples, while the extrapolation forbids it. Probing it is the only
// way to learn; the cap comes back down if the new level misses.
//
// With the token model's decode step fitted (tokenGap), the level above is
// not unknown: its step follows from the KV tokens one more request
// holds, learnt from every step at every level, not extrapolated in
// proportion from one. A probe then measures what the model already
// predicts, at the price of a minute at a level it predicts worse
// (scenario 8, seed 1: cap 4 at minute 7, where 3 is the knee, 0.984 of
// the oracle against 1.013 without it).
//
// A level probed from before waits probeBackoff after that probe, doubling
// with each one up to maxProbeBackoff (cleared by a shift): when the cap is
// back at the same level, the probe found nothing better above it, and
// every probe costs (it admits a prefill next to the running streams).
func (c *Controller) shouldProbe(now time.Time) bool {
	if c.cap >= c.cfg.MaxCap || c.gap.points >= 2 || c.tokenGap(now) != nil {
		return false
	}
	if f, ok := c.probes[c.cap]; ok && now.Sub(f.at) < min(probeBackoff<<min(f.count-1, 4), maxProbeBackoff) {
		return false
	}
	gw, _ := c.gap.level(c.cap + 1)
	return gw < 20
}

// usefulCap is the highest cap a raise may reach: with the token budget
// holding requests back, the count cap binds only where the engine runs
// near it, so a raise goes at most a quarter (at least one) above the most
// that ran at once in the last minute; without it, MaxCap.
func (c *Controller) usefulCap() int {
	if !c.tokenBudget() {
		return c.cfg.MaxCap
	}
	return max(c.peakRun+max(1, c.peakRun/4), c.cfg.MinCap)
}

// boundByBudget brings the cap down to usefulCap when the token budget has
// held the engine below it for unusedWindow while most decisions saw demand
// (unusedPressure: not light load, not the off phase of bursts): the count no longer binds there, and the choice of
// the cap for goodput (where the targets are met and the engine serves the
// most) is made again from where the engine runs. Without it, a cap raised
// before prompts grew stayed where the budget left it unused (scenario 4's
// second half: 13 against the oracle's 5, at 0.90 of its goodput).
func (c *Controller) boundByBudget(now time.Time, load Load) bool {
	u := c.usefulCap()
	if !c.tokenBudget() || c.cfg.Fixed || c.cap <= u {
		c.unusedSince = time.Time{}
		return false
	}
	if c.unusedSince.IsZero() {
		c.unusedSince = now
	}
	if now.Sub(c.unusedSince) < unusedWindow || now.Sub(c.changedAt) < peakMemory ||
		c.pressure.mean() < unusedPressure || (load.PeakQueued == 0 && load.Rejected == 0) {
		return false
	}
	c.unusedSince = time.Time{}
	old := c.cap
	c.cap = u
	c.reason = fmt.Sprintf("lower %d->%d: the token budget held the engine at %d running at most for 30s", old, c.cap, c.peakRun)
	return true
}

// boundByEngine lowers the cap to the engine's own limit when it is above
// it, and reports whether it did (the reason is set).
func (c *Controller) boundByEngine(now time.Time) bool {
	n, ok := c.limit.at(now)
	if !ok || c.cap <= max(n, c.cfg.MinCap) || c.cfg.Fixed {
		return false
	}
	old := c.cap
	c.cap = max(n, c.cfg.MinCap)
	// Once the limit is forgotten, the level above it is tried again only
	// after the failure backoff, as a level lowered from.
	f := c.failed[c.cap+1]
	c.failed[c.cap+1] = failure{at: now, count: f.count + 1}
	c.reason = fmt.Sprintf("lower %d->%d: the engine runs %d requests at most and queues the rest itself (its metrics)", old, c.cap, n)
	return true
}

func dur(sec float64) time.Duration {
	return seconds(sec).Round(100 * time.Microsecond)
}
