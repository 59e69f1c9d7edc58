package control

import (
	"slices"
	"time"
)

// ratioRing keeps the most recent observations of one latency divided by
// what the mean model predicted for it at its own running count,
//
//	r_i = y_i / y(n_i).
//
// Its quantiles carry the spread around the mean (prefill stalls, arrival
// phase, uneven output) that the mean model leaves out, measured rather than
// assumed: the predicted P-quantile at n is Q_P(r) * y(n). Entries older than
// maxAge are ignored.
type ratioRing struct{ timedRing[ratioEntry] }

type ratioEntry struct {
	t time.Time
	r float64
}

func (e ratioEntry) at() time.Time { return e.t }

func newRatioRing(size int, maxAge time.Duration) *ratioRing {
	return &ratioRing{newTimedRing[ratioEntry](size, maxAge)}
}

// add records r; a NaN or infinite one (a ratio to a zero model) is
// dropped.
func (q *ratioRing) add(now time.Time, r float64) {
	if finite(r) {
		q.push(ratioEntry{now, r})
	}
}

// values returns the live entries, sorted.
func (q *ratioRing) values(now time.Time) []float64 {
	live := q.live(now)
	out := make([]float64, len(live))
	for i, e := range live {
		out[i] = e.r
	}
	slices.Sort(out)
	return out
}

// quantile returns the p-quantile of sorted values (nearest rank), or def
// when there are fewer than minN of them; with few values it is pulled
// towards def: (k*Q + (minN2-k)*def)/minN2 for k < minN2 values.
func quantile(sorted []float64, p, def float64, minN, minN2 int) float64 {
	k := len(sorted)
	if k < minN {
		return def
	}
	i := int(p*float64(k)+0.5) - 1
	i = max(0, min(i, k-1))
	q := sorted[i]
	if k < minN2 {
		return (float64(k)*q + float64(minN2-k)*def) / float64(minN2)
	}
	return q
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}
