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
