package slo

import (
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"
)

// sketchAccuracy is the relative accuracy of every quantile: a reported
// P99 is within 1 % of a value of the true distribution.
const sketchAccuracy = 0.01

// sketchBins bounds each sketch's memory (2048 bins cover 1 us to hours at
// 1 %); beyond that the lowest bins collapse, which keeps the high
// percentiles exact to the stated accuracy.
const sketchBins = 2048

// buckets is how many time buckets a window is cut into. Statistics cover
// the last Window of time to within one bucket (1/12 of it).
const buckets = 12

// Quantiles summarizes one latency distribution.
type Quantiles struct {
	P50, P90, P99 time.Duration
	Mean          time.Duration
	Count         int
}

// Stats is a snapshot of a Window.
type Stats struct {
	// Span is the wall time the snapshot covers: the window, or less while
	// the window has not been running that long.
	Span time.Duration
	// Requests counts requests that ended in the span, by class.
	Requests, Good, Missed, Rejected, EngineErrors, Cancelled, Invalid int
	// OutputTokens sums the output tokens of completed requests.
	OutputTokens int
	// Goodput is good completions per second of Span.
	Goodput float64
	// Attainment is the good share of judged requests (good, missed,
	// rejected and engine errors; cancelled and invalid ones are left
	// out), or 0 when there were none (see Judged).
	Attainment float64
	// Judged is the denominator of Attainment.
	Judged int
	// RejectionRate is rejections per second of Span.
	RejectionRate float64
	// Throughput is output tokens per second of Span.
	Throughput float64
	// Latency distributions. TTFT is the client's; EngineTTFT runs from
	// forwarding. ITL pools every gap between output chunks.
	TTFT, EngineTTFT, TPOT, ITL, E2E, QueueWait Quantiles
}

// dist indexes the distributions a bucket keeps.
type dist int

const (
	dTTFT dist = iota
	dEngineTTFT
	dTPOT
	dITL
	dE2E
	dQueueWait
	nDist
)

type bucket struct {
	epoch    int64 // which bucket-width interval since origin; -1 = empty
	sketches [nDist]*ddsketch.DDSketch
	counts   struct {
		requests, good, missed, rejected, engineErrors, cancelled, invalid, tokens int
	}
}

// Window keeps statistics over a sliding window of time. Create one with
// NewWindow; it is safe for concurrent use.
type Window struct {
	width  time.Duration // bucket width
	origin time.Time

	mu      sync.Mutex
	buckets [buckets]bucket

	// itl holds the ITL gaps in shards of their own, each with its own
	// lock: one gap per output chunk of every stream would otherwise
	// serialize every relay on mu.
	itl [itlShards]itlShard
}

const itlShards = 16

type itlShard struct {
	mu     sync.Mutex
	epochs [buckets]int64
	sk     [buckets]*ddsketch.DDSketch
	_      [64]byte // keep shards on separate cache lines
}

func newSketch() *ddsketch.DDSketch {
	s, err := ddsketch.LogCollapsingLowestDenseDDSketch(sketchAccuracy, sketchBins)
	if err != nil {
		panic(err) // only for an invalid accuracy constant
	}
	return s
}

// NewWindow returns a window of the given length (at least one second of
// bucket resolution is not required; any positive length works) whose time
// starts at origin.
func NewWindow(length time.Duration, origin time.Time) *Window {
	if length <= 0 {
		length = time.Minute
	}
	w := &Window{width: max(length/buckets, 1), origin: origin}
	for i := range w.itl {
		for j := range w.itl[i].sk {
			w.itl[i].epochs[j] = -1
			w.itl[i].sk[j] = newSketch()
		}
	}
	for i := range w.buckets {
		w.buckets[i].epoch = -1
		for d := range w.buckets[i].sketches {
			w.buckets[i].sketches[d] = newSketch()
		}
	}
	return w
}

// Length returns the window's length.
func (w *Window) Length() time.Duration { return w.width * buckets }

func (w *Window) epoch(now time.Time) int64 {
	d := now.Sub(w.origin)
	if d < 0 {
		return 0
	}
	return int64(d / w.width)
}

// bucketLocked returns the bucket for now, cleared if it held an older
// interval.
func (w *Window) bucketLocked(now time.Time) *bucket {
	e := w.epoch(now)
	b := &w.buckets[e%buckets]
	if b.epoch != e {
		for _, s := range b.sketches {
			s.Clear()
		}
		b.counts = struct {
			requests, good, missed, rejected, engineErrors, cancelled, invalid, tokens int
		}{}
		b.epoch = e
	}
	return b
}

func seconds(d time.Duration) float64 { return max(d.Seconds(), 0) }

// AddITL records one gap between successive output chunks, whose chunk
// arrived at now.
func (w *Window) AddITL(now time.Time, gap time.Duration) {
	sh := w.itlShard()
	sh.addLocked(w.epoch(now), gap)
	sh.mu.Unlock()
}

// AddITLs records n gaps at once (a stream's, in batches): gap(i) is the
// i-th and when its chunk arrived. It takes one shard's lock for all of
// them, and each goes to the bucket of its own arrival, as with AddITL.
func (w *Window) AddITLs(n int, gap func(i int) (at time.Time, d time.Duration)) {
	if n <= 0 {
		return
	}
	sh := w.itlShard()
	for i := range n {
		at, d := gap(i)
		sh.addLocked(w.epoch(at), d)
	}
	sh.mu.Unlock()
}

