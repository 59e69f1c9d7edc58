package control

import (
	"slices"
	"testing"
	"time"
)

func TestTimedRing(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := newRatioRing(3, 10*time.Second)
	if got := r.values(t0); len(got) != 0 {
		t.Fatalf("empty ring: %v", got)
	}
	for i, v := range []float64{5, 1, 4, 2} { // the 4th overwrites the 1st
		r.add(t0.Add(time.Duration(i)*time.Second), v)
	}
	if got := r.values(t0.Add(3 * time.Second)); !slices.Equal(got, []float64{1, 2, 4}) {
		t.Fatalf("after wrap-around: %v, want the last three sorted [1 2 4]", got)
	}
	// At 12 s the entry of 1 s is older than 10 s; 2 s and 3 s remain.
	if got := r.values(t0.Add(12 * time.Second)); !slices.Equal(got, []float64{2, 4}) {
		t.Fatalf("after ageing: %v, want [2 4]", got)
	}
	r.reset()
	if got := r.values(t0.Add(3 * time.Second)); len(got) != 0 {
		t.Fatalf("after reset: %v", got)
	}

	s := newSampleRing(2, time.Minute)
	s.add(sample{t0, 1, 0.1})
	s.add(sample{t0, 2, 0.2})
	s.add(sample{t0, 3, 0.3})
	if got := s.live(t0); len(got) != 2 || got[0].n != 3 || got[1].n != 2 {
		t.Fatalf("sample ring keeps %v, want the samples at levels 3 and 2", got)
	}
}
