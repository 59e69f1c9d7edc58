package control

import (
	"fmt"
	"time"
)

// Move: the one move of the cap a decision makes (see tick.go). Each move
// is a function that returns the new cap and the reason, and changes
// nothing the apply stage sets (the cap, the reason, failures, probes,
// the walk, changedAt). First the bounds, which come before any plan
// (overrule); then move, which chooses among the planned moves: the
// ramp's (controller_ramp.go), lower, raise, probe, and the walk to the
// plateau's left edge (its conditions in tick_walk.go); then what the
// moves ask of the levels (raiseTo, mayRaiseTo, shouldProbe).

// boundByEngine lowers the cap to the engine's own limit when it is above
// it, and reports whether it does. Once the limit is forgotten, the level
// above it is tried again only after the failure backoff, as a level
// lowered from (bar).
func (c *Controller) boundByEngine(now time.Time) (move, bool) {
	n, ok := c.limit.at(now)
	if !ok || c.cap <= max(n, c.cfg.MinCap) || c.cfg.Fixed {
		return move{}, false
	}
	to := max(n, c.cfg.MinCap)
	return move{to: to, bar: to + 1, bound: true,
		reason: fmt.Sprintf("lower %d->%d: the engine runs %d requests at most and queues the rest itself (its metrics)", c.cap, to, n)}, true
}

