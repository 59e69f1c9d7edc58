package control

import (
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/slo"
)

func newTestLoop(t *testing.T) *Loop {
	t.Helper()
	r, err := NewLoop(LoopConfig{
		Controller: ControllerConfig{MaxCap: 64, InitialCap: 8},
		Limiter:    admission.NewLimiter(admission.Config{Limit: 8}),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// gapWeight is the controller's total gap weight over all levels: with
// every observation at the same instant nothing decays, so it counts them.
func gapWeight(r *Loop) float64 {
	var w float64
	for _, l := range r.c.gap.levels {
		w += l.w
	}
	return w
}

// TestLoopChunkDoesNotWait: a chunk observation made while the loop's
// mutex is held returns at once, and the next holder applies it before
// anything else.
func TestLoopChunkDoesNotWait(t *testing.T) {
	r := newTestLoop(t)
	now := time.Now()
	r.mu.Lock()
	done := make(chan struct{})
	go func() {
		r.Chunk(now, 5, 20*time.Millisecond)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		r.mu.Unlock()
		t.Fatal("Chunk waited for the loop's mutex")
	}
	if w := gapWeight(r); w != 0 {
		t.Errorf("gap weight %v while the mutex was held, want 0 (applied by the next holder)", w)
	}
	r.mu.Unlock()
	r.lock()
	w, peak := gapWeight(r), r.peakRun
	r.mu.Unlock()
	if w != 1 || peak != 5 {
		t.Errorf("after the next holder: gap weight %v, peak running %d; want 1 and 5", w, peak)
	}
}

// TestLoopChunkConcurrent: many streams reporting chunks at once while
// other callers take the loop's mutex (and drain the queue): every
// observation is applied exactly once. (Decide and Status age the levels
// to the present, so they would blur the count.)
func TestLoopChunkConcurrent(t *testing.T) {
	r := newTestLoop(t)
	now := time.Now()
	const streams, chunks = 16, 2000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				r.FirstChunk(now, 3, time.Millisecond)
				r.Cap()
			}
		}
	}()
	for s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range chunks {
				r.Chunk(now, 1+s%8, 20*time.Millisecond)
			}
		}()
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	r.lock()
	w, n := gapWeight(r), r.gaps.n.Load()
	r.mu.Unlock()
	if w != streams*chunks || n != 0 {
		t.Errorf("gap weight %v with %d still queued, want %d and 0", w, n, streams*chunks)
	}
}

// TestLoopLeavesSeveralChoicesOut: a record of a request with n > 1 (its
// chunks interleave the choices) teaches the model nothing; the same
// record with one choice does.
func TestLoopLeavesSeveralChoicesOut(t *testing.T) {
	r := newTestLoop(t)
	now := time.Now()
	rec := slo.Record{Streamed: true, OutputTokens: 20, OutputChunks: 20, TTFT: 200 * time.Millisecond,
		EngineTTFT: 200 * time.Millisecond, E2E: time.Second, MeanRunning: 4, Choices: 2,
		Targets: slo.Targets{TTFT: time.Second, TPOT: 100 * time.Millisecond}} // with none it would count nowhere
	r.Finished(now, rec, 4)
	if w := r.c.finished.w; w != 0 {
		t.Fatalf("a record of 2 choices was counted (weight %v)", w)
	}
	rec.Choices = 0
	r.Finished(now, rec, 4)
	if w := r.c.finished.w; w == 0 {
		t.Fatal("a record of one choice was not counted: the test tests nothing")
	}
}

// TestLoopNotStreamed: a request its client did not stream counts to the
// class of the targets its verdict used (E2E alone when it has one);
// reassembled, it brings its TPOT ratio; relayed whole, only its cost.
func TestLoopNotStreamed(t *testing.T) {
	r := newTestLoop(t)
	now := time.Now()
	for i := range 10 { // a fitted gap curve, so that TPOT ratios are taken
		r.Chunk(now, 1+i%4, time.Duration(10+i%4)*time.Millisecond)
	}
	r.lock()
	r.c.gap.fit(now)
	ok := r.c.gap.ok
	r.mu.Unlock()
	if !ok {
		t.Fatal("no gap curve: the test tests nothing")
	}
	all := slo.Targets{TTFT: time.Second, TPOT: 100 * time.Millisecond, E2E: 13 * time.Second}
	e2e := slo.Targets{E2E: 13 * time.Second}
	whole := slo.Record{OutputTokens: 20, E2E: time.Second, Targets: all}
	r.Finished(now, whole, 4)
	r.lock()
	if d := r.c.classes[e2e]; d == nil || r.c.classes[all] != nil || r.c.holdAvg.w == 0 || len(r.c.tpotR.values(now)) != 0 {
		t.Fatalf("relayed whole: classes %v, hold weight %v, TPOT ratios %v", r.c.classes, r.c.holdAvg.w, r.c.tpotR.values(now))
	}
	r.mu.Unlock()
	re := slo.Record{Reassembled: true, OutputTokens: 20, OutputChunks: 20, TTFT: 200 * time.Millisecond,
		EngineTTFT: 200 * time.Millisecond, E2E: time.Second, MeanRunning: 2, Targets: all}
	r.Finished(now, re, 2)
	r.lock()
	defer r.mu.Unlock()
	if len(r.c.tpotR.values(now)) != 1 || r.c.classes[all] != nil {
		t.Fatalf("reassembled: classes %v, TPOT ratios %v", r.c.classes, r.c.tpotR.values(now))
	}
}

