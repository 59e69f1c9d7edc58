package control

import (
	"fmt"
	"math"
	"time"
)

// The ramp: how the cap climbs from where a gateway starts (cold, restarted,
// a fresh replica the autoscaler added because load is high) to the knee.
//
// The careful moves of Decide raise by a quarter of the cap at most, every
// settleTime, towards the level the model predicts best; the model itself
// extrapolates from the levels it has seen, so its best level lies within
// about twice the cap. From cap 1 that reaches a knee of 8 in 14 s but one
// of 200 in a minute, refusing most of the traffic meanwhile. The ramp is
// TCP's slow start for the cap: while the engine runs at the cap and the
// model predicts that twice the cap still meets every target with margin
// (rampMargin of the TPOT and TTFT targets, for every class of targets
// with requests), the cap doubles each settleTime, whatever the model's
// goodput curve says (a curve learnt from low levels flattens where it
// stops knowing, not where the engine does). Past the margin it narrows,
// halfway to the first level predicted to miss (at least a quarter), from
// a level measured to meet the targets; the first predicted
// miss, the first lowering, a level barred for a recent failure, a bound,
// a tenant held below its share or a cap the engine does not fill ends
// the ramp, and the careful moves narrow between the last good level and
// the first bad one from there.
//
// The ramp starts on with every controller (a cold start or a start from
// a saved state) and never restarts: a shift that moves the knee is
// followed by the careful moves, which double a cap in four steps.

// ramp is the state of the ramp and what it cost, for /status and the
// metrics.
type ramp struct {
	on     bool
	narrow bool // the last raise narrowed (rampNarrowStep): the margin was spent at twice the cap
	// unfilled counts the decisions in a row with demand at which the
	// engine ran less than rampMinRun of the cap.
	unfilled int
	from     int       // the cap it started from
	since    time.Time // the first decision of the ramp
	toward   int       // the level of its last doubling
	// refused counts the requests refused while it ran; idle the slot
	// time left idle while demand waited (seconds of one slot), from the
	// limiter's counts at each decision.
	refused int
	idle    float64
	// endedAt, endCap and endReason say how it ended (zero: still on).
	endedAt   time.Time
	endCap    int
	endReason string
}

// RampStatus is the ramp as /status shows it.
type RampStatus struct {
	// On reports whether the cap is still ramping (doubling while the
	// targets hold with margin); Toward is the level of its last doubling.
	On     bool `json:"on"`
	From   int  `json:"from"`
	Toward int  `json:"toward,omitempty"`
	// Seconds is how long it ran (so far, or in all).
	Seconds float64 `json:"seconds"`
	// Refused and IdleSlotSeconds are what it cost: requests refused
	// while it ran, and slot time idle while demand waited.
	Refused         int     `json:"refused"`
	IdleSlotSeconds float64 `json:"idle_slot_seconds"`
	// EndCap and End say where and why it ended.
	EndCap int    `json:"end_cap,omitempty"`
	End    string `json:"end,omitempty"`
}

// startRamp turns the ramp on from the cap.
func (c *Controller) startRamp() {
	c.ramp = ramp{on: !c.cfg.Fixed, from: c.cap}
}

// endRamp ends the ramp, once, saying why.
func (c *Controller) endRamp(now time.Time, why string) {
	if !c.ramp.on {
		return
	}
	c.ramp.on = false
	c.ramp.endedAt, c.ramp.endCap, c.ramp.endReason = now, c.cap, why
}

