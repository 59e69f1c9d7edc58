package admission

import (
	"fmt"
	"github.com/kneecap/kneecap/slo"
	"math"
	"sort"
	"time"
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
	total := 0.0
	for t, d := range c.classes {
		d.decay(now, c.cfg.Memory)
		if d.w > 1e-3 {
			out = append(out, class{t, d.w})
			total += d.w
		}
	}
	if total == 0 {
		return []class{{c.targetsOf(slo.Targets{}), 1}}
	}
	for i := range out {
		out[i].share /= total
	}
	sort.Slice(out, func(i, j int) bool { return out[i].share > out[j].share })
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

// Decide refits the model and moves the cap:
//   - lower, by one (by up to half the cap when the predicted attainment is
//     more than 0.2 below the percentile P), when the cap's predicted
//     attainment is below P and the engine ran above the largest level
//     whose attainment is at least P;
//   - raise, by at most a quarter of the cap, when a larger level's
//     predicted attainment is at least P + 0.04 (the hysteresis: the cap
//     holds still while its attainment lies in [P, P + 0.04)) and there is
//     demand: requests queued or refused, or the engine within
//     max(1, cap/8) of the cap;
//   - probe one above the cap when there is demand, the cap meets the
//     shrunk targets, the model rests on one level and the level above has
//     no recent samples (the model cannot know it: from one level it
//     extrapolates proportionally, which predicts no gain in throughput);
//   - otherwise hold.
//
// A level the cap was lowered from is barred from raises for 30s, doubling
// with each further failure there up to 5 minutes (cleared by a shift).
//
// Every change waits settleTime (2s) after the previous one, so that the
// level it moved to is measured before the next.
func (c *Controller) Decide(now time.Time, load Load) Decision {
	c.lastDecide = now
	c.detectShift(now)
	c.refresh(now)
	if c.cfg.Fixed {
		return Decision{Cap: c.cap, Reason: c.reason}
	}
	if !c.tab.ok {
		c.reason = "learning: no measurements yet"
		return Decision{Cap: c.cap, Reason: c.reason}
	}
	classes := c.classShares(now)
	up := c.best(classes, c.cfg.Percentile+hysteresis)
	down := c.best(classes, c.cfg.Percentile)
	demand := load.PeakQueued > 0 || load.Rejected > 0 ||
		load.PeakRunning >= c.cap-max(1, c.cap/8)
	old := c.cap
	// Each change waits for measurements at the level it left behind.
	settled := now.Sub(c.changedAt) >= settleTime
	// The goodput-best level among those that meet the targets: the
	// smallest within goodputSlack of the best (where goodput is flat, the
	// smaller cap leaves the targets more margin).
	gBest, gMax := c.goodputBest(classes, min(down, c.cap), down)
	gCap := c.goodput(classes, c.cap)
	// Raise towards the goodput-best level up to up, if it beats the cap by
	// more than the slack.
	target, gT := c.goodputBest(classes, c.cap+1, up)
	raise := up > c.cap && demand && settled && c.mayRaiseTo(now, c.cap+1) && gT > (1+goodputSlack)*gCap
	switch {
	case down < c.cap && c.cap > c.cfg.MinCap && load.PeakRunning > down && settled:
		step := 1
		if c.attainment(c.targetsOf(slo.Targets{}))[c.cap] < c.cfg.Percentile-bigViolation {
			step = max(1, int(float64(c.cap)*lowerStep))
		}
		c.cap = max(down, c.cap-step, c.cfg.MinCap)
		f := c.failed[old]
		c.failed[old] = failure{at: now, count: f.count + 1}
		p := c.predict(old)
		c.reason = fmt.Sprintf("lower %d->%d: at %d predicted attainment %.2f < %.2f (P%.0f TPOT %s, engine TTFT %s); target level %d",
			old, c.cap, old, c.attainment(c.targetsOf(slo.Targets{}))[old], c.cfg.Percentile,
			100*c.cfg.Percentile, dur(p.TPOT), dur(p.TTFT), down)
	case gBest < c.cap && gCap < (1-goodputSlack)*gMax && settled:
		c.cap--
		c.reason = fmt.Sprintf("lower %d->%d for goodput: predicted %.3f req/s at %d, %.3f at %d",
			old, c.cap, gCap, old, gMax, gBest)
	case raise:
		c.cap = min(target, c.cap+max(1, int(float64(c.cap)*raiseStep)), c.cfg.MaxCap)
		for n := old + 2; n <= c.cap; n++ {
			if !c.mayRaiseTo(now, n) {
				c.cap = n - 1
				break
			}
		}
		p := c.predict(c.cap)
		c.reason = fmt.Sprintf("raise %d->%d: at %d predicted attainment %.2f (P%.0f TPOT %s, engine TTFT %s), goodput %.3f req/s vs %.3f at %d; target level %d",
			old, c.cap, c.cap, c.attainment(c.targetsOf(slo.Targets{}))[c.cap],
			100*c.cfg.Percentile, dur(p.TPOT), dur(p.TTFT), gT, gCap, old, target)
	case demand && up >= c.cap && settled && c.shouldProbe():
		c.cap++
		c.reason = fmt.Sprintf("probe %d->%d: no recent measurements above %d and demand", old, c.cap, old)
		c.lastProbe = now
	default:
		return Decision{Cap: c.cap, Reason: c.reason}
	}
	c.changedAt = now
	return Decision{Cap: c.cap, Changed: true, Reason: c.reason}
}

// goodputSlack is the relative difference of predicted goodput below which
// two levels count as equal: the cap moves for goodput only when the gain
// exceeds it (hysteresis), and of equals the smaller level is chosen.
const goodputSlack = 0.03

// goodput is the predicted goodput at n with the engine full:
//
//	G(n) = n / Hold(n) * sum_k share_k * A_k(n)
//
// (Little's law times the predicted share meeting each class's targets).
func (c *Controller) goodput(classes []class, n int) float64 {
	h := c.predict(n).Hold
	if h <= 0 {
		return 0
	}
	att := 0.0
	for _, k := range classes {
		if a := c.attainment(k.t); n < len(a) {
			att += k.share * a[n]
		}
	}
	return float64(n) / h * att
}

// goodputBest returns, among levels lo..hi, the smallest whose predicted
// goodput is within goodputSlack of the highest, and that highest.
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
	for n := lo; n <= hi; n++ {
		if g[n-lo] >= (1-goodputSlack)*gMax {
			return n, gMax
		}
	}
	return hi, gMax
}

// failure is the record of the cap having been lowered from a level.
type failure struct {
	at    time.Time
	count int
}

// failBackoff is how long a level the cap was lowered from stays barred
// after its first failure; it doubles with each further one, up to
// maxFailBackoff.
const (
	failBackoff    = 30 * time.Second
	maxFailBackoff = 5 * time.Minute
)

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
func (c *Controller) shouldProbe() bool {
	if c.cap >= c.cfg.MaxCap || c.gap.points >= 2 {
		return false
	}
	gw, _ := c.gap.level(c.cap + 1)
	return gw < 20
}

func dur(sec float64) time.Duration {
	return time.Duration(sec * float64(time.Second)).Round(100 * time.Microsecond)
}
