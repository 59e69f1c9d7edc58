package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a simulated engine. The zero value of every field but
// Profile has a meaning, given in its comment.
type Config struct {
	// Profile is the engine being simulated (see [LookupProfile]); it is
	// validated by New.
	Profile Profile
	// Flavor is the engine whose chunk shapes are emitted; "" means vllm.
	Flavor Flavor
	// TimeScale runs every modelled duration TimeScale times as fast; 0
	// means 1 (real time). The model is the same at any scale: only the
	// clock is divided.
	TimeScale float64
	// Seed seeds output lengths and faults; two runs with the same seed
	// and the same arrivals draw the same values.
	Seed uint64
	// Faults are failure switches for tests; the zero value injects none.
	Faults Faults
	// Registry receives the flavour's metrics (vllm:*, sglang:* or
	// llamacpp:*) and is what GET /metrics serves; nil means a new
	// registry of the Sim's own.
	Registry *prometheus.Registry
	// Logger receives one line per fault injected and engine start and
	// stop; nil means slog.Default(). Prompt text is never logged.
	Logger *slog.Logger
	// Stagger, when set, delivers the outputs of one step in batch order,
	// the i-th sequence's i*Stagger after the step's end, as an engine's
	// output processor hands them out one after the other. In a synctest
	// bubble this gives every stream's chunk an instant of its own, so
	// that what happens next does not depend on the order Go runs
	// goroutines woken together (the scenario suite sets 1us); 0 delivers
	// them all at the step's end.
	Stagger time.Duration
}

// Faults makes some requests fail, for testing what sits in front of the
// engine. Rates are shares of requests in [0, 1], drawn from the seed.
type Faults struct {
	// ErrorRate is the share of generation requests answered at once with
	// HTTP 500 and an OpenAI-shaped error body.
	ErrorRate float64
	// CutRate is the share of streams whose connection is cut after a
	// random number of output tokens (before the last one), with no [DONE].
	CutRate float64
	// HangRate is the share of requests that send nothing, not even
	// headers (but see HangAfterHeaders), for HangFor before they are
	// scheduled.
	HangRate float64
	// HangFor is how long a hanging request hangs; 0 means until the client
	// goes away or the engine stops.
	HangFor time.Duration
	// HangAfterHeaders makes a hanging streamed request send its headers
	// (200, text/event-stream) first and then nothing.
	HangAfterHeaders bool
	// SlowStartRate is the share of requests held for SlowStartDelay
	// before they enter the engine's queue (as an engine loading an adapter).
	SlowStartRate  float64
	SlowStartDelay time.Duration
	// StartupDelay keeps /health and the generation routes at 503 for this
	// long after New, as an engine that is still loading its weights.
	StartupDelay time.Duration
}

// Sim is one simulated engine. Create it with New, serve its Handler on any
// listener, and run its scheduler loop with Run.
type Sim struct {
	cfg     Config
	flavor  flavor
	model   []byte // the served model name, JSON-encoded
	scale   float64
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *metrics
	// block is the prefix cache's block size in tokens; 0 when it is off.
	block int

	mu         sync.Mutex
	eng        *engine
	rng        *rand.Rand
	nextID     uint64
	stepFactor float64
	started    bool
	stopped    bool
	readyAt    time.Time // the startup delay ends
	wake       chan struct{}
	done       chan struct{} // closed when Run returns
}

