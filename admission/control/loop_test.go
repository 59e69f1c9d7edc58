package control

import (
	"sync"
	"testing"
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
