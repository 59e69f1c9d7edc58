package control

import (
	"fmt"
	"math"
	"time"
)

// Decide refits the model and moves the cap towards the plan's target:
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
//     measured (mayLeaveLeft);
//   - otherwise hold.
//
// A level the cap was lowered from for missing P is barred from raises for
// 30s, doubling with each further failure there up to 5 minutes (cleared
// by a shift). Every change waits settleTime (2s) after the previous one,
// so that the level it moved to is measured before the next.
func (c *Controller) Decide(now time.Time, load Load) Decision {
	load = load.clean()
	c.lastDecide = now
	c.noteDwell(now, load)
	c.detectShift(now)
	c.refresh(now)
	if c.cfg.Fixed {
		c.noteLoad(now, load) // light load is judged with a fixed cap too (admitPaced)
		return Decision{Cap: c.cap, Reason: c.reason}
	}
	if c.boundByEngine(now) || c.boundByBudget(now, load) {
		c.endRamp(now, c.reason)
		c.noteLoad(now, load)
		c.changedAt = now
		return Decision{Cap: c.cap, Changed: true, Reason: c.reason}
	}
	if c.startFromEngine(now) {
		c.changedAt = now
		return Decision{Cap: c.cap, Changed: true, Reason: c.reason}
	}
	if !c.tab.ok {
		c.reason = "learning: no measurements yet"
		if c.tab.bad {
			c.reason = "holding: the model is not finite"
		}
		return Decision{Cap: c.cap, Reason: c.reason}
	}
	if load.PeakQueued > 0 || load.Rejected > 0 {
		// Slots free while requests were turned away or waited: each free
		// slot wastes idle = Hold * free/running of every cycle.
		h := c.predict(c.cap).Hold
		free := float64(max(c.cap-load.Running, 0))
		c.idle.add(now, idleMemory, math.Min(h*free/math.Max(float64(load.Running), 1), h)) // NaN: dropped
	}
	pl := c.plan(now)
	// The plateau among the levels meeting P, for /status and the metrics:
	// once a decision, not in every plan (the Gate plans for a request
	// that would queue). None when the target misses P for goodput.
	c.plat = plateau{}
	if !pl.over {
		c.plat = c.plateauOf(pl.classes, c.cfg.MinCap, pl.limit)
	}
	c.plat.left, c.plat.fairLeft = c.noteLeft(now, pl.classes, c.plat)
	demand := c.noteLoad(now, load)
	c.noteShort(now, load)
	old := c.cap
	settled := now.Sub(c.changedAt) >= settleTime
	walk := false // a step towards the plateau's left edge, or one level up from it
	missing := pl.aCap < c.cfg.Percentile-missTolerance && !(pl.over && pl.target == c.cap) && c.evidenceAtCap()
	c.noteRamp(now, load, c.cfg.Interval)
	double := 0 // the ramp's doubling (controller_ramp.go)
	if settled && demand && !missing {
		double = c.rampDouble(now, load, pl.classes)
	}
	switch {
	case !settled:
		return Decision{Cap: c.cap, Reason: c.reason}
	case double > c.cap:
		c.cap, c.ramp.toward = double, double
		p := c.predict(c.cap)
		how := fmt.Sprintf("doubling: within %.0f %% of the targets", 100*rampMargin)
		if c.ramp.narrow {
			how = "by a quarter: within the targets, not their margin"
		}
		c.reason = fmt.Sprintf("ramp %d->%d: %d ran at once; at %d predicted P%.0f TPOT %s, engine TTFT %s; %s",
			old, c.cap, load.PeakRunning, c.cap, 100*c.cfg.Percentile, dur(p.TPOT), dur(p.TTFT), how)
	case pl.target < c.cap && missing && load.PeakRunning > pl.target && !c.lightLoad(float64(pl.target)) && pl.gT >= (1-goodputSlack)*pl.gCap:
		step := 1
		if pl.aCap < c.cfg.Percentile-bigViolation {
			step = max(1, int(float64(c.cap)*lowerStep))
		}
		c.cap = max(pl.target, c.cap-step, c.cfg.MinCap)
		f := c.failed[old]
		c.failed[old] = failure{at: now, count: f.count + 1}
		p := c.predict(old)
		c.reason = fmt.Sprintf("lower %d->%d: at %d predicted attainment %.2f < %.2f (P%.0f TPOT %s, engine TTFT %s); target level %d",
			old, c.cap, old, pl.aCap, c.cfg.Percentile, 100*c.cfg.Percentile, dur(p.TPOT), dur(p.TTFT), pl.target)
	case pl.target < c.cap && pl.gCap < (1-moveGain)*pl.gT && demand && c.dwellAtCap():
		c.cap--
		c.reason = fmt.Sprintf("lower %d->%d for goodput: predicted %.3f req/s at %d, %.3f at %d",
			old, c.cap, pl.gCap, old, pl.gT, pl.target)
	case pl.target > c.cap && pl.gT > (1+goodputSlack)*pl.gCap && demand && (pl.over || c.mayRaiseTo(now, c.cap+1)) && c.mayLeaveLeft(pl):
		c.cap = c.raiseTo(now, pl)
		c.reason = c.raiseReason(old, pl, "")
	case demand && pl.up >= c.cap && c.cap < c.engineBound(now) && c.shouldProbe(now):
		f := c.probes[old]
		c.probes[old] = failure{at: now, count: f.count + 1}
		c.cap++
		c.reason = fmt.Sprintf("probe %d->%d: no recent measurements above %d and demand", old, c.cap, old)
	case demand && c.mayWalkLeft(now, load):
		c.cap--
		walk = true
		c.reason = c.walkReason(old, load)
	case c.mayWalkBack(now, load):
		c.cap++
		walk = true
		c.reason = fmt.Sprintf("raise %d->%d back towards the plateau's left edge %d: no tenant is held below its share or at it by its own demand", old, c.cap, c.plat.left)
	default:
		if r := c.holdReason(pl); r != "" {
			c.reason = r
		}
		return Decision{Cap: c.cap, Reason: c.reason}
	}
	if c.cap == old { // a raise the engine's own limit took back
		return Decision{Cap: c.cap, Reason: c.reason}
	}
	if c.cap < old {
		c.endRamp(now, c.reason)
	}
	c.walked = walk
	c.fairWalk = walk && c.cap < c.plat.left
	c.changedAt = now
	return Decision{Cap: c.cap, Changed: true, Reason: c.reason}
}
