package control

import (
	"fmt"
	"time"
)

// What the controller remembers between decisions besides the model: the
// levels the cap was lowered from (barred from raises for a while), the
// levels probed from, and how often there was demand.

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

// noteLoad records the running count and whether there was demand
// (requests queued or refused, or the engine within max(1, cap/8) of the
// cap) for lightLoad, and returns the latter.
func (c *Controller) noteLoad(now time.Time, load Load) bool {
	demand := load.PeakQueued > 0 || load.Rejected > 0 ||
		load.PeakRunning >= c.cap-max(1, c.cap/8)
	if load.PeakRunning >= c.peakRun || now.Sub(c.peakRunAt) >= peakMemory {
		c.peakRun, c.peakRunAt = load.PeakRunning, now
	}
	c.busy.add(now, c.cfg.Memory, float64(load.Running))
	c.pressure.add(now, c.cfg.Memory, indicator(demand))
	return demand
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

// lightLoad reports whether the engine runs at most n requests on average
// and met demand (requests queued or refused, or the engine at the cap) in
// at most a tenth of the last minute's decisions: the load is light, and
// requests that come at once are a rare burst, not the on phase of a
// recurring overload.
func (c *Controller) lightLoad(n float64) bool {
	return c.busy.w > 0 && c.busy.mean() <= n && c.pressure.mean() <= lightPressure
}

// indicator is 1 for true and 0 for false.
func indicator(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func dur(sec float64) time.Duration {
	return seconds(sec).Round(100 * time.Microsecond)
}