// TestLoopEffectsOutsideLock: what a change of the cap sets off (here an
// OnChange that blocks) runs outside the loop's lock: Cap and the deadline
// check answer meanwhile, and the limiter has the new cap before OnChange
// is told.
func TestLoopEffectsOutsideLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := bf16Like() // knee 7: a cap of 64 misses TPOT and is lowered
		lim := admission.NewLimiter(admission.Config{Limit: 64})
		entered, release := make(chan Decision, 1), make(chan struct{})
		r, err := NewLoop(LoopConfig{
			Controller: ControllerConfig{MaxCap: 64, InitialCap: 64},
			Limiter:    lim,
			Logger:     slog.New(slog.DiscardHandler),
			OnChange: func(_ time.Time, d Decision) {
				entered <- d
				<-release
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer close(release)
		now, n := t0, 64
		var d Decision
		for i := 0; i < 1200 && d.Cap == 0; i++ {
			now = now.Add(100 * time.Millisecond)
			for range 10 {
				r.Chunk(now, n, e.gap(n))
			}
			r.FirstChunk(now, n, e.ttft(n))
			r.lock()
			r.c.ObserveDone(now, Finished{Targets: r.c.op, Running: float64(n), EngineTTFT: e.ttft(n), TPOT: e.gap(n),
				Hold: e.ttft(n) + 119*e.gap(n), OutputTokens: 120})
			r.mu.Unlock()
			if i%10 == 9 {
				go r.tick(now)
				synctest.Wait() // the tick has returned, or blocks in OnChange
				select {
				case d = <-entered:
				default:
				}
			}
		}
		if d.Cap == 0 || d.Cap >= 64 {
			t.Fatalf("no lowered cap after 120 s at 64 running: %+v", d)
		}
		if lim.Limit() != d.Cap {
			t.Errorf("limiter cap %d when OnChange was told %d", lim.Limit(), d.Cap)
		}
		answered := make(chan int, 1)
		go func() { answered <- r.Cap() }()
		verdict := make(chan bool, 1)
		go func() {
			ok, _ := r.Admit(admission.Request{Arrival: now}, admission.State{Now: now, Running: d.Cap, Limit: d.Cap, Position: 1})
			verdict <- ok
		}()
		synctest.Wait()
		select {
		case c := <-answered:
			if c != d.Cap {
				t.Errorf("Cap %d, want %d", c, d.Cap)
			}
		default:
			t.Error("Cap waited for OnChange: the effects ran under the loop's lock")
		}
		if len(verdict) != 1 {
			t.Error("the deadline check waited for OnChange")
		}
	})
}

// The loop tells the controller when the limiter's decode step check held
// a waiter since the previous decision (Load.StepHeld, from the limiter's
// held counts), and only then: the horizon of an SDK's promise reads it
// (see horizon).
func TestLoopStepHeldFromTheLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := admission.NewLimiter(admission.Config{Limit: 8, MaxQueue: 10})
		r, err := NewLoop(LoopConfig{Controller: ControllerConfig{MaxCap: 64, InitialCap: 8, DecodeStep: true}, Limiter: l})
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		kv := func(prompt int) admission.Request {
			return admission.Request{Arrival: time.Now(), Targets: slo.Targets{TTFT: time.Second}, PromptTokens: prompt, MaxWait: 10 * time.Second}
		}
		a, err := l.Acquire(ctx, kv(6000))
		if err != nil {
			t.Fatal(err)
		}
		a.FirstToken()
		a.Generated(1000) // 7000 tokens of KV cache
		// A controller that has learnt the engine (else nothing is noted
		// before the model: overrule).
		now, _ := bf16Like().run(t, r.c, t0, 3*time.Minute)
		r.tick(now)
		if !r.c.stepHeldAt.IsZero() {
			t.Fatalf("step held at %v with nothing held", r.c.stepHeldAt)
		}
		// Costs of the test's own (the decision set the learnt ones).
		l.SetCosts(admission.Costs{StepBase: 10 * time.Millisecond, StepPerKVToken: 1e-6, StepLimit: 20 * time.Millisecond})
		done := make(chan error, 1)
		go func() {
			b, err := l.Acquire(ctx, kv(4000)) // 10 ms + 11 ms > 20 ms: held
			if err == nil {
				b.Release()
			}
			done <- err
		}()
		synctest.Wait()
		a.Release() // the held one starts: the hold is counted
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if h := l.Held(); h.Step != 1 {
			t.Fatalf("held counts %+v, want one held by the step check", h)
		}
		later := now.Add(time.Second)
		r.tick(later)
		if !r.c.stepHeldAt.Equal(later) {
			t.Fatalf("step held at %v, want the decision after the hold (%v)", r.c.stepHeldAt, later)
		}
		r.tick(later.Add(time.Second)) // no new hold: the time of the last stands
		if !r.c.stepHeldAt.Equal(later) {
			t.Fatalf("step held at %v after a decision without a hold, want %v", r.c.stepHeldAt, later)
		}
	})
}
