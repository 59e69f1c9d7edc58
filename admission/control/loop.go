package control

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/slo"
)

// LoopConfig wires a Controller to a limiter.
type LoopConfig struct {
	// Controller configures the decisions.
	Controller ControllerConfig
	// Limiter is the limiter whose cap and prefill limit the loop sets;
	// required. Its hooks are the caller's to install (Hooks).
	Limiter *admission.Limiter
	// Logger receives one line per change of the cap; nil means
	// slog.Default().
	Logger *slog.Logger
	// Registerer receives the kneecap_controller_* metrics; nil means none.
	Registerer prometheus.Registerer
	// OnChange, when set, is called after every change of the cap, in the
	// order of the decisions and outside the loop's lock (so it may take
	// its time, holding back only the next change), for recording a
	// trajectory.
	OnChange func(now time.Time, d Decision)
	// Engine, when set, returns what the engine reports of itself (its own
	// metrics) and whether that reading is fresh; it is asked at every
	// decision, outside the loop's lock.
	Engine func() (EngineReading, bool)
}

// EngineReading is what an engine reports of itself: the KV tokens it
// holds, the requests it runs and those it queues itself (NaN: not
// published).
type EngineReading struct {
	KVTokens, Running, Waiting float64
}

// Loop is the control loop: it runs a Controller against a limiter, feeds
// it what the gateway observes, calls Decide every Interval and applies the
// cap with SetLimit, and answers the limiter's hooks (Hooks): the deadline
// check (Admit) and the other refusals (Refused).
// It is safe for concurrent use; one mutex (mu) serialises the
// controller, and holds only its computation: what a decision sets off
// (the limiter's new cap and prefill limit, the log line, OnChange) runs
// after mu is released, under a second mutex (apply) taken before mu is
// released, so changes reach the limiter in the order they were decided
// while the deadline check of the next request need not wait for a log
// write. Every stream reports every chunk (Chunk), so a stream never waits
// for mu: an observation that finds it held waits in gaps, and whoever
// takes mu next applies it before anything else (lock), so every decision
// still sees every chunk observed before it.
type Loop struct {
	l       *admission.Limiter
	engine  func() (EngineReading, bool)
	log     *slog.Logger
	metrics *controllerMetrics
	onChg   func(time.Time, Decision)

	mu               sync.Mutex
	c                *Controller
	peakRun, peakQue int
	rejected         int
	heldStep         int64 // the limiter's count of waiters held for the step check, at the last decision
	gaps             gapQueue
	pacing           int             // the limiter's prefill limit, as last decided
	costs            admission.Costs // the limiter's token budget, as last decided

	apply sync.Mutex // orders the effects of decisions; taken while mu is held, never the other way
}

// effects is what one decision sets off outside the controller.
type effects struct {
	now               time.Time
	capChanged        bool
	oldCap            int
	d                 Decision
	levels            any // the levels at a change, for the debug log; nil unless enabled
	pacingChanged     bool
	oldPacing, pacing int
	pacingBound       time.Duration
	costsChanged      bool
	costs             admission.Costs
}

// unlockAndApply releases mu and then carries out e, in decision order.
func (r *Loop) unlockAndApply(e effects) {
	if !e.capChanged && !e.pacingChanged && !e.costsChanged {
		r.mu.Unlock()
		return
	}
	r.apply.Lock()
	r.mu.Unlock()
	defer r.apply.Unlock()
	if e.capChanged {
		r.l.SetLimit(e.d.Cap)
		r.log.Info("concurrency cap changed", "from", e.oldCap, "to", e.d.Cap, "reason", e.d.Reason)
		if e.levels != nil {
			r.log.Debug("controller levels", "levels", e.levels)
		}
		if r.onChg != nil {
			r.onChg(e.now, e.d)
		}
	}
	if e.pacingChanged {
		r.log.Info("prefill limit changed", "from", e.oldPacing, "to", e.pacing, "reason", "median engine TTFT")
		r.l.SetPacing(e.pacing, e.pacingBound)
	}
	if e.costsChanged {
		r.l.SetCosts(e.costs)
		r.log.Debug("token budget", "prefill_base", e.costs.PrefillBase, "prefill_steps", e.costs.PrefillSteps, "prefill_per_token", e.costs.PrefillPerToken, "prefill_margin", e.costs.PrefillMargin,
			"step_base", e.costs.StepBase, "step_per_running", e.costs.StepPerRunning, "step_per_kv_token", e.costs.StepPerKVToken,
			"step_limit", e.costs.StepLimit, "hidden_kv", e.costs.HiddenKV, "mean_output", e.costs.MeanOutput)
	}
}

