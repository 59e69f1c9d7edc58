package peers

import (
	"math"
	"slices"
	"time"
)

// Envoy is the gradient controller of Envoy's adaptive concurrency filter
// with its defaults (sample_aggregate_percentile 50, buffer 25 %,
// min_concurrency 3, request_count 50, jitter 15 %, max_concurrency_limit
// 1000) and, for the two required fields, the values of Envoy's example
// configuration (concurrency_update_interval 100ms, min RTT interval 60s).
//
//	minRTT    = P50 of the first request_count latencies of requests sent
//	            while the limit is pinned at min_concurrency; repeated every
//	            interval (plus jitter), and after the limit sat at
//	            min_concurrency for 5 windows
//	sampleRTT = P50 of the latencies of one update interval (no samples:
//	            no update)
//	gradient  = clamp((minRTT + buffer*minRTT) / sampleRTT, 0.5, 2)
//	limit     = clamp(limit*gradient + sqrt(limit*gradient), min_concurrency, max)
//
// With FixedMinRTT set it is Envoy's pinned-gradient controller instead
// (see [NewEnvoyPinned]): minRTT is that value, never measured, so there
// is no min RTT window and the limit never drops to min_concurrency to
// measure it.
//
// Source: envoyproxy/envoy, source/extensions/filters/http/
// adaptive_concurrency/controller/gradient_controller.cc at commit c35f67f
// (defaults, jitter 15 % as in api/.../v3/adaptive_concurrency.proto at
// 149521d) and pinned_gradient_controller.cc at 0df1247. Jitter comes from
// a fixed-seed generator so runs repeat.
type Envoy struct {
	Percentile   float64
	Buffer       float64
	MinConc      int
	RequestCount int
	Jitter       float64
	MaxLimit     int
	Update       time.Duration
	Interval     time.Duration
	// FixedMinRTT, when positive, pins minRTT (the pinned-gradient
	// controller).
	FixedMinRTT time.Duration

	name        string
	limit       int
	deferred    int
	inMinRTT    bool
	epoch       time.Time
	minRTT      time.Duration
	samples     []time.Duration
	nextWindow  time.Time
	nextMinRTT  time.Time
	consecMin   int
	rng         uint64
	initialized bool
}

// NewEnvoy returns the gradient controller with the published defaults
// ("envoy-gradient").
func NewEnvoy() *Envoy {
	return &Envoy{Percentile: 0.5, Buffer: 0.25, MinConc: 3, RequestCount: 50, Jitter: 0.15,
		MaxLimit: 1000, Update: 100 * time.Millisecond, Interval: time.Minute,
		name: "envoy-gradient", limit: 3, rng: 0x9e3779b97f4a7c15}
}

// NewEnvoyPinned returns Envoy's pinned-gradient controller
// ("envoy-pinned") as a careful user in front of an LLM engine would set
// it: minRTT fixed at minRTT (the whole-request latency a request may take
// and still meet its targets), no buffer (the pinned controller leaves the
// padding to the pinned value), and the limit recalculated once per pinned
// RTT instead of every 100 ms (concurrency_update_interval has no default;
// with 100 ms windows against streams of seconds a window holds one
// sample or none, and the limit moves on each); the rest as the gradient
// controller's defaults. The limit starts at min_concurrency.
func NewEnvoyPinned(minRTT time.Duration) *Envoy {
	e := NewEnvoy()
	e.name, e.Buffer, e.FixedMinRTT, e.Update = "envoy-pinned", 0, minRTT, minRTT
	return e
}

func (e *Envoy) Name() string { return e.name }
func (e *Envoy) Limit() int   { return e.limit }

func (e *Envoy) enterMinRTT(now time.Time) {
	if e.inMinRTT {
		return
	}
	e.inMinRTT = true
	e.deferred = e.limit
	e.setLimit(e.MinConc)
	e.samples = e.samples[:0]
	e.epoch = now
}

func (e *Envoy) jitter() time.Duration {
	e.rng ^= e.rng << 13
	e.rng ^= e.rng >> 7
	e.rng ^= e.rng << 17
	r := time.Duration(math.Ceil(float64(e.Interval) * e.Jitter))
	if r <= 0 {
		return 0
	}
	return time.Duration(e.rng % uint64(r))
}

func (e *Envoy) aggregate() time.Duration {
	slices.Sort(e.samples)
	i := int(e.Percentile*float64(len(e.samples)-1) + 0.5)
	v := e.samples[i]
	e.samples = e.samples[:0]
	return v
}

func (e *Envoy) setLimit(n int) {
	old := e.limit
	e.limit = n
	if !e.inMinRTT && old == e.MinConc && n == e.MinConc {
		e.consecMin++
	} else {
		e.consecMin = 0
	}
	if e.consecMin >= 5 {
		e.nextMinRTT = time.Time{} // due now
	}
}

// Tick runs the timers: the sample window every Update, and the min RTT
// window every Interval plus jitter.
func (e *Envoy) Tick(now time.Time) {
	if !e.initialized {
		e.initialized = true
		e.nextWindow = now.Add(e.Update)
		if e.FixedMinRTT > 0 {
			e.minRTT, e.epoch = e.FixedMinRTT, now
		} else {
			e.enterMinRTT(now)
		}
		return
	}
	if e.FixedMinRTT <= 0 && !e.inMinRTT && !now.Before(e.nextMinRTT) {
		e.enterMinRTT(now)
		return
	}
	if e.inMinRTT || now.Before(e.nextWindow) {
		return
	}
	e.nextWindow = now.Add(e.Update)
	if len(e.samples) == 0 {
		return
	}
	sample := e.aggregate()
	if sample <= 0 {
		return
	}
	buffered := float64(e.minRTT) * (1 + e.Buffer)
	g := math.Max(0.5, math.Min(2, buffered/float64(sample)))
	l := float64(e.limit) * g
	n := int(l + math.Sqrt(l))
	e.setLimit(max(e.MinConc, min(e.MaxLimit, n)))
}

// Sample records a finished request's latency; requests sent before the
// current min RTT window began are ignored, as in Envoy.
func (e *Envoy) Sample(now time.Time, rtt time.Duration, _ int, _ bool) {
	if now.Add(-rtt).Before(e.epoch) {
		return
	}
	e.samples = append(e.samples, rtt)
	if e.inMinRTT && len(e.samples) >= e.RequestCount {
		e.minRTT = e.aggregate()
		e.inMinRTT = false
		e.setLimit(e.deferred)
		e.nextMinRTT = now.Add(e.Interval + e.jitter())
		e.nextWindow = now.Add(e.Update)
	}
}
