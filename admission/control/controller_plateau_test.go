package control

import (
	"testing"
	"time"
)

// flatLike is an engine whose decode step grows in proportion to the
// requests running (every step costs n times one sequence's: long
// contexts), so its goodput up to the TPOT target is nearly flat in n:
// n / (0.2 s + 1.24 s n) for n up to 9, the last level meeting TPOT
// 100 ms at P90 with a 5 % spread.
func flatLike() *engine {
	return &engine{gapB: 10 * time.Millisecond, ttftA: 200 * time.Millisecond, ttftB: 50 * time.Millisecond, out: 120, demand: 64}
}

func TestControllerReportsThePlateau(t *testing.T) {
	c := NewController(ControllerConfig{InitialCap: 9})
	now, _ := flatLike().run(t, c, t0, 2*time.Minute)
	st := c.Status(now)
	p := st.Plateau
	if p == nil {
		t.Fatalf("no plateau in the status (reason %q)", st.Reason)
	}
	// Goodput 0.792 req/s at 9; within 2 % of it from 5 (0.781), within
	// 3 % from 4 (0.775).
	if p.From > p.LeftEdge || p.LeftEdge >= p.To || p.To < 8 || p.LeftEdge > 6 || p.LeftEdge < 4 {
		t.Errorf("plateau %+v: want a left edge of 4-6 below a right end of at least 8", *p)
	}
	if got := float64(p.Noise); got < 0.02 || got > 0.03 {
		t.Errorf("noise %.4f req/s, want 3 %% of the best goodput %.3f", got, float64(p.Best))
	}
	// A steep curve (bf16Like: goodput grows 8 % per level to the knee)
	// has no plateau below its best level.
	c = NewController(ControllerConfig{})
	now, _ = bf16Like().run(t, c, t0, 3*time.Minute)
	if p := c.Status(now).Plateau; p == nil || p.LeftEdge != p.To {
		t.Errorf("bf16-like plateau %+v: want its left edge at its right end", p)
	}
}