// changedLocked records a change of the cap from old to d.Cap in the
// metrics and returns its effects.
func (r *Loop) changedLocked(now time.Time, old int, d Decision) effects {
	r.metrics.change(old, d.Cap)
	e := effects{now: now, capChanged: true, oldCap: old, d: d}
	if r.log.Enabled(context.Background(), slog.LevelDebug) {
		e.levels = r.c.debugLevels(now, old)
	}
	return e
}

var (
	_ admission.Gate    = (*Loop)(nil)
	_ admission.Refuser = (*Loop)(nil)
)

// NewLoop returns a loop and sets the limiter's cap to the controller's
// initial cap and its prefill limit. It starts nothing and installs no
// hook: the owner of the limiter installs Hooks (the gateway does, once).
func NewLoop(cfg LoopConfig) (*Loop, error) {
	m, err := newControllerMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	r := &Loop{
		l: cfg.Limiter, engine: cfg.Engine, log: cfg.Logger, metrics: m, onChg: cfg.OnChange,
		c: NewController(cfg.Controller),
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	r.l.SetLimit(r.c.Cap())
	r.pacing = r.c.PrefillLimit()
	r.l.SetPacing(r.pacing, r.c.Config().TTFT)
	// A controller started from a Prior knows the engine's costs now: the
	// budget holds from the first request, not from the first decision.
	c := r.c
	c.refresh(time.Time{})
	if r.costs = c.Costs(); r.costs != (admission.Costs{}) {
		r.l.SetCosts(r.costs)
	}
	r.metrics.cap.Set(float64(r.c.Cap()))
	return r, nil
}

// Run calls Decide every Interval until ctx ends; it returns nil then.
func (r *Loop) Run(ctx context.Context) error {
	t := time.NewTicker(r.c.Config().Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			r.tick(now)
		}
	}
}

// Hooks returns the limiter hooks this loop answers.
func (r *Loop) Hooks() admission.Hooks {
	return admission.Hooks{Gate: r, Refuser: r}
}

// lock takes the loop's mutex and applies the chunk observations that
// waited for it.
func (r *Loop) lock() {
	r.mu.Lock()
	r.applyGapsLocked()
}

func (r *Loop) applyGapsLocked() {
	r.gaps.drain(func(p pendingGap) {
		r.noteLocked(p.running, 0)
		r.c.ObserveGap(p.at, p.running, p.gap, p.prefill)
		r.c.ObserveStep(p.at, p.running, p.kv, p.gap, p.prefill)
	})
}

func (r *Loop) tick(now time.Time) {
	st, held := r.l.DecisionState(), r.l.Held()
	var er EngineReading
	fresh := false
	if r.engine != nil {
		er, fresh = r.engine()
	}
	r.lock()
	if fresh {
		r.c.ObserveEngine(now, er, st.Running, st.ResidentKV)
	}
	load := Load{
		Running: st.Running, Queued: st.Queued,
		PeakRunning: max(r.peakRun, st.Running), PeakQueued: max(r.peakQue, st.Queued),
		Rejected: r.rejected, ShortTenant: st.TenantShort, BoundedTenant: st.TenantBounded,
		StepHeld: held.Step > r.heldStep,
	}
	r.heldStep = held.Step
	r.peakRun, r.peakQue, r.rejected = st.Running, st.Queued, 0
	old := r.c.Cap()
	d := r.c.Decide(now, load)
	r.metrics.observe(r.c, now)
	var e effects
	if d.Changed {
		e = r.changedLocked(now, old, d)
	}
	if k := r.c.PrefillLimit(); k != r.pacing {
		e.pacingChanged, e.oldPacing, e.pacing, e.pacingBound = true, r.pacing, k, r.c.Config().TTFT
		r.pacing = k
	}
	if c := r.c.Costs(); c != r.costs {
		e.costsChanged, e.costs = true, c
		r.costs = c
	}
	r.unlockAndApply(e)
}

