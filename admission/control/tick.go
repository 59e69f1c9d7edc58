package control

import (
	"math"
	"time"
)

// One decision of the controller (a tick) is a pipeline of five stages,
// each in its own file, in this order:
//
//  1. observe (tick_observe.go): what the interval since the previous
//     decision saw: the time the cap held under demand, the load and
//     whether there was demand, the slot time left idle, a tenant held
//     short, the ramp's accounting;
//  2. model (tick_model.go): a shift of either latency, the refit of the
//     curves and of the token model, the per-level table (model_table.go
//     reads it: predict, attainment);
//  3. plan (tick_plan.go): the target level and the goodput of each level,
//     the classes of targets, the plateau, whether the cap misses P;
//  4. move (tick_move.go, controller_ramp.go, tick_walk.go): exactly one
//     move of the cap, each a small function returning the new cap and
//     the reason: hold, the ramp's doubling or narrowing, lower, raise,
//     probe, the walk to the plateau's left edge and back;
//  5. apply (here): the cap, when it changed, what the move leaves to be
//     remembered (a failed or probed level, the walk, the ramp's end) and
//     the Decision.
//
// Before any plan come the moves no plan overrules (overrule): a fixed
// cap, the engine's own limit, a cap the token budget leaves unused, the
// start from the engine's running count, and nothing learnt yet.

// tick is what one decision carries from stage to stage.
type tick struct {
	now  time.Time
	load Load
	// demand: requests queued or refused, or the engine near the cap
	// (noteLoad); settled: settleTime since the last change; missing: the
	// cap's predicted attainment misses P, with evidence at the cap.
	demand, settled, missing bool
}

// move is one decision's move of the cap: the level it goes to (the cap
// itself for a hold) and why, and what apply remembers of it.
type move struct {
	to     int
	reason string // "": the last reason stands
	// raise is the plan a raise heads for: its reason (raiseReason) is
	// said once the cap has moved, as it quotes the attainment anchored at
	// the new cap.
	raise *plan
	fail  bool // lowered for missing P: the level left is barred from raises (mayRaiseTo)
	probe bool // a probe: the level left waits before the next (shouldProbe)
	bar   int  // a level barred as if lowered from (above the engine's limit); 0: none
	walk  bool // a step to or from the plateau's left edge (mayLeaveLeft, mayWalkBack)
	// bound is a move before any plan (overrule): the walk's state stands.
	bound  bool
	toward bool // a doubling of the ramp: the level it heads for
}

// Decide makes one decision: it observes the interval since the last one,
// refits the model, plans, chooses one move of the cap and applies it
// (see the stages above and move for the moves).
func (c *Controller) Decide(now time.Time, load Load) Decision {
	t := &tick{now: now, load: load.clean()}
	c.observeInterval(t) // 1. observe what needs no model
	c.remodel(now)       // 2. model
	if d, ok := c.overrule(t); ok {
		return d
	}
	c.observeDemand(t)   // 1. observe what needs the model
	pl := c.planTick(t)  // 3. plan
	m := c.move(t, pl)   // 4. move
	return c.apply(t, m) // 5. apply
}

// observeInterval is the part of the observe stage that comes before the
// model: the time of the decision, and the time the cap held under demand
// (a shift detected next clears it).
func (c *Controller) observeInterval(t *tick) {
	c.lastDecide = t.now
	c.noteDwell(t.now, t.load)
}

// remodel is the model stage: a shift of either latency at the cap cuts
// the memory, and the curves, the token model and the table are refitted.
func (c *Controller) remodel(now time.Time) {
	c.detectShift(now)
	c.refresh(now)
}

