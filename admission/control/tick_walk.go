package control

import (
	"fmt"
	"time"
)

// Move: the walk to the plateau's left edge and back, the conditions of
// its moves (moveWalkLeft, moveWalkBack, tick_move.go); the plan stage
// finds the plateau and its edges (plateauOf, noteLeft, tick_plan.go).
//
// The plateau and its left edge. Near the knee goodput is flat over
// several levels: past the level where the engine's throughput stops
// growing, one more running request adds as much time per token as it adds
// work, until the targets start to fail. Every level of that plateau
// serves the same goodput, and the lower ones serve it at less latency:
// fewer requests share each decode step, so each one streams faster and
// ends sooner, and a closed-loop client (or a small tenant, served first
// by the fair queue) comes back sooner. The plan aims at the plateau's
// right end (the largest level within goodputSlack of the best; see
// goodputBest), where a free slot is least often idle and a shift is seen
// first. Under sustained demand, once the model has relearned the level
// the cap holds (relearnDwell since the last detected shift), the cap
// walks to the left edge one level at a time (mayWalkLeft), and leaves it
// only for a measured gain (mayLeaveLeft). /status, the metrics and the
// live page show the plateau and its left edge.

// mayWalkLeft reports whether the cap may step towards the plateau's left
// edge: it is on the plateau above the left edge, the engine ran at the
// cap (the count binds, not the token budget) with requests waiting or
// refused, the load is not light, the cap held its level leftDwell, and
// since the last detected shift the cap has held a level under demand long
// enough for the model to have relearned it.
func (c *Controller) mayWalkLeft(now time.Time, load Load) bool {
	p := c.plat
	if p.to == 0 || p.left == 0 || c.cap <= c.walkTo(load) || c.cap > p.to {
		return false
	}
	if streamed := c.streamedShare(); streamed < minStreamedShare {
		return false
	}
	if load.PeakRunning < c.cap || (load.PeakQueued == 0 && load.Rejected == 0) || c.lightLoad(float64(c.cap)) {
		return false
	}
	if now.Sub(c.changedAt) < leftDwell {
		return false
	}
	for _, d := range c.dwell {
		if d.w >= relearnDwell {
			return true
		}
	}
	return false
}

// walkTo is the level the walk heads for: the left edge, or the fair
// edge while a tenant is held below its share by its own demand.
func (c *Controller) walkTo(load Load) int {
	if load.ShortTenant && c.tenantShort() && c.plat.fairLeft > 0 {
		return min(c.plat.left, c.plat.fairLeft)
	}
	return c.plat.left
}

// mayWalkBack reports whether the cap, walked below the left edge to the
// fair edge for a short tenant, steps back up one level: no tenant is
// short any more, nor bounded (where a tenant holds its share exactly, a
// step up would make it short again).
func (c *Controller) mayWalkBack(now time.Time, load Load) bool {
	if !c.walked || !c.fairWalk || c.plat.left == 0 || c.cap >= c.plat.left || now.Sub(c.changedAt) < leftDwell {
		return false
	}
	return !load.ShortTenant && c.short.sum < shortGone*c.short.w && !c.tenantBounded()
}

// walkReason is the reason of a step from old to n towards the left edge.
func (c *Controller) walkReason(old, n int, load Load) string {
	p := c.plat
	if to := c.walkTo(load); to < p.left {
		return fmt.Sprintf("lower %d->%d towards the plateau's fair edge %d: a tenant runs every request it has and less than its share beside others; goodput within %.0f%% of the best (%.3f req/s) from %d to %d",
			old, n, to, 100*goodputSlack, p.best, p.from, p.to)
	}
	return fmt.Sprintf("lower %d->%d towards the plateau's left edge %d: goodput within %.0f%% of the best (%.3f req/s) from %d to %d, at less latency",
		old, n, p.left, 100*leftSlack, p.best, p.from, p.to)
}

// mayLeaveLeft reports whether a raise for goodput may leave the level
// the cap walked to: the prediction at one level swings by more than the
// 3 % a raise needs from one decision to the next, so from the left edge
// the cap is raised only for moveGain (10 %) with the level measured, as
// it is lowered for goodput.
//
// While a tenant runs every request it has and no more than the tenants
// that want more, or is held below its share (tenantBounded), a raise by
// one level must also serve that tenant no less (max-min): it gets about
// its running count over the cap of the goodput, and a raise serves it
// less unless the goodput one level up grows faster than the level does.
func (c *Controller) mayLeaveLeft(pl plan) bool {
	if pl.over {
		return true
	}
	if c.tenantBounded() {
		next := c.goodput(pl.classes, c.cap+1)
		return next*float64(c.cap) > pl.gCap*float64(c.cap+1) && pl.gT > (1+moveGain)*pl.gCap && c.dwellAtCap()
	}
	return !c.walked || (pl.gT > (1+moveGain)*pl.gCap && c.dwellAtCap())
}

// streamedShare is the share of recent requests judged by their time per
// output token (streamed); the others are judged by E2E alone.
func (c *Controller) streamedShare() float64 {
	total, streamed := 0.0, 0.0
	for t, d := range c.classes {
		total += d.w
		if t.TPOT > 0 {
			streamed += d.w
		}
	}
	if total <= 0 {
		return 1
	}
	return streamed / total
}
