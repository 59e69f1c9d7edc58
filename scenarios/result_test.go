package scenarios

import (
	"testing"
	"time"
)

func TestConvergence(t *testing.T) {
	s := time.Second
	caps := []CapPoint{{0, 4}, {2 * s, 5}, {4 * s, 6}, {6 * s, 8}, {8 * s, 7}, {20 * s, 7}}
	// Final 7, band 6..8: entered at 4s and never left.
	if f, at := convergence(caps, 0, 60*s); f != 7 || at != 4*s {
		t.Fatalf("got %d at %v, want 7 at 4s", f, at)
	}
	caps = append(caps, CapPoint{30 * s, 3}, CapPoint{35 * s, 4})
	// From 30s: final 4, band 3..5, in band at 30s already.
	if f, at := convergence(caps, 30*s, 60*s); f != 4 || at != 0 {
		t.Fatalf("got %d at %v, want 4 at 0", f, at)
	}
	// From 25s: 7 is out of band (3..5); entered at 30s, 5s after.
	if f, at := convergence(caps, 25*s, 60*s); f != 4 || at != 5*s {
		t.Fatalf("got %d at %v, want 4 at 5s", f, at)
	}
}
