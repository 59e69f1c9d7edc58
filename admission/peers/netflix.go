package peers

import (
	"math"
	"time"
)

// Gradient2 is Netflix concurrency-limits' Gradient2Limit with its defaults
// (initialLimit 20, minLimit 20, maxConcurrency 200, smoothing 0.2,
// queueSize 4, longWindow 600), updated on every sample as a SimpleLimiter
// does:
//
//	long     = EMA of rtt over longWindow (mean of the first 10 samples)
//	if long/rtt > 2: long *= 0.9
//	if inflight < limit/2: no change (application limited)
//	gradient = max(0.5, min(1, long/rtt))
//	new      = limit*gradient + queueSize
//	limit    = clamp(limit*(1-smoothing) + new*smoothing, minLimit, maxLimit)
//
// Source: concurrency-limits-core/.../limit/Gradient2Limit.java.
type Gradient2 struct {
	InitialLimit, MinLimit, MaxLimit int
	Smoothing, QueueSize             float64
	LongWindow                       int

	est   float64
	long  float64
	count int
	sum   float64
}

// NewGradient2 returns Gradient2 with the published defaults.
func NewGradient2() *Gradient2 {
	g := &Gradient2{InitialLimit: 20, MinLimit: 20, MaxLimit: 200, Smoothing: 0.2, QueueSize: 4, LongWindow: 600}
	g.est = float64(g.InitialLimit)
	return g
}

func (g *Gradient2) Name() string   { return "netflix-gradient2" }
func (g *Gradient2) Tick(time.Time) {}
func (g *Gradient2) Limit() int     { return int(g.est) }

func (g *Gradient2) Sample(_ time.Time, rtt time.Duration, inflight int, _ bool) {
	short := float64(rtt)
	if g.count < 10 { // warm-up window of ExpAvgMeasurement
		g.count++
		g.sum += short
		g.long = g.sum / float64(g.count)
	} else {
		f := 2 / float64(g.LongWindow+1)
		g.long = g.long*(1-f) + short*f
	}
	if short <= 0 {
		return
	}
	if g.long/short > 2 {
		g.long *= 0.9
	}
	if float64(inflight) < g.est/2 {
		return
	}
	grad := math.Max(0.5, math.Min(1, g.long/short))
	n := g.est*grad + g.QueueSize
	n = g.est*(1-g.Smoothing) + n*g.Smoothing
	g.est = math.Max(float64(g.MinLimit), math.Min(float64(g.MaxLimit), n))
}

// AIMD is Netflix concurrency-limits' AIMDLimit with its defaults
// (initialLimit 10, backoffRatio 0.9, timeout 5s):
//
//	if dropped or rtt > timeout: limit = max(1, min(limit-1, int(limit*0.9)))
//	else if inflight*2 >= limit: limit = limit + 1
//
// Source: concurrency-limits-core/.../limit/AIMDLimit.java. Its upper bound
// is the caller's (MaxLimit, default 200 like the library's limiters).
type AIMD struct {
	BackoffRatio float64
	Timeout      time.Duration
	MaxLimit     int
	limit        int
}

// NewAIMD returns AIMD with the published defaults.
func NewAIMD() *AIMD {
	return &AIMD{BackoffRatio: 0.9, Timeout: 5 * time.Second, MaxLimit: 200, limit: 10}
}

func (a *AIMD) Name() string   { return "netflix-aimd" }
func (a *AIMD) Tick(time.Time) {}
func (a *AIMD) Limit() int     { return a.limit }

func (a *AIMD) Sample(_ time.Time, rtt time.Duration, inflight int, dropped bool) {
	switch {
	case dropped || rtt > a.Timeout:
		a.limit = max(1, min(a.limit-1, int(float64(a.limit)*a.BackoffRatio)))
	case inflight*2 >= a.limit:
		a.limit = min(a.limit+1, a.MaxLimit)
	}
}
