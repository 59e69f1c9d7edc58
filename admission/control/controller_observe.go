package control

import (
	"math"
	"time"

	"github.com/kneecap/kneecap/slo"
)

// ObserveFirst records a first output chunk: engine TTFT with the number of
// requests running on the engine at that moment.
// A negative engineTTFT (a clock that went backwards) is dropped.
func (c *Controller) ObserveFirst(now time.Time, running int, engineTTFT time.Duration) {
	c.keepPromise(now) // a request took a slot, whatever its latency
	if engineTTFT < 0 {
		return
	}
	y := engineTTFT.Seconds()
	c.ttftShift.add(now, running, y, false)
	c.ttft.add(now, running, y)
	if now.Add(-engineTTFT).Before(c.shiftAt) {
		return // began before a shift: neither regime
	}
	c.ttftSamples.add(sample{now, c.ttft.clampN(running), y})
	if c.ttft.ok {
		c.ttftR.add(now, ratio(y, c.ttft.at(float64(running))))
	}
}

// ratio is y/m, or NaN (which every ring drops) when m is not positive.
func ratio(y, m float64) float64 {
	if !(m > 0) {
		return math.NaN()
	}
	return y / m
}

// finite reports whether x is neither NaN nor infinite.
func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// ObserveGap records the gap between two output chunks of one stream with
// the number of requests running then; prefill says whether a prefill was
// under way at some moment of it (admission.Limiter.PrefillDuring), which
// explains a gap that held a prefill step: such an outlier is no evidence
// of a slower engine (see shiftDetector.add).
func (c *Controller) ObserveGap(now time.Time, running int, gap time.Duration, prefill bool) {
	y := gap.Seconds()
	c.gapShift.add(now, running, y, prefill)
	if !c.decodeGap(prefill) {
		return
	}
	if c.gap.ok && y > outlierFactor*c.gap.at(float64(running)) {
		return // a prefill stall, not a decode step (see outlierFactor)
	}
	c.gap.add(now, running, y)
}

// ObserveStep records the gap between two output chunks of one stream with
// the requests running and the KV tokens they hold then (the limiter's
// count), for the step model of the token budget; prefill as for
// ObserveGap.
func (c *Controller) ObserveStep(now time.Time, running, kv int, gap time.Duration, prefill bool) {
	if !c.decodeGap(prefill) {
		return
	}
	if r := c.tok.observeStep(now, running, kv, gap); r > 0 && c.cfg.DecodeStep && c.tokenBudget() {
		c.stepShift.add(now, c.cfg.Memory, r)
	}
}

// decodeGap reports whether a chunk gap teaches the decode step: with the
// token budget on, a gap with a prefill under way does not. The model
// predicts a level's TPOT as its decode step plus a stall term for the
// prefills (a mean prompt's prefill over an answer's tokens, per running
// request: stallPer); a step learnt from every gap within the outlier bound
// held most prefills too (the budget paces them one at a time, and a gap of
// one 800-token prefill on the H100 8B engine is 2.5 x a step), so the
// stall was counted twice, more so the more requests run, and the cap
// stopped near 120 where the engine gives 208 within the targets. Without
// the budget there is no stall term, and every gap within the bound counts.
// Only with ControllerConfig.DecodeStep: on the suite, scenarios 23, 24,
// 27 and 28 gain 2-9 % with it, but four checks fail (docs/datacenter.md).
func (c *Controller) decodeGap(prefill bool) bool {
	return !prefill || !c.cfg.DecodeStep || !c.tokenBudget()
}

// ObserveEngine records what the engine reports of itself (its metrics):
// its resident KV tokens beside the limiter's count of its running
// requests' own (resident), and the requests it runs and queues itself
// beside the gateway's running count (see engineLimit).
func (c *Controller) ObserveEngine(now time.Time, r EngineReading, running, resident int) {
	if finite(r.KVTokens) {
		c.tok.observeEngineKV(now, r.KVTokens, resident)
	}
	c.limit.observe(now, r, running)
	if !c.engineSeen && finite(r.Running) {
		c.engineSeen, c.engineRunning = true, int(math.Round(r.Running))
	}
}

