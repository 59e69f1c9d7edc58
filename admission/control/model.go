package control

import (
	"math"
	"time"
)

// decayed is an exponentially forgotten weighted sum: every sample has weight
// exp(-(now - t)/tau) where t is when it arrived. The zero value is empty.
type decayed struct {
	w, sum float64
	t      time.Time
}

// decay ages the sum to now.
func (d *decayed) decay(now time.Time, tau time.Duration) { d.decayWith(now, tau, nil) }

// decayWith ages the sum to now, taking the factor from m (nil: computed).
func (d *decayed) decayWith(now time.Time, tau time.Duration, m *expMemo) {
	if d.t.IsZero() {
		d.t = now
		return
	}
	if dt := now.Sub(d.t); dt > 0 {
		f := m.factor(dt, tau)
		d.w *= f
		d.sum *= f
		d.t = now
	}
}

// add adds a sample of weight 1; a NaN or infinite one is dropped (it
// would poison the sum for good).
func (d *decayed) add(now time.Time, tau time.Duration, x float64) { d.addWith(now, tau, x, nil) }

// addWith is add with the decay factor taken from m (nil: computed).
func (d *decayed) addWith(now time.Time, tau time.Duration, x float64, m *expMemo) {
	d.decayWith(now, tau, m)
	if !finite(x) {
		return
	}
	d.w++
	d.sum += x
}

// expMemo remembers the last two decay factors computed. One observation
// ages several sums over the same span with the same memory (a level's
// mean in its curve and in its shift detector, and the detector's short
// sums), each of which would compute the same exp: with a memo it is
// computed once per span, and since the same arguments give the same
// factor, bit for bit, every sum ends exactly as before. Chunk
// observations are the controller's hottest path (every chunk of every
// stream); a memo halves their exps. Not safe for concurrent use: its
// owner's lock covers it (the controller's).
type expMemo struct {
	e [2]struct {
		dt, tau time.Duration
		f       float64
	}
	next int
}

// factor is exp(-dt/tau).
func (m *expMemo) factor(dt, tau time.Duration) float64 {
	if m == nil {
		return math.Exp(-float64(dt) / float64(tau))
	}
	for i := range m.e {
		if e := &m.e[i]; e.dt == dt && e.tau == tau {
			return e.f
		}
	}
	f := math.Exp(-float64(dt) / float64(tau))
	m.e[m.next].dt, m.e[m.next].tau, m.e[m.next].f = dt, tau, f
	m.next ^= 1
	return f
}

func (d *decayed) mean() float64 {
	if d.w <= 0 {
		return 0
	}
	return d.sum / d.w
}

// curve is the model of one latency against the running count n:
//
//	y(n) = a + b*x(n),  a >= 0, b >= 0
//
// For the time per output chunk x(n) = n: the physics of a
// memory-bandwidth-bound decode step, a fixed part for reading the weights
// and a part growing with the sequences in the batch and their KV cache.
// For engine TTFT x(n) = gap(n), the fitted step time: a new request's TTFT
// is its own prefill (a) plus the decode steps it waits for and shares,
// which grow as the step does (b, about 1 when one step is waited for).
//
// It is fitted by weighted least squares over per-level forgotten means;
// each level's weight is capped at capW so that the level the cap holds does
// not drown the rest. With data at only one level it keeps the shape of its
// last fit with two or more levels, y = k*(a' + b'*x), fitting only k; with
// no such shape yet it takes the prior slope b = prior (1 for TTFT) or, with
// prior 0, proportionality y = y0*x/x0, the conservative guess when the
// engine is probed upward.
type curve struct {
	tau            time.Duration
	capW           float64
	prior          float64
	xOf            func(n float64) float64 // nil: x = n
	maxN           int                     // the highest level kept; higher counts land there
	levels         []decayed               // index n = running count; 0 unused; grown on demand up to maxN
	a, b           float64
	shapeA, shapeB float64 // last fit from two or more levels
	points         int     // levels with weight >= minLevelWeight in the fit
	ok             bool
	memo           *expMemo // shared with the shift detector of the same samples; nil: none
}

// newCurve returns a curve over levels 1..maxN. Its per-level memory grows
// with the highest level that got a sample, not with maxN: a cap fixed far
// above any running count (KNEECAP_MAX_CONCURRENCY=4096) costs nothing.
func newCurve(maxN int, tau time.Duration, capW float64) *curve {
	return &curve{tau: tau, capW: capW, maxN: maxN}
}

