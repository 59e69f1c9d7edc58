package peers

import (
	"math"
	"time"
)

// Gradient2 is Netflix concurrency-limits' Gradient2Limit with its defaults
// (initialLimit 20, minLimit 20, maxConcurrency 200, smoothing 0.2,
// queueSize 4, longWindow 600, rttTolerance 1.5), updated on every sample
// as a SimpleLimiter does:
//
//	long     = EMA of rtt over longWindow (mean of the first 10 samples)
//	if long/rtt > 2: long *= 0.95
//	if inflight < limit/2: no change (application limited)
//	gradient = max(0.5, min(1, tolerance*long/rtt))
//	new      = limit*gradient + queueSize
//	limit    = clamp(limit*(1-smoothing) + new*smoothing, minLimit, maxLimit)
//
// Source: Netflix/concurrency-limits, concurrency-limits-core/.../limit/
// Gradient2Limit.java at commit f2528de (rttTolerance and the 0.95 decay
// came after early 2019, when tolerance was 1 and the decay 0.9).
type Gradient2 struct {
	InitialLimit, MinLimit, MaxLimit int
	Smoothing, QueueSize, Tolerance  float64
	LongWindow                       int

	est   float64
	long  float64
	count int
	sum   float64
}

// NewGradient2 returns Gradient2 with the published defaults
// ("netflix-gradient2").
func NewGradient2() *Gradient2 {
	g := &Gradient2{InitialLimit: 20, MinLimit: 20, MaxLimit: 200, Smoothing: 0.2, QueueSize: 4, Tolerance: 1.5, LongWindow: 600}
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
		g.long *= 0.95
	}
	if float64(inflight) < g.est/2 {
		return
	}
	grad := math.Max(0.5, math.Min(1, g.Tolerance*g.long/short))
	n := g.est*grad + g.QueueSize
	n = g.est*(1-g.Smoothing) + n*g.Smoothing
	g.est = math.Max(float64(g.MinLimit), math.Min(float64(g.MaxLimit), n))
}

// AIMD is Netflix concurrency-limits' AIMDLimit with its defaults
// (initialLimit 20, minLimit 20, maxLimit 200, backoffRatio 0.9, timeout
// 5s):
//
//	if dropped or rtt > timeout: limit = int(limit*backoffRatio)
//	else if inflight*2 >= limit: limit = limit + 1
//	limit = clamp(limit, minLimit, maxLimit)
//
// What counts as dropped is the caller's: the library's listener has
// onDropped for the application to call. [NewAIMDSLO] is the configuration
// that backs off on a missed target.
//
// Source: Netflix/concurrency-limits, concurrency-limits-core/.../limit/
// AIMDLimit.java at commit 784c960 (the floor minLimit 20 and the clamp
// came after early 2019, when the floor was 1 and a backoff took at least
// one off the limit).
type AIMD struct {
	InitialLimit, MinLimit, MaxLimit int
	BackoffRatio                     float64
	Timeout                          time.Duration

	name  string
	limit int
}

// NewAIMD returns AIMD with the published defaults ("netflix-aimd").
func NewAIMD() *AIMD {
	a := &AIMD{InitialLimit: 20, MinLimit: 20, MaxLimit: 200, BackoffRatio: 0.9, Timeout: 5 * time.Second, name: "netflix-aimd"}
	a.limit = a.InitialLimit
	return a
}

// NewAIMDSLO returns AIMD as a user in front of an LLM engine would set
// it ("netflix-aimd-slo"): the caller reports a request that missed its
// latency targets as dropped, the timeout is an hour (the library needs a
// positive one; no stream lasts that long, so only the targets back off),
// and the floor is 1 (the default floor of 20 is above the knee of most
// engines); the rest as published.
func NewAIMDSLO() *AIMD {
	a := NewAIMD()
	a.name, a.MinLimit, a.Timeout = "netflix-aimd-slo", 1, time.Hour
	return a
}

func (a *AIMD) Name() string   { return a.name }
func (a *AIMD) Tick(time.Time) {}
func (a *AIMD) Limit() int     { return a.limit }

func (a *AIMD) Sample(_ time.Time, rtt time.Duration, inflight int, dropped bool) {
	l := a.limit
	switch {
	case dropped || rtt > a.Timeout:
		l = int(float64(l) * a.BackoffRatio)
	case inflight*2 >= l:
		l++
	}
	a.limit = max(a.MinLimit, min(a.MaxLimit, l))
}