// boundByBudget brings the cap down to usefulCap, and reports whether it
// does, when the token budget has held the engine below it for
// unusedWindow while most decisions saw demand (unusedPressure: not light
// load, not the off phase of bursts): the count no longer binds there, and
// the choice of the cap for goodput (where the targets are met and the
// engine serves the most) is made again from where the engine runs.
// Without it, a cap raised before prompts grew stayed where the budget
// left it unused (scenario 4's second half: 13 against the oracle's 5, at
// 0.90 of its goodput).
func (c *Controller) boundByBudget(now time.Time, load Load) (move, bool) {
	u := c.usefulCap()
	if !c.tokenBudget() || c.cfg.Fixed || c.cap <= u {
		c.unusedSince = time.Time{}
		return move{}, false
	}
	if c.unusedSince.IsZero() {
		c.unusedSince = now
	}
	if now.Sub(c.unusedSince) < unusedWindow || now.Sub(c.changedAt) < peakMemory ||
		c.pressure.mean() < unusedPressure || (load.PeakQueued == 0 && load.Rejected == 0) {
		return move{}, false
	}
	c.unusedSince = time.Time{}
	return move{to: u, bound: true,
		reason: fmt.Sprintf("lower %d->%d: the token budget held the engine at %d running at most for 30s", c.cap, u, c.peakRun)}, true
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

// move chooses the one move of the decision, the first that applies:
//   - hold while the last change settles: every change waits settleTime
//     (2s) after the previous one, so that the level it moved to is
//     measured before the next;
//   - the ramp's doubling, or its narrowing step past its margin, while it
//     is on, with demand and the cap not missing P (rampDouble,
//     controller_ramp.go);
//   - lower, by one (by up to half the cap when its predicted attainment
//     is more than 0.2 below P), when the target is below the cap and the
//     cap either misses P by more than 0.03 with evidence at the cap (see
//     evidenceAtCap; and the engine ran above the target since the last
//     decision, and the load is not light (see lightLoad: there a lower
//     cap would only queue the rare burst past its TTFT target), and the
//     target does not cost more than 3 % of the goodput (goodputSlack:
//     where it would, goodput wins; a level missing P is chosen for
//     goodput only when it promises 5 % more, goodputOverride, so that in
//     between the cap holds: with 5 % both ways, targets at the engine's
//     edge swung it between the level meeting P and the one serving more,
//     issue 14) or, with demand and 20 s held (dwellAtCap),
//     predicts less goodput than the target by more than 10 % (moveGain);
//   - raise, by at most a quarter of the cap, towards a target above it
//     that predicts more goodput by more than 3 %, when there is demand:
//     requests queued or refused, or the engine within max(1, cap/8) of
//     the cap. Levels above the cap count as meeting P only from P + 0.04
//     (hysteresis);
//   - probe one above the cap when there is demand, the model rests on
//     one level and the level above has no recent samples (the model
//     cannot know it: from one level it extrapolates proportionally, which
//     predicts no gain in throughput), at most once per probeBackoff from
//     a level, doubling; not with the token model's decode step, which
//     predicts the level above from the KV cache (see shouldProbe);
//   - lower by one towards the plateau's left edge under sustained demand
//     once the model has relearned the engine (see mayWalkLeft); from
//     there, raise only one level at a time for moveGain with the level
//     measured (mayLeaveLeft); back up by one towards it once no tenant is
//     held short (mayWalkBack, tick_walk.go);
//   - otherwise hold.
//
// A level the cap was lowered from for missing P is barred from raises for
// 30s, doubling with each further failure there up to 5 minutes (cleared
// by a shift).
func (c *Controller) move(t *tick, pl plan) move {
	if !t.settled {
		return c.hold("")
	}
	double := 0 // the ramp's doubling (controller_ramp.go)
	if t.demand && !t.missing {
		double = c.rampDouble(t.now, t.load, pl.classes)
	}
	now, load, demand := t.now, t.load, t.demand
	switch {
	case double > c.cap:
		return c.moveDouble(load, double)
	case pl.target < c.cap && t.missing && load.PeakRunning > pl.target && !c.lightLoad(float64(pl.target)) && pl.gT >= (1-goodputSlack)*pl.gCap:
		return c.moveLower(pl)
	case pl.target < c.cap && pl.gCap < (1-moveGain)*pl.gT && demand && c.dwellAtCap():
		return c.moveLowerForGoodput(pl)
	case pl.target > c.cap && pl.gT > (1+goodputSlack)*pl.gCap && demand && (pl.over || c.mayRaiseTo(now, c.cap+1)) && c.mayLeaveLeft(pl):
		return c.moveRaise(now, pl)
	case demand && pl.up >= c.cap && c.cap < c.engineBound(now) && c.shouldProbe(now):
		return c.moveProbe()
	case demand && c.mayWalkLeft(now, load):
		return c.moveWalkLeft(load)
	case c.mayWalkBack(now, load):
		return c.moveWalkBack()
	}
	return c.hold(c.holdReason(pl))
}

// hold keeps the cap; why, if not "", replaces the reason.
func (c *Controller) hold(why string) move {
	return move{to: c.cap, reason: why}
}

// moveDouble is the ramp's raise to n: a doubling, or a narrowing step past
// its margin (ramp.narrow).
func (c *Controller) moveDouble(load Load, n int) move {
	p := c.predict(n)
	how := fmt.Sprintf("doubling: within %.0f %% of the targets", 100*rampMargin)
	if c.ramp.narrow {
		how = "narrowing: within the targets, not their margin"
	}
	return move{to: n, toward: true,
		reason: fmt.Sprintf("ramp %d->%d: %d ran at once; at %d predicted P%.0f TPOT %s, engine TTFT %s; %s",
			c.cap, n, load.PeakRunning, n, 100*c.cfg.Percentile, dur(p.TPOT), dur(p.TTFT), how)}
}

// moveLower lowers the cap towards the target for missing P: by the
// share of the cap its predicted attainment falls short of P (at least
// one), or by up to lowerStep of the cap when it is more than bigViolation
// short. The level left is barred from raises (fail). A step of one level
// is a share of the cap only a small engine's knee makes large: from 222
// on the H100 8B engine, at 0.83 against P90, one level every 10-25 s left
// the cap above the level planned (184) for minutes; by the shortfall,
// 15 levels.
func (c *Controller) moveLower(pl plan) move {
	old := c.cap
	step := max(1, int(float64(old)*(c.cfg.Percentile-pl.aCap)))
	if pl.aCap < c.cfg.Percentile-bigViolation {
		step = max(1, int(float64(old)*lowerStep))
	}
	to := max(pl.target, old-step, c.cfg.MinCap)
	p := c.predict(old)
	return move{to: to, fail: true,
		reason: fmt.Sprintf("lower %d->%d: at %d predicted attainment %.2f < %.2f (P%.0f TPOT %s, engine TTFT %s); target level %d",
			old, to, old, pl.aCap, c.cfg.Percentile, 100*c.cfg.Percentile, dur(p.TPOT), dur(p.TTFT), pl.target)}
}

// moveLowerForGoodput lowers the cap by one towards a target that
// predicts more goodput by more than moveGain.
func (c *Controller) moveLowerForGoodput(pl plan) move {
	return move{to: c.cap - 1,
		reason: fmt.Sprintf("lower %d->%d for goodput: predicted %.3f req/s at %d, %.3f at %d",
			c.cap, c.cap-1, pl.gCap, c.cap, pl.gT, pl.target)}
}

// moveRaise raises the cap towards the plan's target (raiseTo); its
// reason is said once the cap has moved (see move.raise).
func (c *Controller) moveRaise(now time.Time, pl plan) move {
	return move{to: c.raiseTo(now, pl), raise: &pl}
}

// moveProbe raises the cap by one to a level the model cannot know (see
// shouldProbe); the level left waits before it is probed from again.
func (c *Controller) moveProbe() move {
	return move{to: c.cap + 1, probe: true,
		reason: fmt.Sprintf("probe %d->%d: no recent measurements above %d and demand", c.cap, c.cap+1, c.cap)}
}

// moveWalkLeft lowers the cap by one towards the plateau's left edge (or
// its fair edge; see walkTo).
func (c *Controller) moveWalkLeft(load Load) move {
	return move{to: c.cap - 1, walk: true, reason: c.walkReason(c.cap, c.cap-1, load)}
}

// moveWalkBack raises the cap by one back towards the plateau's left edge
// from the fair edge (see mayWalkBack).
func (c *Controller) moveWalkBack() move {
	return move{to: c.cap + 1, walk: true,
		reason: fmt.Sprintf("raise %d->%d back towards the plateau's left edge %d: no tenant is held below its share or at it by its own demand", c.cap, c.cap+1, c.plat.left)}
}

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

// dur is a prediction in seconds as a reason quotes it.
func dur(sec float64) time.Duration {
	return seconds(sec).Round(100 * time.Microsecond)
}