// New returns a passive engine: nothing runs until Run.
func New(cfg Config) (*Sim, error) {
	if err := cfg.Profile.Validate(); err != nil {
		return nil, fmt.Errorf("profile %q: %w", cfg.Profile.Name, err)
	}
	fl, err := lookupFlavor(cfg.Flavor)
	if err != nil {
		return nil, err
	}
	if cfg.TimeScale < 0 || math.IsNaN(cfg.TimeScale) || math.IsInf(cfg.TimeScale, 0) {
		return nil, errors.New("time scale must be a positive number")
	}
	f := cfg.Faults
	for _, r := range []float64{f.ErrorRate, f.CutRate, f.HangRate, f.SlowStartRate} {
		if r < 0 || r > 1 || math.IsNaN(r) {
			return nil, errors.New("fault rates must be in [0, 1]")
		}
	}
	if f.HangFor < 0 || f.SlowStartDelay < 0 || f.StartupDelay < 0 {
		return nil, errors.New("fault durations must not be negative")
	}
	s := &Sim{
		cfg:        cfg,
		flavor:     fl,
		scale:      cfg.TimeScale,
		log:        cfg.Logger,
		reg:        cfg.Registry,
		rng:        rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		stepFactor: 1,
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
	}
	if s.scale == 0 {
		s.scale = 1
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
	}
	s.readyAt = time.Now().Add(s.scaled(cfg.Faults.StartupDelay))
	s.model, _ = json.Marshal(cfg.Profile.Model)
	if s.metrics, err = newMetrics(s.reg, fl.name, cfg.Profile); err != nil {
		return nil, err
	}
	s.eng = newEngine(cfg.Profile, s.metrics)
	if cfg.Profile.PrefixCaching {
		if s.block = cfg.Profile.PrefixBlockTokens; s.block == 0 {
			s.block = fl.prefixBlock
		}
		s.eng.block = s.block
		if !cfg.Profile.UnifiedCache {
			s.eng.pc = newPrefixCache(s.block)
		}
	}
	s.eng.stagger = max(cfg.Stagger, 0)
	return s, nil
}

// Profile returns the profile the Sim runs.
func (s *Sim) Profile() Profile { return s.cfg.Profile }

// SetStepFactor multiplies every step's duration by f from the next step
// on (1.5: the engine is 50 % slower). Values <= 0 are ignored.
func (s *Sim) SetStepFactor(f float64) {
	if f <= 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return
	}
	s.mu.Lock()
	s.stepFactor = f
	s.mu.Unlock()
}

// Stats is a snapshot of the engine's state.
type Stats struct {
	Running, Waiting int
	KVCacheTokens    int // in use by running sequences
	// CachedTokens are the prefix cache's resident tokens of sequences
	// that ended: Profile.PrefixCacheTokens' (what slows every step and
	// what no gateway sees) and the free blocks of Profile.PrefixCaching.
	CachedTokens int
	Steps        int64
	Preemptions  int64
}

// Stats returns the engine's state now.
func (s *Sim) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{
		Running: len(s.eng.running), Waiting: s.eng.numWaiting(), KVCacheTokens: s.eng.kvUsed,
		CachedTokens: s.eng.cachedTokens(), Steps: s.eng.steps, Preemptions: s.eng.preemptions,
	}
}

// FlushCache drops every cached token of sequences that ended (the
// hashed prefix cache's free blocks included), as
// llama.cpp's POST /slots/{id}?action=erase on every slot, SGLang's
// /flush_cache or vLLM's /reset_prefix_cache do, and returns how many there
// were. From the next step on the engine is as fast as a fresh one, until
// the cache fills again. It works with and without Profile.UnifiedCache.
func (s *Sim) FlushCache() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.eng.flush()
	s.metrics.gauges(s.eng)
	return n
}

// scaled turns a modelled duration into a wall-clock one.
func (s *Sim) scaled(d time.Duration) time.Duration {
	if s.scale == 1 {
		return d
	}
	return time.Duration(float64(d) / s.scale)
}

