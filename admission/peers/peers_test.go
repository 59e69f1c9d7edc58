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
	a.Sample(t0, time.Second, 5, false)
	if a.Limit() != 11 {
		t.Fatalf("additive increase: %d, want 11", a.Limit())
	}
	a.Sample(t0, time.Second, 2, false)
	if a.Limit() != 11 {
		t.Fatalf("no increase when inflight*2 < limit: %d", a.Limit())
	}
	a.Sample(t0, 6*time.Second, 5, false) // over the 5s timeout
	if a.Limit() != 9 {
		t.Fatalf("backoff: %d, want int(11*0.9) = 9", a.Limit())
	}
	a.Sample(t0, time.Second, 5, true)
	if a.Limit() != 8 {
		t.Fatalf("drop: %d, want min(8, int(8.1)) = 8", a.Limit())
	}
	for range 20 {
		a.Sample(t0, time.Hour, 1, false)
	}
	if a.Limit() != 1 {
		t.Fatalf("floor: %d, want 1", a.Limit())
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
