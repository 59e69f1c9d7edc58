package gateway

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// itlHistogram is kneecap_itl_seconds: the histogram that
// prometheus.NewHistogram makes of the same options (classic buckets,
// native buckets at the schema of the bucket factor, the bound on their
// number: a reset once NativeHistogramMinResetDuration has passed, else
// buckets twice as wide), fed a stream's gaps in batches (add, from a
// proxy.GapObserver) under one lock, where the library's takes several
// atomic operations and a sync.Map lookup per gap, every output chunk of
// every stream. TestITLHistogramAsPrometheus holds the two to the same
// exposition. It supports the options metrics.go gives it: a bucket factor
// of schema 3 or coarser, no widening of the zero bucket.
type itlHistogram struct {
	desc          *prometheus.Desc
	upper         []float64 // classic upper bounds, without +Inf
	maxBuckets    int       // native buckets at most (0: no bound)
	minReset      time.Duration
	zeroThreshold float64 // the native zero bucket's half width
	schema0       int32
	now           func() time.Time

	mu        sync.Mutex
	classic   []uint64 // per upper bound (not cumulative)
	count     uint64
	sum       float64
	schema    int32
	zero      uint64
	pos, neg  nativeBuckets
	lastReset time.Time // the histogram's start, or its last reset
	resetAt   time.Time // a reset is due then (zero: none is)
}

// nativeBuckets counts the native buckets of one sign by key: in a slice
// over the keys the values have come in (a few dozen: an increment
// without a map lookup), and in a map beyond it (a slice as wide as all
// keys would be large).
type nativeBuckets struct {
	base   int     // the key of dense[0]
	dense  []int64 // counts from key base on
	sparse map[int]int64
	n      int // buckets with a count
}

// maxDense bounds the keys the slice spans (8 KiB).
const maxDense = 1024

func (b *nativeBuckets) inc(k int) {
	if i := k - b.base; uint(i) < uint(len(b.dense)) {
		if b.dense[i] == 0 {
			b.n++
		}
		b.dense[i]++
		return
	}
	b.add(k, 1)
}

// add adds c to key k's count, widening the slice to k if it stays within
// maxDense.
func (b *nativeBuckets) add(k int, c int64) {
	if len(b.dense) == 0 {
		b.base, b.dense = k, make([]int64, 1, 16)
	}
	lo, hi := min(b.base, k), max(b.base+len(b.dense), k+1)
	switch {
	case k >= b.base && k < b.base+len(b.dense):
	case hi-lo <= maxDense && k < b.base:
		d := make([]int64, hi-lo, max(hi-lo, 2*len(b.dense)))
		copy(d[b.base-lo:], b.dense)
		b.base, b.dense = lo, d
	case hi-lo <= maxDense:
		b.dense = append(b.dense, make([]int64, hi-b.base-len(b.dense))...)
	default:
		if b.sparse == nil {
			b.sparse = map[int]int64{}
		}
		if b.sparse[k] == 0 {
			b.n++
		}
		b.sparse[k] += c
		return
	}
	if b.dense[k-b.base] == 0 {
		b.n++
	}
	b.dense[k-b.base] += c
}

// counts returns the buckets with a count, by key.
func (b *nativeBuckets) counts() map[int]int64 {
	m := make(map[int]int64, b.n)
	for i, c := range b.dense {
		if c != 0 {
			m[b.base+i] = c
		}
	}
	for k, c := range b.sparse {
		m[k] = c
	}
	return m
}

var _ prometheus.Collector = (*itlHistogram)(nil)

// nativeBounds are the bucket bounds of a fraction in [0.5, 1) per schema
// 0-3, as prometheus's histogram has them.
var nativeBounds = [...][]float64{
	{0.5},
	{0.5, 0.7071067811865475},
	{0.5, 0.5946035575013605, 0.7071067811865475, 0.8408964152537144},
	{
		0.5, 0.5452538663326288, 0.5946035575013605, 0.6484197773255048,
		0.7071067811865475, 0.7711054127039704, 0.8408964152537144, 0.9170040432046711,
	},
}

// newITLHistogram returns the histogram of opts (see itlHistogram for the
// options it supports).
func newITLHistogram(opts prometheus.HistogramOpts) (*itlHistogram, error) {
	if opts.NativeHistogramBucketFactor <= 1 || opts.NativeHistogramMaxZeroThreshold != 0 ||
		opts.NativeHistogramZeroThreshold != 0 || opts.Namespace != "" || opts.Subsystem != "" ||
		len(opts.ConstLabels) != 0 || opts.Unit != "" || len(opts.Buckets) == 0 || math.IsInf(opts.Buckets[len(opts.Buckets)-1], 1) {
		return nil, fmt.Errorf("itl histogram: unsupported options")
	}
	for i := 1; i < len(opts.Buckets); i++ {
		if opts.Buckets[i] <= opts.Buckets[i-1] {
			return nil, fmt.Errorf("itl histogram: buckets not increasing")
		}
	}
	// prometheus's pickSchema: the largest n with 2^(2^-n) <= the factor.
	schema := int32(-math.Floor(math.Log2(math.Log2(opts.NativeHistogramBucketFactor))))
	schema = max(min(schema, 8), -4)
	if schema >= int32(len(nativeBounds)) {
		return nil, fmt.Errorf("itl histogram: bucket factor %g is finer than schema %d", opts.NativeHistogramBucketFactor, len(nativeBounds)-1)
	}
	h := &itlHistogram{
		desc:          prometheus.NewDesc(opts.Name, opts.Help, nil, nil),
		upper:         append([]float64(nil), opts.Buckets...),
		maxBuckets:    int(opts.NativeHistogramMaxBucketNumber),
		minReset:      opts.NativeHistogramMinResetDuration,
		zeroThreshold: prometheus.DefNativeHistogramZeroThreshold,
		schema0:       schema,
		now:           time.Now,
	}
	h.resetLocked(h.now())
	return h, nil
}

