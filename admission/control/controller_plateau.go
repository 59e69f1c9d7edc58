package control

import (
	"fmt"
	"time"
)

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

// plateau is the run of levels around the goodput-best level whose
// goodput is within the noise of the best.
type plateau struct {
	from, to int     // the levels of the plateau (0: none)
	left     int     // the left edge (noteLeft): the lowest level within leftSlack of the best, averaged
	fairLeft int     // the fair edge: the lowest within goodputSlack of the best, averaged (for a short tenant)
	best     float64 // the highest goodput among them, req/s
	noise    float64 // the band below best that counts as the same goodput, req/s
}

// noteLeft averages each level's goodput, as the plan weighs it, over the
// decisions of the last leftMemory (c.smooth) and returns the left edge
// of that average: the lowest level of the run below the best whose
// average is within leftSlack of the best's. A prediction swings by more
// than leftSlack from one decision to the next; stepping on each one, the
// walk drifted to where the true goodput was 3 % below the best (a step
// left is taken on a swing down, a step back needs 10 % measured).
//
// fair is the fair edge, the lowest level of that run within goodputSlack
// of the best: where the cap may walk while a tenant is held below its
// share by its own demand (Load.ShortTenant). Max-min fairness trades the
// plateau's noise band of goodput for it: such a tenant runs every request
// it has, so only a lower cap, each request faster, serves it more.
func (c *Controller) noteLeft(now time.Time, classes []class, p plateau) (left, fair int) {
	if p.to == 0 {
		clear(c.smooth)
		return 0, 0
	}
	lo := max(c.cfg.MinCap, p.from-leftReach)
	for n := range c.smooth {
		if n < lo || n > p.to {
			delete(c.smooth, n)
		}
	}
	best, bestN := 0.0, 0
	for n := lo; n <= p.to; n++ {
		d := c.smooth.at(n)
		d.add(now, leftMemory, c.goodput(classes, n))
		if m := d.mean(); m > best {
			best, bestN = m, n
		}
	}
	left = bestN
	for left > lo && c.smooth.at(left-1).mean() >= (1-leftSlack)*best {
		left--
	}
	fair = left
	for fair > lo && c.smooth.at(fair-1).mean() >= (1-goodputSlack)*best {
		fair--
	}
	return left, fair
}

// plateauOf finds the plateau among levels lo..hi; its left edge is
// noteLeft's, from the averaged goodput.
func (c *Controller) plateauOf(classes []class, lo, hi int) plateau {
	lo, hi = max(lo, c.cfg.MinCap), min(hi, c.cfg.MaxCap)
	if hi < lo {
		return plateau{}
	}
	g := make([]float64, hi-lo+1)
	bestN := lo
	for n := lo; n <= hi; n++ {
		g[n-lo] = c.goodput(classes, n)
		if g[n-lo] > g[bestN-lo] {
			bestN = n
		}
	}
	p := plateau{from: bestN, to: bestN, best: g[bestN-lo]}
	if p.best <= 0 || !finite(p.best) {
		return plateau{}
	}
	p.noise = goodputSlack * p.best
	for p.from > lo && g[p.from-1-lo] >= p.best-p.noise {
		p.from--
	}
	for p.to < hi && g[p.to+1-lo] >= p.best-p.noise {
		p.to++
	}
	return p
}

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

// noteShort keeps the shares of decisions that saw a short tenant, and a
// bounded or short one.
func (c *Controller) noteShort(now time.Time, load Load) {
	c.boundedNow = load.BoundedTenant || load.ShortTenant
	c.short.add(now, shortMemory, one(load.ShortTenant))
	c.bounded.add(now, shortMemory, one(c.boundedNow))
}

// one is 1 for true, 0 for false: a sample of a share.
func one(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// tenantShort reports whether most recent decisions saw a tenant held
// below its share by its own demand.
func (c *Controller) tenantShort() bool {
	return c.short.w > 0 && c.short.sum >= 0.5*c.short.w
}

// tenantBounded reports whether the last decision, or most recent ones,
// saw a tenant bounded by its own demand (Load.BoundedTenant) or short.
func (c *Controller) tenantBounded() bool {
	return c.boundedNow || (c.bounded.w > 0 && c.bounded.sum >= 0.5*c.bounded.w) || c.tenantShort()
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

// walkReason is the reason of a step towards the left edge.
func (c *Controller) walkReason(old int, load Load) string {
	p := c.plat
	if to := c.walkTo(load); to < p.left {
		return fmt.Sprintf("lower %d->%d towards the plateau's fair edge %d: a tenant runs every request it has and less than its share beside others; goodput within %.0f%% of the best (%.3f req/s) from %d to %d",
			old, c.cap, to, 100*goodputSlack, p.best, p.from, p.to)
	}
	return fmt.Sprintf("lower %d->%d towards the plateau's left edge %d: goodput within %.0f%% of the best (%.3f req/s) from %d to %d, at less latency",
		old, c.cap, p.left, 100*leftSlack, p.best, p.from, p.to)
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
