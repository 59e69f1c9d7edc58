package control

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// sample is one observation at a running count.
type sample struct {
	t time.Time
	n int
	y float64
}

func (s sample) at() time.Time { return s.t }

// localSpan returns the levels at which localQuantile can find a sample:
// within localReach of the lowest and highest level sampled. With no
// samples the span is empty (lo > hi).
func localSpan(samples []sample) (lo, hi int) {
	if len(samples) == 0 {
		return 1, 0
	}
	lo, hi = samples[0].n, samples[0].n
	for _, s := range samples[1:] {
		lo, hi = min(lo, s.n), max(hi, s.n)
	}
	return lo - localReach, hi + localReach
}

// localQuantile estimates the p-quantile of a latency at running count n
// from samples taken at nearby counts. Each sample is moved to n along the
// mean curve, y_i + mean(n) - mean(n_i), and weighted by its recency and
// its distance in running count,
//
//	w_i = exp(-age_i/tau) * exp(-|n - n_i| / h),  h = 1,
//
// so a level's own samples dominate its estimate (its spread, which grows
// with n as prefills collide more often, is its own) while levels without
// samples borrow from their neighbours. The quantile interpolates the
// weighted empirical distribution, so it moves smoothly as samples come and
// go instead of jumping between the modes of a two-humped distribution.
// It returns false with no samples.
func localQuantile(samples []sample, n int, p float64, now time.Time, tau time.Duration, meanAt func(float64) float64, buf []wsample) (float64, bool) {
	buf, total := localWeights(samples, n, now, tau, meanAt, buf)
	if total == 0 {
		return 0, false
	}
	return weightedQuantile(buf, total, p), true
}

// localWeights moves the samples to level n and weighs them as
// localQuantile does, sorted by value, with their total weight (0: none
// weighs anything). Several quantiles at one level can share one call.
func localWeights(samples []sample, n int, now time.Time, tau time.Duration, meanAt func(float64) float64, buf []wsample) ([]wsample, float64) {
	if len(samples) == 0 {
		return buf[:0], 0
	}
	buf = buf[:0]
	total := 0.0
	mn := meanAt(float64(n))
	for _, s := range samples {
		w := math.Exp(-float64(now.Sub(s.t))/float64(tau) - math.Abs(float64(n-s.n)))
		if w < 1e-12 {
			continue
		}
		buf = append(buf, wsample{s.y + mn - meanAt(float64(s.n)), w})
		total += w
	}
	if total == 0 {
		return buf, 0
	}
	slices.SortFunc(buf, func(a, b wsample) int { return cmp.Compare(a.y, b.y) })
	return buf, total
}

// weightedQuantile is the p-quantile of sorted weighted values with total
// weight total > 0.
func weightedQuantile(buf []wsample, total, p float64) float64 {
	// Each sample sits at the middle of its weight: F(y_i) = (cum_i - w_i/2)/total.
	target, cum := p*total, 0.0
	prevY, prevF := buf[0].y, 0.0
	for i, s := range buf {
		f := cum + s.w/2
		if f >= target {
			if i == 0 {
				return s.y
			}
			return prevY + (s.y-prevY)*(target-prevF)/(f-prevF)
		}
		cum += s.w
		prevY, prevF = s.y, f
	}
	return buf[len(buf)-1].y
}

// wsample is a weighted value.
type wsample struct{ y, w float64 }

// sampleRing keeps the last samples of one latency with their levels.
type sampleRing struct{ timedRing[sample] }

func newSampleRing(size int, maxAge time.Duration) *sampleRing {
	return &sampleRing{newTimedRing[sample](size, maxAge)}
}

// add records s; one whose value is NaN or infinite is dropped.
func (r *sampleRing) add(s sample) {
	if finite(s.y) {
		r.push(s)
	}
}
