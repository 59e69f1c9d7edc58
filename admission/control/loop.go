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
	// OnChange, when set, is called (with the loop's lock held: keep it
	// short) after every change of the cap, for recording a trajectory.
	OnChange func(now time.Time, d Decision)
}

// Loop is the control loop: it runs a Controller against a limiter, feeds
// it what the gateway observes, calls Decide every Interval and applies the
// cap with SetLimit, and answers the limiter's hooks (Hooks): the deadline
// check (Admit) and the other refusals (Refused).
// It is safe for concurrent use; one mutex serialises the controller.
// Every stream reports every chunk (Chunk), so a stream never waits for
// that mutex: an observation that finds it held waits in gaps, and whoever
// takes the mutex next applies it before anything else (lock), so every
// decision still sees every chunk observed before it.
type Loop struct {
	l       *admission.Limiter
	log     *slog.Logger
	metrics *controllerMetrics
	onChg   func(time.Time, Decision)

	mu               sync.Mutex
	c                *Controller
	peakRun, peakQue int
	rejected         int
	gaps             gapQueue
	pacing           int // the limiter's prefill limit, as last set
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
		l: cfg.Limiter, log: cfg.Logger, metrics: m, onChg: cfg.OnChange,
		c: NewController(cfg.Controller),
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	r.l.SetLimit(r.c.Cap())
	r.pacing = r.c.PrefillLimit()
	r.l.SetPacing(r.pacing, r.c.Config().TTFT)
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
		r.c.ObserveGap(p.at, p.running, p.gap)
	})
}

func (r *Loop) tick(now time.Time) {
	st := r.l.State()
	r.lock()
	defer r.mu.Unlock()
	load := Load{
		Running: st.Running, Queued: st.Queued,
		PeakRunning: max(r.peakRun, st.Running), PeakQueued: max(r.peakQue, st.Queued),
		Rejected: r.rejected,
	}
	r.peakRun, r.peakQue, r.rejected = st.Running, st.Queued, 0
	old := r.c.Cap()
	d := r.c.Decide(now, load)
	r.metrics.observe(r.c, now)
	if d.Changed {
		r.applyLocked(now, old, d)
	}
	if k := r.c.PrefillLimit(); k != r.pacing {
		r.log.Info("prefill limit changed", "from", r.pacing, "to", k, "reason", "median engine TTFT")
		r.pacing = k
		r.l.SetPacing(k, r.c.Config().TTFT)
	}
}

// applyLocked applies a changed cap to the limiter and reports it.
func (r *Loop) applyLocked(now time.Time, old int, d Decision) {
	r.l.SetLimit(d.Cap)
	r.metrics.change(old, d.Cap)
	r.log.Info("concurrency cap changed", "from", old, "to", d.Cap, "reason", d.Reason)
	if r.log.Enabled(context.Background(), slog.LevelDebug) {
		r.log.Debug("controller levels", "levels", r.c.debugLevels(now, old))
	}
	if r.onChg != nil {
		r.onChg(now, d)
	}
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
	if !r.mu.TryLock() {
		r.gaps.add(pendingGap{at: now, running: running, gap: gap})
		if !r.mu.TryLock() {
			return // the holder, or the next one, applies it
		}
		r.applyGapsLocked()
		r.mu.Unlock()
		return
	}
	r.applyGapsLocked()
	r.noteLocked(running, 0)
	r.c.ObserveGap(now, running, gap)
	r.mu.Unlock()
}

// Finished records a finished request, with the number of requests
// running when it ended. Requests that were refused or failed teach the
// model nothing about latency and are skipped; a stream whose client went
// away still measured what it streamed until then (and a client may close
// its end the moment the last chunk arrived). A request with several
// choices is skipped too: its chunks interleave them.
func (r *Loop) Finished(now time.Time, rec slo.Record, running int) {
	if !rec.Streamed || rec.OutputTokens == 0 || rec.E2E <= 0 || rec.Choices > 1 ||
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
		Targets: rec.Targets, Good: rec.Outcome.Good(),
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
	defer r.mu.Unlock()
	r.noteLocked(s.Running, s.Queued+1)
	old := r.c.Cap()
	q := Query{Arrival: req.Arrival, Ahead: max(s.Position-1, 0), Targets: req.Targets}
	if s.Running < s.Limit && s.Prefilling > 0 {
		q.Paced, q.PrefillAge = true, s.PrefillAge
	}
	v := r.c.Admit(now, q)
	if v.Raised {
		r.applyLocked(now, old, Decision{Cap: v.Cap, Changed: true, Reason: r.c.reason})
	}
	if !v.OK {
		r.rejected++
		r.metrics.deadline.Inc()
		return false, max(v.RetryAfter, time.Nanosecond) // zero would mean "the limiter's estimate"
	}
	return true, 0
}

// Refused implements admission.Refuser for the refusals the limiter
// decides itself (queue full, queue timeout, draining): it counts the
// refusal as demand beyond the cap for the next decision, and returns the
// Retry-After the controller promises (Controller.Promise).
func (r *Loop) Refused(_ admission.Request, s admission.State) time.Duration {
	now := s.Now
	if now.IsZero() {
		now = time.Now()
	}
	r.lock()
	defer r.mu.Unlock()
	r.rejected++
	r.noteLocked(s.Running, s.Queued)
	return max(r.c.Promise(now, max(s.Position-1, 0)), time.Nanosecond)
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