// rampDouble returns the level the ramp raises the cap to now, or 0 when
// it does not: the cap has run (rampMinRun of it at once), the doubled
// level is within the engine's limit, MaxCap and the levels not barred by
// a recent failure, and the model predicts it meets every class's TPOT,
// TTFT and E2E targets within rampMargin; past the margin, narrowing
// while it meets them and the requests that finished at the cap (at least
// measuredMin) met them at P. A raise the prediction forbids ends the ramp.
func (c *Controller) rampDouble(now time.Time, load Load, classes []class) int {
	if !c.ramp.on || !c.tab.ok {
		return 0
	}
	if c.tenantBounded() {
		// A tenant held by its own demand beside others: a raise slows
		// it to serve one no worse off, so the cap moves one level at a
		// time (max-min; see raiseTo).
		c.endRamp(now, "a tenant is held below its share by its own demand")
		return 0
	}
	if float64(load.PeakRunning) < rampMinRun*float64(c.cap) {
		// Not tried yet: wait, but not for long. A cap the engine does
		// not fill (the demand, or the token budget, binds first) is no
		// longer what limits the engine, and the ramp's work is done.
		if c.ramp.unfilled++; c.ramp.unfilled >= rampUnfilled {
			c.endRamp(now, fmt.Sprintf("the engine ran %d at most of a cap of %d for %d decisions", load.PeakRunning, c.cap, rampUnfilled))
		}
		return 0
	}
	c.ramp.unfilled = 0
	next := min(2*c.cap, c.cfg.MaxCap, c.engineBound(now))
	if next <= c.cap {
		c.endRamp(now, fmt.Sprintf("at the bound %d", c.cap))
		return 0
	}
	for n := c.cap + 1; n <= next; n++ {
		if !c.mayRaiseTo(now, n) {
			next = n - 1
			break
		}
	}
	if next <= c.cap {
		c.endRamp(now, fmt.Sprintf("level %d failed recently", c.cap+1))
		return 0
	}
	// A class its clients do not stream is judged by E2E alone, which
	// shows only at the end: the level passed must have been measured to
	// meet it (requests that finished there), as past the margin below.
	for _, k := range classes {
		if k.t.TTFT > 0 || k.t.TPOT > 0 || k.t.E2E <= 0 {
			continue
		}
		if m := c.measured[k.t].get(c.cap); m.w < measuredMin || m.mean() < c.cfg.Percentile {
			return 0
		}
	}
	c.ramp.narrow = false
	if why := c.rampMiss(next, classes, rampMargin); why == "" {
		return next
	}
	// The margin is spent at twice the cap: narrow. (Not for good:
	// from one level the model extrapolates in proportion, which a second
	// level corrects.)
	c.ramp.narrow = true
	next = min(next, c.cap+c.rampNarrowStep(next, classes))
	if why := c.rampMiss(next, classes, 1); why != "" {
		c.endRamp(now, why)
		return 0
	}
	// Past the margin the prediction is no longer enough: the level
	// passed must have been measured to meet the targets, by requests
	// that finished there (as many as a lowering needs for evidence).
	m := c.measured[c.op].get(c.cap)
	if m.w < measuredMin {
		return 0 // not measured yet: wait
	}
	if m.mean() < c.cfg.Percentile {
		c.endRamp(now, fmt.Sprintf("at %d %.0f %% of the requests that finished met the targets, below P%.0f", c.cap, 100*m.mean(), 100*c.cfg.Percentile))
		return 0
	}
	return next
}

// rampNarrowStep is the step past the margin: half the way from the cap
// (the last level measured good) to the first level up to top predicted
// to miss a target (top+1 when none is), at least a quarter of the cap
// (raiseStep) and at least one. Between a last good and a first bad level
// it narrows as a bisection does; a fixed quarter took four measured steps
// from 64 to 156 on the H100 8B engine, where the first predicted miss was
// at 195.
func (c *Controller) rampNarrowStep(top int, classes []class) int {
	bad := top + 1
	for n := c.cap + 1; n <= top; n++ {
		if c.rampMiss(n, classes, 1) != "" {
			bad = n
			break
		}
	}
	return max(1, int(float64(c.cap)*raiseStep), (bad-c.cap)/2)
}

// rampMiss says why level n is predicted to miss a share margin of a
// class's TPOT, TTFT or E2E target, or "" when it does not.
func (c *Controller) rampMiss(n int, classes []class, margin float64) string {
	p := c.predict(n)
	for _, k := range classes {
		if tp := k.t.TPOT.Seconds(); tp > 0 && p.TPOT > margin*tp {
			return fmt.Sprintf("at %d the predicted P%.0f TPOT %s exceeds %.0f %% of %s", n, 100*c.cfg.Percentile, dur(p.TPOT), 100*margin, k.t.TPOT)
		}
		if tt := k.t.TTFT.Seconds(); tt > 0 && p.TTFT > margin*tt {
			return fmt.Sprintf("at %d the predicted P%.0f engine TTFT %s exceeds %.0f %% of %s", n, 100*c.cfg.Percentile, dur(p.TTFT), 100*margin, k.t.TTFT)
		}
		if te := k.t.E2E.Seconds(); te > 0 && p.E2E > margin*te {
			return fmt.Sprintf("at %d the predicted P%.0f E2E %s exceeds %.0f %% of %s", n, 100*c.cfg.Percentile, dur(p.E2E), 100*margin, k.t.E2E)
		}
	}
	return ""
}

// rampStatus is the ramp for /status.
func (c *Controller) rampStatus(now time.Time) RampStatus {
	r := c.ramp
	s := RampStatus{On: r.on, From: r.from, Toward: r.toward, Refused: r.refused, IdleSlotSeconds: r.idle, EndCap: r.endCap, End: r.endReason}
	switch {
	case r.since.IsZero():
	case r.on:
		s.Seconds = now.Sub(r.since).Seconds()
	default:
		s.Seconds = r.endedAt.Sub(r.since).Seconds()
	}
	return s
}

