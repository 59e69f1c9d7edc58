package control

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/kneecap/kneecap/slo"
)

// largestMeeting is the level the cap should move to for targets t and an
// attainment threshold thr, looking outward from the cap: if the cap's
// predicted attainment is at least thr, the last level of the unbroken run
// of such levels above it; otherwise the nearest level below that reaches
// thr, or MinCap.
func (c *Controller) largestMeeting(t slo.Targets, thr float64) int {
	a := c.attainment(t)
	n := max(c.cfg.MinCap, min(c.cap, len(a)-1))
	if a[n] >= thr {
		for n+1 < len(a) && a[n+1] >= thr {
			n++
		}
		return n
	}
	for n > c.cfg.MinCap && a[n] < thr {
		n--
	}
	return n
}

type class struct {
	t     slo.Targets
	share float64
}

func (c *Controller) classShares(now time.Time) []class {
	var out []class
	for t, d := range c.classes {
		d.decay(now, c.cfg.Memory)
		if d.w > 1e-3 {
			out = append(out, class{t, d.w})
		}
	}
	// In a fixed order, whatever the map's: the sum (and so every
	// decision) must not depend on it.
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.share != b.share {
			return a.share > b.share
		}
		if a.t.TTFT != b.t.TTFT {
			return a.t.TTFT < b.t.TTFT
		}
		if a.t.TPOT != b.t.TPOT {
			return a.t.TPOT < b.t.TPOT
		}
		return a.t.E2E < b.t.E2E
	})
	total := 0.0
	for _, k := range out {
		total += k.share
	}
	if total == 0 {
		return []class{{c.op, 1}}
	}
	for i := range out {
		out[i].share /= total
	}
	return out
}

// best chooses the cap for an attainment threshold thr. For each class of
// targets k, n_k is the largest n whose predicted attainment of k is at
// least thr; among the n_k it picks the one with the highest predicted
// goodput
//
//	goodput(n) = n / Hold(n) * sum of share_k over classes with n <= n_k
//
// With one class this is the largest n where at least a share thr of the
// requests is predicted to meet every target.
func (c *Controller) best(classes []class, thr float64) int {
	if len(classes) == 1 {
		return c.largestMeeting(classes[0].t, thr)
	}
	limits := make([]int, len(classes))
	for i, k := range classes {
		limits[i] = c.largestMeeting(k.t, thr)
	}
	bestN, bestG := c.cfg.MinCap, -1.0
	for _, n := range limits {
		share := 0.0
		for i, k := range classes {
			if n <= limits[i] {
				share += k.share
			}
		}
		h := c.predict(n).Hold
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

// plan is where the model would put the cap now.
type plan struct {
	target int     // the level to move towards
	gT     float64 // its predicted goodput
	gCap   float64 // the cap's predicted goodput
	aCap   float64 // the cap's predicted attainment (operator's targets)
	down   int     // the nearest level at or below the cap meeting P
	up     int     // the end of the run of levels above the cap meeting P + hysteresis
	over   bool    // target chosen for goodput although it misses P
	// limit is the highest level nF was chosen among, classes the shares
	// it was weighed with (for the plateau: see Decide).
	limit   int
	classes []class
}

// plan computes the target level:
//
//	nF = the goodput-best level (largest within 3 %) among those whose
//	     predicted attainment is at least P;
//	nX = the goodput-best level among all within reach (up to 2 cap + 16);
//	target = nX if G(nX) > 1.05 G(nF), else nF.
//
// The percentile is the margin the operator asked for; goodput is the
// objective. When holding every target for a share P costs more than 5 %
// of the goodput (a slow engine whose prefills collide), goodput wins and
// the reason says so.
func (c *Controller) plan(now time.Time) plan {
	classes := c.classShares(now)
	p := plan{
		up:   c.best(classes, c.cfg.Percentile+hysteresis),
		down: c.best(classes, c.cfg.Percentile),
		gCap: c.goodput(classes, c.cap),
		aCap: c.attainment(c.op)[c.cap],
	}
	limit := p.down
	if limit >= c.cap {
		limit = max(limit, p.up)
	}
	nF, gF := c.goodputBest(classes, c.cfg.MinCap, limit)
	nX, gX := c.goodputBest(classes, c.cfg.MinCap, min(c.cfg.MaxCap, 2*c.cap+16))
	p.target, p.gT, p.limit, p.classes = nF, gF, limit, classes
	if gX > (1+goodputOverride)*gF {
		p.target, p.gT, p.over = nX, gX, true
	}
	return p
}

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

// evidenceAtCap reports whether a predicted miss at the cap may lower it:
// when enough requests finished at this cap for their measured attainment
// to count (it is then part of the prediction, see attainment) and their
// share that met the targets is below P by more than chance, or when the
// predicted time per token misses its target by a quarter. Time per token is
// predicted from the gaps of every running stream, which hold steady
// physics; engine TTFT is predicted from a few dozen first tokens, which a
// change of the cap itself disturbs (a raise admits a request while others
// prefill), so a TTFT-only miss waits for finished requests to confirm it.
func (c *Controller) evidenceAtCap() bool {
	if !c.stepShiftAt.IsZero() && c.lastDecide.Sub(c.stepShiftAt) < shiftEvidence {
		// The decode step itself changed (steady physics, seen in every
		// running stream): what was measured at the cap no longer holds.
		return true
	}
	t := c.op
	m := c.measured[t].get(c.cap)
	if m.w >= measuredMin {
		// A miss only if the requests measured at the cap could not have
		// come from a level meeting P: 7 good of 8 is what P90 gives.
		return attainmentUpper(m) < c.cfg.Percentile
	}
	return c.predict(c.cap).TPOT > tpotEvidence*t.TPOT.Seconds()
}

// attainmentUpper is the upper end of the Wilson score interval (one
// standard error) of a measured attainment: the highest true attainment
// the measured share is plausibly drawn from.
func attainmentUpper(m decayed) float64 {
	n, p := m.w, m.mean()
	if n <= 0 {
		return 1
	}
	const z = 1.0
	d := 1 + z*z/n
	centre := (p + z*z/(2*n)) / d
	half := z * math.Sqrt(p*(1-p)/n+z*z/(4*n*n)) / d
	return math.Min(1, centre+half)
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
