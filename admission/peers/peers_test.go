package peers

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestGradient2GrowsWhileLatencyHoldsAndShrinksWhenItRises(t *testing.T) {
	g := NewGradient2()
	now := t0
	for range 20 {
		now = now.Add(time.Second)
		g.Sample(now, time.Second, g.Limit(), false)
	}
	// Each sample: est = est*0.8 + (est + 4)*0.2 = est + 0.8.
	if got := g.Limit(); got != 36 {
		t.Fatalf("limit after 20 steady samples %d, want 36", got)
	}
	// Within the tolerance (1.5): 1.4x the long-term latency still grows
	// (36.0 -> 36.8; with no tolerance it would shrink to 34.7).
	now = now.Add(time.Second)
	g.Sample(now, 1400*time.Millisecond, g.Limit(), false)
	if got := g.Limit(); got != 36 {
		t.Fatalf("limit after a sample at 1.4x %d, want 36", got)
	}
	for range 20 {
		now = now.Add(time.Second)
		g.Sample(now, 4*time.Second, g.Limit(), false)
	}
	if got := g.Limit(); got >= 36 {
		t.Fatalf("limit %d did not shrink when latency quadrupled", got)
	}
	// Application limited: no change.
	l := g.Limit()
	g.Sample(now, time.Second, 1, false)
	if g.Limit() != l {
		t.Fatalf("limit moved while application limited")
	}
}

func TestAIMD(t *testing.T) {
	a := NewAIMD()
	if a.Limit() != 20 {
		t.Fatalf("initial limit %d, want 20", a.Limit())
	}
	a.Sample(t0, time.Second, 10, false)
	if a.Limit() != 21 {
		t.Fatalf("additive increase: %d, want 21", a.Limit())
	}
	a.Sample(t0, time.Second, 5, false)
	if a.Limit() != 21 {
		t.Fatalf("no increase when inflight*2 < limit: %d", a.Limit())
	}
	for range 3 {
		a.Sample(t0, time.Second, 21, false)
	}
	a.Sample(t0, 6*time.Second, 5, false) // over the 5s timeout
	if a.Limit() != 21 {
		t.Fatalf("backoff: %d, want int(24*0.9) = 21", a.Limit())
	}
	a.Sample(t0, time.Second, 5, true)
	if a.Limit() != 20 {
		t.Fatalf("drop: %d, want the floor 20 (int(21*0.9) = 18)", a.Limit())
	}
	for range 20 {
		a.Sample(t0, time.Hour, 1, false)
	}
	if a.Limit() != 20 {
		t.Fatalf("floor: %d, want 20", a.Limit())
	}
}

func TestAIMDSLOBacksOffOnDropsOnlyDownToOne(t *testing.T) {
	a := NewAIMDSLO()
	a.Sample(t0, 30*time.Minute, 20, false) // long, but met its targets
	if a.Limit() != 21 {
		t.Fatalf("a long stream that met its targets: %d, want 21", a.Limit())
	}
	a.Sample(t0, time.Second, 20, true) // missed a target
	if a.Limit() != 18 {
		t.Fatalf("missed target: %d, want int(21*0.9) = 18", a.Limit())
	}
	for range 40 {
		a.Sample(t0, time.Second, 1, true)
	}
	if a.Limit() != 1 {
		t.Fatalf("floor: %d, want 1", a.Limit())
	}
	if a.Name() != "netflix-aimd-slo" || NewAIMD().Name() != "netflix-aimd" {
		t.Fatalf("names %q, %q", a.Name(), NewAIMD().Name())
	}
}

func TestEnvoyMinRTTThenGradient(t *testing.T) {
	e := NewEnvoy()
	now := t0
	e.Tick(now)
	if e.Limit() != 3 {
		t.Fatalf("limit during min RTT window %d, want 3", e.Limit())
	}
	for range 50 {
		now = now.Add(100 * time.Millisecond)
		e.Sample(now, 50*time.Millisecond, 1, false)
		e.Tick(now)
	}
	if e.inMinRTT || e.minRTT != 50*time.Millisecond {
		t.Fatalf("min RTT window not closed: in=%v minRTT=%v", e.inMinRTT, e.minRTT)
	}
	// sampleRTT == minRTT: gradient 1.25, limit 3*1.25 + sqrt(3.75) = 5.68 -> 5.
	now = now.Add(50 * time.Millisecond)
	e.Sample(now, 50*time.Millisecond, 3, false)
	now = now.Add(100 * time.Millisecond)
	e.Tick(now)
	if e.Limit() != 5 {
		t.Fatalf("limit %d, want 5", e.Limit())
	}
	// sampleRTT 4x minRTT: gradient 0.5 -> 2.5 + 1.58 = 4.
	e.Sample(now, 200*time.Millisecond, 3, false)
	now = now.Add(100 * time.Millisecond)
	e.Tick(now)
	if e.Limit() != 4 {
		t.Fatalf("limit %d, want 4", e.Limit())
	}
}

func TestEnvoyPinnedNeverMeasuresMinRTT(t *testing.T) {
	e := NewEnvoyPinned(time.Second)
	now := t0
	e.Tick(now)
	if e.Limit() != 3 || e.Name() != "envoy-pinned" || e.Update != time.Second {
		t.Fatalf("start: limit %d name %q update %v, want 3 envoy-pinned 1s", e.Limit(), e.Name(), e.Update)
	}
	// Latency at half the pinned value: gradient 2, 3*2 + sqrt(6) = 8,
	// once the window of one pinned RTT ends.
	now = now.Add(500 * time.Millisecond)
	e.Sample(now, 500*time.Millisecond, 3, false)
	e.Tick(now)
	if e.Limit() != 3 {
		t.Fatalf("limit %d before the window ended, want 3", e.Limit())
	}
	now = now.Add(500 * time.Millisecond)
	e.Tick(now)
	if e.Limit() != 8 {
		t.Fatalf("limit %d, want 8", e.Limit())
	}
	// At the pinned value: gradient 1 (no buffer), 8 + sqrt(8) = 10.
	e.Sample(now, time.Second, 8, false)
	now = now.Add(time.Second)
	e.Tick(now)
	if e.Limit() != 10 {
		t.Fatalf("limit %d, want 10", e.Limit())
	}
	// Far over it for an hour: down to min_concurrency and held there,
	// never a min RTT window (which would discard the samples and wait
	// for 50 of them).
	for range 3600 {
		e.Sample(now, 10*time.Second, 3, false)
		now = now.Add(time.Second)
		e.Tick(now)
		if e.inMinRTT {
			t.Fatalf("pinned controller entered a min RTT window at %v", now.Sub(t0))
		}
	}
	if e.Limit() != 3 {
		t.Fatalf("limit %d, want 3", e.Limit())
	}
}