// noteLocked keeps the peak counts between two decisions.
func (r *Loop) noteLocked(running, queued int) {
	r.peakRun = max(r.peakRun, running)
	r.peakQue = max(r.peakQue, queued)
}

// FirstChunk records a stream's first output chunk: engine TTFT, with the
// number of requests running on the engine then.
func (r *Loop) FirstChunk(now time.Time, running int, engineTTFT time.Duration) {
	r.lock()
	r.noteLocked(running, 0)
	r.c.ObserveFirst(now, running, engineTTFT)
	r.mu.Unlock()
}

// Chunk records the gap before a later output chunk, with the number of
// requests running then. It never waits for the loop's mutex: with
// thousands of streams reporting, a holder that the OS deschedules would
// otherwise queue every stream behind it, and the queue (a mutex in
// starvation mode hands itself from waiter to waiter) outlives the
// descheduling. An observation that finds the mutex held is queued for the
// next holder; the retry below applies it at once if the holder has left.
func (r *Loop) Chunk(now time.Time, running int, gap time.Duration) {
	r.Chunks(1, func(int) (time.Time, int, time.Duration) { return now, running, gap })
}

// Chunks records n gaps as n calls of Chunk would, in order, with the
// limiter's resident KV tokens read at each (a stream's chunks of one
// flush): chunk(i) is the i-th gap, when it came and the requests running
// then. It takes the loop's mutex once for all of them, or queues them all
// when it is held.
func (r *Loop) Chunks(n int, chunk func(i int) (now time.Time, running int, gap time.Duration)) {
	if n <= 0 {
		return
	}
	if !r.mu.TryLock() {
		for i := range n {
			now, running, gap := chunk(i)
			r.gaps.add(pendingGap{at: now, running: running, kv: r.l.ResidentKV(), gap: gap, prefill: r.l.PrefillDuring(now.Add(-gap))})
		}
		if !r.mu.TryLock() {
			return // the holder, or the next one, applies them
		}
		r.applyGapsLocked()
		r.mu.Unlock()
		return
	}
	r.applyGapsLocked()
	for i := range n {
		now, running, gap := chunk(i)
		kv := r.l.ResidentKV()
		r.noteLocked(running, 0)
		prefill := r.l.PrefillDuring(now.Add(-gap))
		r.c.ObserveGap(now, running, gap, prefill)
		r.c.ObserveStep(now, running, kv, gap, prefill)
	}
	r.mu.Unlock()
}

// Finished records a finished request, with the number of requests
// running when it ended. Requests that were refused or failed teach the
// model nothing about latency and are skipped; a stream whose client went
// away still measured what it streamed until then (and a client may close
// its end the moment the last chunk arrived). A request with several
// choices is skipped too: its chunks interleave them.
//
// A request its client did not stream counts to the class of the targets
// its verdict used (slo.Record.VerdictTargets: its E2E target alone when
// it has one), so that requests judged by E2E alone are predicted and
// measured apart from the streams. Reassembled, it teaches the model as a
// stream does (its chunks were observed as they came); relayed whole, it
// teaches only its cost: the slot hold and its output length, with no
// TPOT (its TPOT ratio is not taken).
func (r *Loop) Finished(now time.Time, rec slo.Record, running int) {
	if rec.OutputTokens == 0 || rec.E2E <= 0 || rec.Choices > 1 ||
		rec.Outcome.Has(slo.Rejected) || rec.Outcome.Has(slo.EngineError) || rec.Outcome.Has(slo.InvalidRequest) {
		return
	}
	tpot, _ := rec.TPOT()
	n := float64(max(running, 1))
	if rec.MeanRunning >= 1 {
		n = rec.MeanRunning // the concurrency its tokens were made at
	}
	f := Finished{
		Running: n, EngineTTFT: rec.EngineTTFT, TPOT: tpot,
		Hold: rec.E2E - rec.QueueWait, OutputTokens: rec.OutputTokens,
		Targets: rec.VerdictTargets(), Good: rec.Outcome.Good(),
		PromptTokens: rec.PromptTokens, PromptEstimate: rec.PromptEstimate,
		PrefillAhead: rec.PrefillAhead, PrefillWith: rec.PrefillWith, PrefillSpan: rec.PrefillSpan, PrefillStep: rec.PrefillStep,
		GrantRunning: rec.GrantRunning,
	}
	if !r.c.cfg.NoCachedCost {
		f.PromptTokens = max(rec.PromptTokens-max(rec.CachedPromptTokens, 0), 0)
		if rec.PromptCharged > 0 {
			f.PromptEstimate = rec.PromptCharged
		}
	}
	r.lock()
	r.c.ObserveDone(now, f)
	r.mu.Unlock()
}