// resetLocked empties the histogram, as of now.
func (h *itlHistogram) resetLocked(now time.Time) {
	h.classic = make([]uint64, len(h.upper))
	h.count, h.sum, h.zero = 0, 0, 0
	h.schema = h.schema0
	h.pos, h.neg = nativeBuckets{}, nativeBuckets{}
	h.lastReset, h.resetAt = now, time.Time{}
}

// add observes the n values v(i), in order, under one lock.
func (h *itlHistogram) add(n int, v func(i int) float64) {
	if n <= 0 {
		return
	}
	h.mu.Lock()
	h.dueResetLocked()
	for i := range n {
		x := v(i)
		h.observeLocked(x)
		if h.maxBuckets > 0 && h.pos.n+h.neg.n > h.maxBuckets {
			h.limitLocked(x)
		}
	}
	h.mu.Unlock()
}

// observeLocked counts x (finite).
func (h *itlHistogram) observeLocked(x float64) {
	i := search(h.upper, x)
	if i < len(h.upper) {
		h.classic[i]++
	}
	h.sum += x
	h.count++
	switch {
	case x > h.zeroThreshold:
		h.pos.inc(h.key(x))
	case x < -h.zeroThreshold:
		h.neg.inc(h.key(x))
	default:
		h.zero++
	}
}

// search is sort.SearchFloat64s(a, x), the index of the first of a that
// is not below x, without a call per step.
func search(a []float64, x float64) int {
	lo, hi := 0, len(a)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if a[m] < x {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// key is x's native bucket at the current schema (prometheus's formula).
func (h *itlHistogram) key(x float64) int {
	frac, exp := math.Frexp(math.Abs(x))
	if h.schema > 0 {
		b := nativeBounds[h.schema]
		return search(b, frac) + (exp-1)*len(b)
	}
	k := exp
	if frac == 0.5 {
		k--
	}
	offset := (1 << -h.schema) - 1
	return (k + offset) >> -h.schema
}

// limitLocked bounds the native buckets once x left too many, as
// prometheus's histogram does: a reset (keeping x) once minReset has
// passed since the last one; else a reset scheduled for then, and buckets
// twice as wide (one schema lower) meanwhile.
func (h *itlHistogram) limitLocked(x float64) {
	if h.minReset > 0 && h.resetAt.IsZero() {
		if now := h.now(); now.Sub(h.lastReset) >= h.minReset {
			h.resetLocked(now)
			h.observeLocked(x)
			return
		}
		h.resetAt = h.lastReset.Add(h.minReset)
	}
	if h.schema == -4 {
		return
	}
	h.schema--
	h.pos, h.neg = h.pos.wider(), h.neg.wider()
}

// wider merges buckets pairwise into those of the next lower schema.
func (b *nativeBuckets) wider() nativeBuckets {
	var w nativeBuckets
	for k, n := range b.counts() {
		if k > 0 {
			k++
		}
		w.add(k/2, n)
	}
	return w
}

// dueResetLocked carries out a scheduled reset whose time has come
// (prometheus's runs from a timer at that time).
func (h *itlHistogram) dueResetLocked() {
	if !h.resetAt.IsZero() && !h.now().Before(h.resetAt) {
		h.resetLocked(h.resetAt)
	}
}

// Describe implements prometheus.Collector.
func (h *itlHistogram) Describe(ch chan<- *prometheus.Desc) { ch <- h.desc }

// Collect implements prometheus.Collector.
func (h *itlHistogram) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	h.dueResetLocked()
	native, err := prometheus.NewConstNativeHistogram(h.desc, h.count, h.sum, h.pos.counts(), h.neg.counts(), h.zero,
		h.schema, h.zeroThreshold, h.lastReset)
	var m dto.Metric
	if err == nil {
		err = native.Write(&m)
	}
	if err != nil {
		h.mu.Unlock()
		ch <- prometheus.NewInvalidMetric(h.desc, err)
		return
	}
	buckets := make([]*dto.Bucket, len(h.upper))
	var cum uint64
	for i, u := range h.upper {
		cum += h.classic[i]
		buckets[i] = &dto.Bucket{CumulativeCount: new(cum), UpperBound: new(u)}
	}
	h.mu.Unlock()
	m.Histogram.Bucket = buckets
	ch <- histogramMetric{desc: h.desc, h: m.Histogram}
}

// histogramMetric is one collected histogram.
type histogramMetric struct {
	desc *prometheus.Desc
	h    *dto.Histogram
}

func (m histogramMetric) Desc() *prometheus.Desc { return m.desc }

func (m histogramMetric) Write(out *dto.Metric) error {
	out.Histogram = m.h
	return nil
}
