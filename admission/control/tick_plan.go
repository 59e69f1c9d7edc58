package control

import (
	"math"
	"sort"
	"time"

	"github.com/kneecap/kneecap/slo"
)

// Plan: where the model would put the cap now (see tick.go). The shares
// of the classes of targets (classShares), the levels meeting P for them
// (best), the goodput of each level as the plan weighs it (goodput: the
// model's prediction, Little's law times the predicted attainment of each
// class, blended with the goodput measured while the cap held the level
// under demand, noteDwell) and the best of those levels (goodputBest);
// then the plateau of the goodput curve and its left edges (plateauOf,
// noteLeft; the walk to them is in tick_walk.go) and whether a predicted
// miss at the cap has evidence (evidenceAtCap). A request that would queue
// plans too (raiseOnDemand, predict.go).

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
	// it was weighed with (for the plateau: see planTick).
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

// dwellAtCap reports whether the cap has held long enough for its measured
// goodput to be part of its prediction (see goodput), so that a move down
// for goodput rests on a measurement and not on an extrapolation.
func (c *Controller) dwellAtCap() bool {
	return c.dwell.get(c.cap).w >= minDwell
}

// plateau is the run of levels around the goodput-best level whose
// goodput is within the noise of the best.
type plateau struct {
	from, to int     // the levels of the plateau (0: none)
	left     int     // the left edge (noteLeft): the lowest level within leftSlack of the best, averaged
	fairLeft int     // the fair edge: the lowest within goodputSlack of the best, averaged (for a short tenant)
	best     float64 // the highest goodput among them, req/s
	noise    float64 // the band below best that counts as the same goodput, req/s
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
