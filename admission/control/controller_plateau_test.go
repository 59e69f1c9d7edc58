package control

import (
	"strings"
	"testing"
	"time"

	"github.com/kneecap/kneecap/slo"
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
	// Goodput 0.792 req/s at 9; within 1 % of it from 6 or 7 (the left
	// edge is taken from each level's prediction averaged over 30 s),
	// within 3 % from 4 (0.775).
	if p.From > p.LeftEdge || p.LeftEdge >= p.To || p.To < 8 || p.LeftEdge > 7 || p.LeftEdge < 5 || p.From > 5 {
		t.Errorf("plateau %+v: want a left edge of 5-7 below a right end of at least 8, from at most 5", *p)
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

func TestControllerWalksToThePlateausLeftEdge(t *testing.T) {
	e := flatLike()
	// From the right end: a raise needs 3 % more goodput, which a curve
	// this flat never promises one level up.
	c := NewController(ControllerConfig{InitialCap: 9})
	now, caps := e.run(t, c, t0, 6*time.Minute)
	// Goodput at 9 (the right end) is 0.792 req/s; within 1 % of it from
	// 6 up; 5 gives 0.781.
	final := caps[len(caps)-1]
	if caps[0] != 9 || final > 7 || final < 5 {
		t.Fatalf("final cap %d: want the left edge 6 (5-7) from 9; caps %v", final, caps)
	}
	st := c.Status(now)
	if st.Plateau == nil {
		t.Fatalf("no plateau in the status: %+v", st)
	}
	if p := st.Plateau; p.LeftEdge > final || p.From > p.LeftEdge || p.To < 8 {
		t.Errorf("plateau %+v with the cap at %d", *p, final)
	}
	if !strings.Contains(st.Reason, "left edge") {
		t.Errorf("reason %q", st.Reason)
	}
	// Held there: the noise of the prediction alone does not raise it.
	_, more := e.run(t, c, now, 3*time.Minute)
	for _, n := range more {
		if n != final {
			t.Fatalf("left the left edge %d: %v", final, more)
		}
	}
}

// A tenant that runs every request it has (2) and less than its share
// (half the running) is served more only by fewer running requests: the
// cap walks past the left edge (5-7) to where the tenant holds its share
// (4), within 3 % of the best goodput (the fair edge, 4 here), and no raise
// takes it back while the tenant would lose by it. Once no tenant is held
// so, the cap walks back to the left edge.
func TestControllerWalksFurtherLeftForAShortTenant(t *testing.T) {
	e := flatLike()
	e.tenant = 2
	c := NewController(ControllerConfig{InitialCap: 9})
	now, caps := e.run(t, c, t0, 8*time.Minute)
	final := caps[len(caps)-1]
	if final != 4 {
		t.Fatalf("final cap %d: want 4, where the tenant holds its share; caps %v", final, caps)
	}
	if r := c.Status(now).Reason; !strings.Contains(r, "fair edge") {
		t.Errorf("reason %q: want the walk to the fair edge", r)
	}
	now, more := e.run(t, c, now, 2*time.Minute)
	for _, n := range more {
		if n != 4 {
			t.Fatalf("left the tenant's level 4: %v", more)
		}
	}
	e.tenant = 0
	now, back := e.run(t, c, now, 3*time.Minute)
	if n := back[len(back)-1]; n < 5 || n > 7 {
		t.Fatalf("cap %d with no short tenant: want back at the left edge (5-7); caps %v", n, back)
	}
	if r := c.Status(now).Reason; !strings.Contains(r, "left edge") {
		t.Errorf("reason %q", r)
	}
}

func TestControllerHoldsTheRightEndUntilRelearned(t *testing.T) {
	e := flatLike()
	c := NewController(ControllerConfig{InitialCap: 9})
	// The cap holds the right end (it probes 10 first) until a level has
	// been measured under demand for relearnDwell (30 s of dwell, forgotten
	// with the memory), then walks one level at a time.
	_, caps := e.run(t, c, t0, 90*time.Second)
	first := -1
	for i, n := range caps {
		if n < 9 {
			first = i
			break
		}
	}
	if first < 20 || first > 80 {
		t.Fatalf("the walk started after %ds, want 20-80 s: %v", first, caps)
	}
	for i := first + 1; i < len(caps); i++ {
		if caps[i] > caps[i-1] || (caps[i] < caps[i-1] && caps[i-1]-caps[i] > 1) {
			t.Fatalf("not a walk of one level at a time at %ds: %v", i, caps)
		}
	}
}

// Requests judged by E2E alone (not streamed) gain nothing at the left
// edge: the cap does not walk there.
func TestControllerDoesNotWalkForRequestsNotStreamed(t *testing.T) {
	e := flatLike()
	e.targets = &slo.Targets{E2E: 20 * time.Second}
	c := NewController(ControllerConfig{InitialCap: 9})
	now, caps := e.run(t, c, t0, 6*time.Minute)
	for i, n := range caps {
		if n < 9 {
			t.Fatalf("the cap went below 9 at %ds (%s): %v", i, c.Status(now).Reason, caps)
		}
	}
	if r := c.Status(now).Reason; strings.Contains(r, "left edge") {
		t.Errorf("reason %q", r)
	}
}