// Run is the scheduler loop: plan a step, wait for its duration, commit it,
// one wake-up per step. It returns nil when ctx is done, after ending every
// request still in the engine; it may be called once.
func (s *Sim) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("sim: Run called twice")
	}
	s.started = true
	s.mu.Unlock()
	s.log.Info("sim engine started", "profile", s.cfg.Profile.Name, "flavor", s.flavor.name, "time_scale", s.scale)
	defer func() {
		s.mu.Lock()
		s.stopped = true
		s.eng.abortAll()
		s.metrics.gauges(s.eng)
		s.mu.Unlock()
		close(s.done)
		s.log.Info("sim engine stopped")
	}()

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	// Steps run back to back on a modelled timeline: each starts where the
	// last one ended, not when the loop woke. Timers on a busy machine fire
	// up to a millisecond late, longer than a time-scaled step; the next
	// step then starts in the past, runs at once, and the timeline catches
	// up, so token rates stay right on average. When the loop falls further
	// behind than maxLag (the simulator itself is too slow) or has been
	// idle, the timeline restarts at the present.
	var next time.Time
	for {
		start := time.Now()
		if !next.IsZero() && start.Sub(next) <= maxLag {
			start = next
		}
		// Let requests that arrive at the instant the last step ended join
		// this one. In a synctest bubble the sleep returns only after every
		// other goroutine has blocked, so which requests join a step does
		// not depend on goroutine scheduling; in real time it costs well
		// under a microsecond.
		time.Sleep(time.Nanosecond)
		s.mu.Lock()
		d, ok := s.eng.schedule()
		factor := s.stepFactor
		if s.eng.admittedAt.After(start) {
			start = s.eng.admittedAt // a lagging timeline never starts a request before it arrived
		}
		s.metrics.gauges(s.eng)
		s.mu.Unlock()
		if !ok {
			next = time.Time{}
			select {
			case <-s.wake:
				continue
			case <-ctx.Done():
				return nil
			}
		}
		end := start.Add(s.scaled(time.Duration(float64(d) * factor)))
		if wait := time.Until(end); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return nil
			}
		} else if ctx.Err() != nil {
			return nil
		}
		// Tokens are stamped with the step's end on the timeline, which is
		// now in a synctest bubble and at most maxLag ago in real time.
		s.mu.Lock()
		s.eng.commit(end)
		s.metrics.gauges(s.eng) // what ended in the step is no longer running
		s.mu.Unlock()
		next = end
	}
}

// maxLag bounds how far the scheduler's timeline may trail the clock before
// it gives up catching up.
const maxLag = 20 * time.Millisecond

// errStopped is returned by submit after Run has returned.
var errStopped = errors.New("engine stopped")

// submit puts a new sequence in the engine's queue.
func (s *Sim) submit(q *seq) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errStopped
	}
	s.eng.add(q)
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// cancel removes a sequence whose client went away; its KV cache is freed
// at the next step.
func (s *Sim) cancel(q *seq) {
	s.mu.Lock()
	q.cancelled = true
	s.mu.Unlock()
}

// draw is what a request learns from the seeded generator at arrival.
type draw struct {
	id        uint64
	outTokens int
	fail      bool
	cutAt     int // 0: no cut
	hang      bool
	slowStart bool
}

// drawFor makes every random choice of a request at once, so that a run
// with the same seed and the same arrivals repeats exactly.
func (s *Sim) drawFor(maxTokens int, ignoreEOS bool) draw {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	d := draw{id: s.nextID, outTokens: maxTokens}
	if !ignoreEOS {
		n := int(math.Ceil(s.rng.ExpFloat64() * float64(s.cfg.Profile.MeanOutputTokens)))
		d.outTokens = max(1, min(n, maxTokens))
	}
	f := s.cfg.Faults
	if f.ErrorRate > 0 && s.rng.Float64() < f.ErrorRate {
		d.fail = true
	}
	if f.CutRate > 0 && s.rng.Float64() < f.CutRate && d.outTokens > 1 {
		d.cutAt = 1 + s.rng.IntN(d.outTokens-1)
	}
	if f.HangRate > 0 && s.rng.Float64() < f.HangRate {
		d.hang = true
	}
	if f.SlowStartRate > 0 && s.rng.Float64() < f.SlowStartRate {
		d.slowStart = true
	}
	return d
}

// ready reports whether the engine serves requests: it has not stopped and
// the startup delay is over. Requests that arrive before Run starts wait in
// the queue.
func (s *Sim) ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.stopped && !time.Now().Before(s.readyAt)
}