// itlShard returns an ITL shard, locked. It takes the first free shard
// from a random one, and waits only when all are held at that instant: a
// holder that the OS deschedules then delays no stream.
func (w *Window) itlShard() *itlShard {
	start := rand.Uint32()
	for i := range uint32(itlShards) {
		if c := &w.itl[(start+i)%itlShards]; c.mu.TryLock() {
			return c
		}
	}
	sh := &w.itl[start%itlShards]
	sh.mu.Lock()
	return sh
}

// addLocked adds a gap to the sketch of epoch e.
func (sh *itlShard) addLocked(e int64, gap time.Duration) {
	i := e % buckets
	if sh.epochs[i] != e {
		sh.sk[i].Clear()
		sh.epochs[i] = e
	}
	_ = sh.sk[i].Add(seconds(gap))
}

// Add records a finished request. Its ITL gaps are not in the record; they
// come through AddITL or AddITLs.
func (w *Window) Add(now time.Time, r *Record) {
	tpot, hasTPOT := r.TPOT()
	w.mu.Lock()
	defer w.mu.Unlock()
	b := w.bucketLocked(now)
	c := &b.counts
	c.requests++
	switch o := r.Outcome; {
	case o.Good():
		c.good++
	case o.Missed():
		c.missed++
	case o.Has(Rejected):
		c.rejected++
	case o.Has(EngineError):
		c.engineErrors++
	case o.Has(ClientCancelled):
		c.cancelled++
	default:
		c.invalid++
	}
	if r.Outcome.Has(Rejected) || r.Outcome.Has(InvalidRequest) {
		return // never forwarded: no latencies
	}
	_ = b.sketches[dQueueWait].Add(seconds(r.QueueWait))
	if !r.Outcome.Completed() {
		return
	}
	c.tokens += r.OutputTokens
	_ = b.sketches[dE2E].Add(seconds(r.E2E))
	if r.FirstObserved() {
		_ = b.sketches[dTTFT].Add(seconds(r.TTFT))
		_ = b.sketches[dEngineTTFT].Add(seconds(r.EngineTTFT))
	}
	if hasTPOT {
		_ = b.sketches[dTPOT].Add(seconds(tpot))
	}
}

// Stats returns the statistics of the window ending at now.
func (w *Window) Stats(now time.Time) Stats {
	var merged [nDist]*ddsketch.DDSketch
	for d := range merged {
		merged[d] = newSketch()
	}
	var s Stats
	cur := w.epoch(now)
	oldest := cur - buckets + 1
	w.mu.Lock()
	for i := range w.buckets {
		b := &w.buckets[i]
		if b.epoch < oldest || b.epoch > cur || b.epoch < 0 {
			continue
		}
		c := b.counts
		s.Requests += c.requests
		s.Good += c.good
		s.Missed += c.missed
		s.Rejected += c.rejected
		s.EngineErrors += c.engineErrors
		s.Cancelled += c.cancelled
		s.Invalid += c.invalid
		s.OutputTokens += c.tokens
		for d, sk := range b.sketches {
			_ = merged[d].MergeWith(sk)
		}
	}
	w.mu.Unlock()
	for i := range w.itl {
		sh := &w.itl[i]
		sh.mu.Lock()
		for j, e := range sh.epochs {
			if e >= oldest && e <= cur && e >= 0 {
				_ = merged[dITL].MergeWith(sh.sk[j])
			}
		}
		sh.mu.Unlock()
	}

	start := w.origin.Add(time.Duration(max(oldest, 0)) * w.width)
	s.Span = max(now.Sub(start), time.Second) // no rate spikes in the first instants
	sec := s.Span.Seconds()
	s.Goodput = float64(s.Good) / sec
	s.RejectionRate = float64(s.Rejected) / sec
	s.Throughput = float64(s.OutputTokens) / sec
	s.Judged = s.Good + s.Missed + s.Rejected + s.EngineErrors
	if s.Judged > 0 {
		s.Attainment = float64(s.Good) / float64(s.Judged)
	}
	s.TTFT = quantiles(merged[dTTFT])
	s.EngineTTFT = quantiles(merged[dEngineTTFT])
	s.TPOT = quantiles(merged[dTPOT])
	s.ITL = quantiles(merged[dITL])
	s.E2E = quantiles(merged[dE2E])
	s.QueueWait = quantiles(merged[dQueueWait])
	return s
}

func quantiles(sk *ddsketch.DDSketch) Quantiles {
	n := sk.GetCount()
	if n == 0 {
		return Quantiles{}
	}
	vs, err := sk.GetValuesAtQuantiles([]float64{0.5, 0.9, 0.99})
	if err != nil {
		return Quantiles{Count: int(n)}
	}
	return Quantiles{
		P50: dur(vs[0]), P90: dur(vs[1]), P99: dur(vs[2]),
		Mean:  dur(sk.GetSum() / n),
		Count: int(math.Round(n)),
	}
}

func dur(sec float64) time.Duration { return time.Duration(math.Round(sec * 1e9)) }
