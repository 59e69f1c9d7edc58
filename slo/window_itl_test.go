package slo

import (
	"testing"
	"time"
)

// TestAddITLTakesAFreeShard: with every ITL shard held but one, AddITL
// returns at once and its gap counts.
func TestAddITLTakesAFreeShard(t *testing.T) {
	t0 := time.Now()
	w := NewWindow(time.Minute, t0)
	for free := range itlShards {
		for i := range w.itl {
			if i != free {
				w.itl[i].mu.Lock()
			}
		}
		done := make(chan struct{})
		go func() {
			w.AddITL(t0.Add(time.Second), 20*time.Millisecond)
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("AddITL waited with shard %d free", free)
		}
		for i := range w.itl {
			if i != free {
				w.itl[i].mu.Unlock()
			}
		}
	}
	if n := w.Stats(t0.Add(2 * time.Second)).ITL.Count; n != itlShards {
		t.Errorf("ITL count %d, want %d", n, itlShards)
	}
}

// TestAddITLsAsAddITL: gaps added in a batch give the statistics they give
// one at a time, each in the bucket of its own arrival (the batch spans
// three buckets, and its first gaps fall out of the window).
func TestAddITLsAsAddITL(t *testing.T) {
	t0 := time.Now()
	one, batch := NewWindow(time.Minute, t0), NewWindow(time.Minute, t0)
	type gap struct {
		at time.Time
		d  time.Duration
	}
	var gaps []gap
	for i := range 200 {
		gaps = append(gaps, gap{t0.Add(time.Duration(i) * 70 * time.Millisecond), time.Duration(1+i%37) * time.Millisecond})
	}
	for _, g := range gaps {
		one.AddITL(g.at, g.d)
	}
	batch.AddITLs(len(gaps), func(i int) (time.Time, time.Duration) { return gaps[i].at, gaps[i].d })
	batch.AddITLs(0, nil)
	for _, at := range []time.Duration{10 * time.Second, 65 * time.Second} {
		a, b := one.Stats(t0.Add(at)).ITL, batch.Stats(t0.Add(at)).ITL
		if a != b || a.Count == 0 {
			t.Errorf("at %v: one at a time %+v, in a batch %+v", at, a, b)
		}
	}
}