// ObserveDone records a finished request. A request with no target at
// all (a batch class without targets) teaches the model what it costs the
// engine (hold time, output length, time per token) but counts to no class,
// attainment or goodput: it has no target to meet or miss, so it can
// neither drag the cap down nor, always "good", pull it up past the knee
// of the requests that have targets.
func (c *Controller) ObserveDone(now time.Time, f Finished) {
	tau := c.cfg.Memory
	if t := f.Targets; t != (slo.Targets{}) { // as judged: a zero field is no bound
		c.observeJudged(now, f)
	}
	if f.Hold > 0 {
		c.holdAvg.add(now, tau, f.Hold.Seconds())
	}
	if f.OutputTokens > 0 {
		c.outTokens.add(now, float64(f.OutputTokens))
	}
	c.tok.observePrompt(now, f.PromptEstimate)
	if !c.waitedInEngine(now, f) {
		// The prompts granted after it that the engine prefilled with it
		// count as work before its first token (see
		// admission.Ticket.PrefillWith).
		c.tok.observePrefill(now, f.EngineTTFT, f.PrefillSpan, f.PrefillStep, f.PrefillAhead+f.PrefillWith, f.PromptTokens)
	}
	// A running count that is NaN or infinite says nothing of the step
	// time the request's tokens were made at: its TPOT ratio is dropped.
	if f.OutputTokens >= 2 && f.TPOT > 0 && c.gap.ok && finite(f.Running) && !now.Add(-f.Hold).Before(c.shiftAt) {
		n := f.Running
		if n < 1 {
			n = 1
		}
		c.tpotR.add(now, ratio(f.TPOT.Seconds(), c.gap.at(n)+c.tab.s.stallPer*n))
	}
}

// observeJudged counts a finished request with targets to its class and
// to the measured attainment and goodput.
func (c *Controller) observeJudged(now time.Time, f Finished) {
	tau := c.cfg.Memory
	c.finished.add(now, tau, 1)
	if f.Good {
		c.goodSince++
		c.good.add(now, tau, 1)
	} else {
		c.good.decay(now, tau)
	}
	t := f.Targets
	d := c.classes[t]
	if d == nil {
		if len(c.classes) >= maxClasses { // bounded: forget the faintest other class
			c.dropFaintestClass(now)
		}
		d = &decayed{}
		c.classes[t] = d
	}
	d.add(now, tau, 1)
	if !now.Add(-f.Hold).Before(c.changedAt) {
		// Only requests that ran entirely under the cap count to it: one
		// that began under a higher cap collided with its prefills.
		c.noteMeasured(now, t, f.Good)
	}
}

// dropFaintestClass forgets the class of targets with the least recent
// weight, and its measured attainment, to make room for a new one. The
// operator's class is never dropped: requests with targets of their own
// (x-slo-*-ms headers, any value a client likes) may evict only each other,
// never the class Decide holds at the percentile nor what was measured of it.
func (c *Controller) dropFaintestClass(now time.Time) {
	var worst slo.Targets
	found, w := false, math.Inf(1)
	for t, d := range c.classes {
		if t == c.op {
			continue
		}
		d.decay(now, c.cfg.Memory)
		// Ties (every weight decayed to 0) go to the smallest targets, so
		// that the choice does not depend on the map's order.
		if !found || d.w < w || (d.w == w && lessTargets(t, worst)) {
			worst, w, found = t, d.w, true
		}
	}
	if !found {
		return
	}
	delete(c.classes, worst)
	delete(c.measured, worst)
}

// lessTargets orders targets by TTFT, then TPOT, then E2E.
func lessTargets(a, b slo.Targets) bool {
	if a.TTFT != b.TTFT {
		return a.TTFT < b.TTFT
	}
	if a.TPOT != b.TPOT {
		return a.TPOT < b.TPOT
	}
	return a.E2E < b.E2E
}

// noteMeasured counts a finished request of class t to the level the cap
// holds now.
func (c *Controller) noteMeasured(now time.Time, t slo.Targets, good bool) {
	m := c.measured[t]
	if m == nil {
		m = perLevel{}
		c.measured[t] = m
	}
	g := 0.0
	if good {
		g = 1
	}
	m.at(c.cap).add(now, c.cfg.Memory, g)
}

// perLevel holds one forgotten sum per cap level the cap has held: a few
// levels, whatever MaxCap (a fixed cap of 100000 holds one). Every level is
// used on its own, so the map's order never matters.
type perLevel map[int]*decayed

// at returns level n's sum, creating it.
func (p perLevel) at(n int) *decayed {
	d := p[n]
	if d == nil {
		d = &decayed{}
		p[n] = d
	}
	return d
}

// get returns level n's sum, empty if it has none.
func (p perLevel) get(n int) decayed {
	if d := p[n]; d != nil {
		return *d
	}
	return decayed{}
}