func (c *curve) x(n float64) float64 {
	if c.xOf == nil {
		return n
	}
	return c.xOf(n)
}

func (c *curve) clampN(n int) int {
	return max(1, min(n, c.maxN))
}

func (c *curve) add(now time.Time, n int, y float64) {
	if !finite(y) || y < 0 {
		return // no latency is negative
	}
	i := c.clampN(n)
	c.levels = growLevels(c.levels, i, c.maxN)
	c.levels[i].addWith(now, c.tau, y, c.memo)
}

// growLevels makes levels long enough to index i (i <= maxN), at least
// doubling it so that growth is rare; new levels are empty.
func growLevels[T any](levels []T, i, maxN int) []T {
	if i < len(levels) {
		return levels
	}
	grown := make([]T, min(maxN+1, max(i+1, 2*len(levels), 16)))
	copy(grown, levels)
	return grown
}

// fit refits a and b from the levels aged to now.
func (c *curve) fit(now time.Time) {
	var sw, sx, sy, sxx, sxy float64
	points := 0
	for n := 1; n < len(c.levels); n++ {
		l := &c.levels[n]
		if l.w == 0 {
			continue
		}
		l.decay(now, c.tau)
		if l.w < 1e-3 || !finite(l.sum) { // forgotten, or poisoned (unreachable: add drops NaN)
			*l = decayed{}
			continue
		}
		w := math.Min(l.w, c.capW)
		x, y := c.x(float64(n)), l.mean()
		sw += w
		sx += w * x
		sy += w * y
		sxx += w * x * x
		sxy += w * x * y
		if l.w >= minLevelWeight {
			points++
		}
	}
	c.points = points
	if sw == 0 {
		c.ok = false
		return
	}
	c.ok = true
	defer func() {
		// A fit that is not finite (unreachable with finite samples) is no
		// fit: the model is unknown until one is.
		if !finite(c.a) || !finite(c.b) {
			c.ok = false
		}
	}()
	den := sw*sxx - sx*sx
	if points >= 2 && den > 1e-9 {
		c.b = (sw*sxy - sx*sy) / den
		c.a = (sy - c.b*sx) / sw
		if c.b < 0 && c.shapeB > 0 {
			// Falling with n contradicts the physics (noise, or samples
			// at low levels taken in a transient): keep the last
			// rising shape, scaled to the data, rather than extrapolate
			// flat, which makes every level above look free.
			k := sy / (c.shapeA*sw + c.shapeB*sx)
			c.a, c.b = k*c.shapeA, k*c.shapeB
			return
		}
		if c.b < 0 { // flat or noisy: a constant
			c.a, c.b = sy/sw, 0
		}
		if c.a < 0 { // through the origin: b = sum(w x y) / sum(w x x)
			c.a, c.b = 0, sxy/sxx
		}
		c.shapeA, c.shapeB = c.a, c.b
		return
	}
	switch {
	case c.shapeA+c.shapeB > 0:
		// k = sum(w y) / sum(w (a' + b' x))
		k := sy / (c.shapeA*sw + c.shapeB*sx)
		c.a, c.b = k*c.shapeA, k*c.shapeB
	case c.prior > 0 && sy-c.prior*sx >= 0:
		c.a, c.b = (sy-c.prior*sx)/sw, c.prior
	default:
		c.a, c.b = 0, sxy/sxx
	}
}

// at is the fitted mean at running count n (n >= 1).
func (c *curve) at(n float64) float64 {
	if n < 1 {
		n = 1
	}
	return c.a + c.b*c.x(n)
}

// scale multiplies every level's mean by f and keeps only share of its
// weight: the model after a detected shift keeps its shape as a prior while
// new samples take over.
func (c *curve) scale(f, share float64) {
	if !(f > 0) || math.IsInf(f, 0) {
		f = 1 // no measured ratio: keep the scale, cut the weight
	}
	for i := range c.levels {
		l := &c.levels[i]
		l.sum *= f * share
		l.w *= share
	}
	c.a *= f
	c.b *= f
	c.shapeA *= f
	c.shapeB *= f
}

// level returns the forgotten weight and mean at n (zero where no sample
// ever came).
func (c *curve) level(n int) (w, mean float64) {
	i := c.clampN(n)
	if i >= len(c.levels) {
		return 0, 0
	}
	l := c.levels[i]
	return l.w, l.mean()
}