// Admit implements Gate: the deadline check of a request that would queue.
func (r *Loop) Admit(req admission.Request, s admission.State) (bool, time.Duration) {
	now := s.Now
	if now.IsZero() {
		now = time.Now()
	}
	r.lock()
	r.noteLocked(s.Running, s.Queued+1)
	old := r.c.Cap()
	q := Query{Arrival: req.Arrival, Ahead: max(s.Position-1, 0), Targets: req.Targets, MaxWait: req.MaxWait,
		PromptTokens: req.PromptTokens, Honoured: s.Honoured, SDK: req.Retries >= 0}
	q.PrefillOwn = s.PrefillOwn
	if s.Running < s.Limit && s.Prefilling > 0 {
		q.Paced, q.PrefillAge, q.PrefillWait = true, s.PrefillAge, s.PrefillWait
	}
	v := r.c.Admit(now, q)
	var e effects
	if v.Raised {
		e = r.changedLocked(now, old, Decision{Cap: v.Cap, Changed: true, Reason: r.c.reason})
	}
	if !v.OK {
		r.rejected++
	}
	r.unlockAndApply(e)
	if !v.OK {
		r.metrics.deadline.Inc()
		return false, max(v.RetryAfter, time.Nanosecond) // zero would mean "the limiter's estimate"
	}
	return true, 0
}

// Refused implements admission.Refuser for the refusals the limiter
// decides itself (queue full, queue timeout, draining): it counts the
// refusal as demand beyond the cap for the next decision, and returns the
// Retry-After the controller promises (Controller.Promise).
func (r *Loop) Refused(req admission.Request, s admission.State) time.Duration {
	now := s.Now
	if now.IsZero() {
		now = time.Now()
	}
	r.lock()
	defer r.mu.Unlock()
	r.rejected++
	r.noteLocked(s.Running, s.Queued)
	return max(r.c.Promise(now, max(s.Position-1, 0), Query{Honoured: s.Honoured, SDK: req.Retries >= 0}), time.Nanosecond)
}

// Cap returns the current cap.
func (r *Loop) Cap() int {
	r.lock()
	defer r.mu.Unlock()
	return r.c.Cap()
}

// Status returns the controller's state for /status.
func (r *Loop) Status() any {
	r.lock()
	defer r.mu.Unlock()
	return r.c.Status(time.Now())
}

// Snapshot is what the controller learnt, in brief: the cap, the fitted
// mean model (time per output chunk and engine TTFT, a + b x running, in
// seconds) and the last reason.
type Snapshot struct {
	Cap                      int
	GapA, GapB, TTFTA, TTFTB float64
	Reason                   string
	// Prior is the engine's costs in tokens as learnt, for a controller
	// that starts from them (ControllerConfig.Prior).
	Prior Prior
}

// Snapshot returns what the controller learnt, for a state file.
func (r *Loop) Snapshot() Snapshot {
	r.lock()
	defer r.mu.Unlock()
	c := r.c
	return Snapshot{Cap: c.cap, GapA: c.gap.a, GapB: c.gap.b, TTFTA: c.ttft.a, TTFTB: c.ttft.b, Reason: c.reason, Prior: c.prior()}
}