// overrule makes the moves that come before any plan and reports whether
// it made one: a fixed cap holds; a cap above the engine's own limit, or
// one the token budget leaves unused, comes down to it; the first reading
// of the engine's metrics starts the cap where the engine runs; and with
// nothing learnt the cap holds.
func (c *Controller) overrule(t *tick) (Decision, bool) {
	if c.cfg.Fixed {
		c.noteLoad(t.now, t.load) // light load is judged with a fixed cap too (admitPaced)
		return Decision{Cap: c.cap, Reason: c.reason}, true
	}
	m, ok := c.boundByEngine(t.now)
	if !ok {
		m, ok = c.boundByBudget(t.now, t.load)
	}
	if ok {
		d := c.apply(t, m)
		c.noteLoad(t.now, t.load) // against the lowered cap
		return d, true
	}
	if c.startFromEngine(t.now) {
		c.changedAt = t.now
		return Decision{Cap: c.cap, Changed: true, Reason: c.reason}, true
	}
	if !c.tab.ok {
		c.reason = "learning: no measurements yet"
		if c.tab.bad {
			c.reason = "holding: the model is not finite"
		}
		return Decision{Cap: c.cap, Reason: c.reason}, true
	}
	return Decision{}, false
}

// observeDemand is the part of the observe stage that needs the model:
// the slot time left idle while requests waited (a share of the predicted
// hold), whether there was demand, a tenant held short, and what the ramp
// cost.
func (c *Controller) observeDemand(t *tick) {
	now, load := t.now, t.load
	if load.PeakQueued > 0 || load.Rejected > 0 {
		// Slots free while requests were turned away or waited: each free
		// slot wastes idle = Hold * free/running of every cycle.
		h := c.predict(c.cap).Hold
		free := float64(max(c.cap-load.Running, 0))
		c.idle.add(now, idleMemory, math.Min(h*free/math.Max(float64(load.Running), 1), h)) // NaN: dropped
	}
	t.demand = c.noteLoad(now, load)
	c.noteShort(now, load)
	c.noteRamp(now, load, c.cfg.Interval)
	t.settled = now.Sub(c.changedAt) >= settleTime
}

// planTick is the plan stage: the plan, the plateau among the levels
// meeting P for /status and the metrics (once a decision, not in every
// plan: the Gate plans for a request that would queue; none when the
// target misses P for goodput) with its left edges, and whether the cap
// misses P.
func (c *Controller) planTick(t *tick) plan {
	pl := c.plan(t.now)
	c.plat = plateau{}
	if !pl.over {
		c.plat = c.plateauOf(pl.classes, c.cfg.MinCap, pl.limit)
	}
	c.plat.left, c.plat.fairLeft = c.noteLeft(t.now, pl.classes, c.plat)
	t.missing = pl.aCap < c.cfg.Percentile-missTolerance && !(pl.over && pl.target == c.cap) && c.evidenceAtCap()
	return pl
}

// apply is the apply stage: it remembers what the move leaves to be
// remembered (a level lowered from for missing P, a probe), sets the cap
// and the reason, and, when the cap changed, ends the ramp on a lowering,
// notes the walk and the time of the change.
func (c *Controller) apply(t *tick, m move) Decision {
	old := c.cap
	if m.fail {
		f := c.failed[old]
		c.failed[old] = failure{at: t.now, count: f.count + 1}
	}
	if m.probe {
		f := c.probes[old]
		c.probes[old] = failure{at: t.now, count: f.count + 1}
	}
	if m.bar > 0 {
		f := c.failed[m.bar]
		c.failed[m.bar] = failure{at: t.now, count: f.count + 1}
	}
	c.cap = m.to
	if m.toward {
		c.ramp.toward = m.to
	}
	switch {
	case m.raise != nil:
		c.reason = c.raiseReason(old, *m.raise, "")
	case m.reason != "":
		c.reason = m.reason
	}
	if c.cap == old { // a hold, or a raise the engine's own limit took back
		return Decision{Cap: c.cap, Reason: c.reason}
	}
	if c.cap < old {
		c.endRamp(t.now, c.reason)
	}
	if !m.bound {
		c.walked = m.walk
		c.fairWalk = m.walk && c.cap < c.plat.left
	}
	c.changedAt = t.now
	return Decision{Cap: c.cap, Changed: true, Reason: c.reason}
}