// startFromEngine raises the cap, once, at the first reading of the
// engine's metrics, to what the engine already runs when that is more: a
// gateway restarted in front of a busy engine (or a second gateway beside
// one) starts where the engine is, not at its initial cap, and the ramp
// goes on from there. Within MaxCap and the engine's own limit.
func (c *Controller) startFromEngine(now time.Time) bool {
	if c.startChecked || !c.engineSeen || c.cfg.Fixed {
		return false
	}
	c.startChecked = true
	n := min(c.engineRunning, c.cfg.MaxCap, c.engineBound(now))
	if n <= c.cap || !c.ramp.on {
		return false
	}
	old := c.cap
	c.cap, c.ramp.from = n, n
	c.reason = fmt.Sprintf("start %d->%d: the engine already runs %d requests (its metrics)", old, n, c.engineRunning)
	return true
}

// Prior is what a controller starts from besides its initial cap: the
// engine's costs in tokens a previous controller learnt on the same
// engine (a state file). They seed the token model with priorWeight
// samples, so that the deadline check and the token budget pace the
// first prefills from the first second (a restored cap of 100 on an
// engine that knows nothing yet admits 100 prefills at once); the live
// samples take over within a memory.
type Prior struct {
	// Prefill: base (s) + steps x the decode step + per token (s) x
	// prompt tokens; Step: base (s) + per running (s) x running + per
	// KV token (s) x resident KV tokens.
	PrefillBase, PrefillSteps, PrefillPerToken float64
	StepBase, StepPerRunning, StepPerKVToken   float64
	// MeanPrompt is the mean prompt of recent requests and KVPerRunning
	// the mean resident KV tokens per running request, in tokens.
	MeanPrompt, KVPerRunning float64
	// Cap is the cap the costs were learnt at (the step's range).
	Cap int
}

// Valid reports whether every cost is finite, not negative and within
// what any engine takes (a second per prompt token or per running
// request, a minute of base), and the sizes are positive.
func (p Prior) Valid() bool {
	for _, v := range []float64{p.PrefillBase, p.PrefillSteps, p.PrefillPerToken, p.StepBase, p.StepPerRunning, p.StepPerKVToken} {
		if !finite(v) || v < 0 || v > 60 {
			return false
		}
	}
	return p.PrefillPerToken > 0 && p.StepBase > 0 && p.MeanPrompt >= 1 && p.KVPerRunning >= 0 && finite(p.MeanPrompt) && finite(p.KVPerRunning) && p.Cap >= 1
}

// seed adds the Prior's planes to the token model as priorWeight samples
// on a grid around where they were learnt. The samples carry no time:
// they start to age at the first live one (planeFit.decay).
func (k *tokens) seed(p Prior) {
	var zero time.Time
	step := func(run, kv float64) float64 { return p.StepBase + p.StepPerRunning*run + p.StepPerKVToken*kv }
	runs := []float64{1, math.Max(1, float64(p.Cap)/2), float64(p.Cap)}
	kvs := []float64{0.5, 1, 1.5}
	prompts := []float64{p.MeanPrompt / 2, p.MeanPrompt, 2 * p.MeanPrompt}
	for i, run := range runs {
		for j, f := range kvs {
			kv := run * p.KVPerRunning * f
			k.step.add(zero, k.tau, run, kv, step(run, kv))
			s := step(run, kv)
			v := prompts[(i+j)%3]
			k.prefill.add(zero, k.tau, s, v, p.PrefillBase+p.PrefillSteps*s+p.PrefillPerToken*v)
		}
	}
	k.prompt.add(zero, k.tau, p.MeanPrompt)
	k.kvPerRunning = p.KVPerRunning
}

// prior is what the controller learnt, as a Prior for another.
func (c *Controller) prior() Prior {
	p := Prior{Cap: c.cap, MeanPrompt: c.tok.prompt.mean(), KVPerRunning: c.tok.kvPerRunning}
	if c.tok.prefill.ok {
		p.PrefillBase, p.PrefillSteps, p.PrefillPerToken = c.tok.prefill.c[0], c.tok.prefill.c[1], c.tok.prefill.c[2]
	}
	if c.tok.step.ok {
		p.StepBase, p.StepPerRunning, p.StepPerKVToken = c.tok.step.c[0], c.tok.step.c[1], c.tok.step.c[2]
	}
	return p
}