// shiftDetector watches one latency for a change of regime (an engine
// slowdown or restart, longer prompts). Per running count it keeps two
// forgotten means of samples, over a long (the model's memory) and a short
// window; at the level the cap holds and the one below,
//
//	R = short mean / long mean
//
// outside [1/k, k] at two checks in a row, with enough weight in both,
// means that what the model learned there no longer holds. Samples over
// outlierFactor times the long mean (a prefill stalling its neighbours: a
// gap 10-50 times the typical one) are left out of both means, since how
// often they come changes with the cap; a run of them is itself a shift.
type shiftDetector struct {
	long, short       time.Duration
	k                 float64
	minShort, minLong float64
	maxN              int
	lv                []shiftLevel // grown on demand up to maxN, as curve.levels
	strikes           int
	memo              *expMemo // shared with the curve of the same samples; nil: none
}

type shiftLevel struct{ long, short, outliers decayed }

func newShiftDetector(maxN int, long, short time.Duration, k, minShort, minLong float64) *shiftDetector {
	return &shiftDetector{long: long, short: short, k: k, minShort: minShort, minLong: minLong, maxN: maxN}
}

// add records a sample y at level n; explained says that an outlier
// among them is explained by other work the engine did meanwhile (a gap
// during which a prefill was under way: it held a prefill step), and is
// dropped rather than counted.
func (s *shiftDetector) add(now time.Time, n int, y float64, explained bool) {
	if !finite(y) || y < 0 {
		return
	}
	i := max(1, min(n, s.maxN))
	s.lv = growLevels(s.lv, i, s.maxN)
	l := &s.lv[i]
	if l.long.w > 0 {
		l.long.decayWith(now, s.long, s.memo)
		if y > outlierFactor*l.long.mean() {
			// An outlier (a gap that held a prefill step) says nothing of
			// the regime, and how often they come changes with the cap;
			// but a run of them is a new regime (see check), unless each
			// is explained: a run of gaps that held prefills is an engine
			// prefilling most of the time, not a slower one. (Counted,
			// such a run at cap 8 of scenario 31, prompts of up to 38,000
			// tokens between chat turns, made a shift x3 of the time per
			// token; the step and prefill models scaled by it then refused
			// short prompts the engine served in 10 ms until the end.)
			if !explained {
				l.outliers.addWith(now, s.short, 1, s.memo)
			}
			return
		}
	}
	l.outliers.decayWith(now, s.short, s.memo)
	l.long.addWith(now, s.long, y, s.memo)
	l.short.addWith(now, s.short, y, s.memo)
}

// check returns R at level n and whether it stayed out of band for two
// checks in a row (then the detector clears its short memory).
func (s *shiftDetector) check(now time.Time, n int) (float64, bool) {
	// The cap's level and the one below it (running dips below the cap
	// between a release and the next admission) are pooled.
	// Levels that never got a sample add nothing (they are not stored).
	var short, long, out decayed
	for m := max(1, n-1); m <= min(n, len(s.lv)-1); m++ {
		l := &s.lv[m]
		l.long.decay(now, s.long)
		l.short.decay(now, s.short)
		l.outliers.decay(now, s.short)
		short.w, short.sum = short.w+l.short.w, short.sum+l.short.sum
		long.w, long.sum = long.w+l.long.w, long.sum+l.long.sum
		out.w += l.outliers.w
	}
	if long.w >= s.minLong && out.w >= s.minShort/4 && out.w > short.w {
		// Most recent samples were outliers: a regime at least
		// outlierFactor times slower (whose samples come at most a
		// third as often).
		short.w, short.sum = 1, outlierFactor*long.mean()
	} else if short.w < s.minShort || long.w < s.minLong {
		s.strikes = 0
		return 1, false
	}
	r := short.mean() / long.mean()
	if !(long.mean() > 0) || !finite(r) {
		// Only zero gaps at this level (or nothing measurable): no ratio,
		// no evidence of a shift. (0/0 used to pass as one, and scaled the
		// curve by NaN.)
		s.strikes = 0
		return 1, false
	}
	if r <= s.k && r >= 1/s.k {
		s.strikes = 0
		return r, false
	}
	s.strikes++
	if s.strikes < 2 {
		return r, false
	}
	s.reset()
	return r, true
}

// reset forgets everything: after a shift the long means must be relearnt.
func (s *shiftDetector) reset() {
	clear(s.lv)
	s.strikes = 0
}
