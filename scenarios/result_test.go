package scenarios

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kneecap/kneecap/admission"
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

// A cold start has converged at the start of the first 30 s whose good
// completions per second reach the goal.
func TestColdConverge(t *testing.T) {
	s := time.Second
	var good []time.Duration
	// One good completion every 4 s for the first 20 s, then one a second.
	for at := 4 * s; at <= 20*s; at += 4 * s {
		good = append(good, at)
	}
	for at := 21 * s; at <= 120*s; at += s {
		good = append(good, at)
	}
	// Goal 0.9/s: 27 in a window. [0,30) holds 5+9 = 14; [12s,42s) holds
	// 16s, 20s and 21..41 = 2+21 = 23; [16s,46s) 16s, 20s, 21..45 = 27.
	if got := coldConverge(good, 0.9, 120*s); got != 16*s {
		t.Errorf("converged at %v, want 16s", got)
	}
	if got := coldConverge(good, 1.1, 120*s); got != -1 {
		t.Errorf("a goal never reached converged at %v, want -1", got)
	}
	if got := coldConverge(good, 0.1, 120*s); got != 0 {
		t.Errorf("a goal reached at once converged at %v, want 0", got)
	}
}

// After a change (scenario 28's undoing) the reach counts from the change,
// in whole seconds from it, and windows that end after the run do not
// count.
func TestReachAfter(t *testing.T) {
	s := time.Second
	var good []time.Duration
	// Two a second up to 50 s, none from 50 to 62 s, two a second after.
	for at := 500 * time.Millisecond; at < 120*s; at += 500 * time.Millisecond {
		if at < 50*s || at >= 62*s {
			good = append(good, at)
		}
	}
	// From 50 s, 15 in 10 s (1.5/s): [50.5, 60.5) holds none until 62 s;
	// [55, 65) holds 62..64.5 = 6; [57, 67) 62..66.5 = 10; [59.5, 69.5)
	// is not a window (whole seconds); [60, 70) 62..69.5 = 16.
	if got := reachAfter(good, 1.5, 50*s, 120*s, 10*s); got != 10*s {
		t.Errorf("reached %v after 50s, want 10s", got)
	}
	if got := reachAfter(good, 1.5, 50*s, 69*s, 10*s); got != -1 {
		t.Errorf("a window ending after the run counted: reached %v after 50s", got)
	}
	if got := reachAfter(good, 1.5, 0, 120*s, 10*s); got != 0 {
		t.Errorf("reached %v from the start, want 0", got)
	}
}

// A change that is undone (Scenario.Recovers) happens at a third of the
// window and is undone at two thirds; one that is not happens halfway.
func TestChanges(t *testing.T) {
	tm := Timing{Warmup: time.Minute, Window: 3 * time.Minute}
	sc, _ := ByID(28)
	if at, back := sc.changes(tm); at != 2*time.Minute || back != 3*time.Minute {
		t.Errorf("28: change at %v, undone at %v; want 2m0s and 3m0s", at, back)
	}
	sc, _ = ByID(5)
	if at, back := sc.changes(tm); at != tm.ChangeAt() || back != 0 {
		t.Errorf("5: change at %v, undone at %v; want %v and never", at, back, tm.ChangeAt())
	}
}

// Scenario 9's TTFT target sits at the engine's edge: between the solo
// TTFT of the shortest and the longest prompts, so that at cap 1 some
// requests miss it and most meet it.
func TestEdgeTargets(t *testing.T) {
	var sc Scenario
	for _, s := range All() {
		if s.ID == 9 {
			sc = s
		}
	}
	lo, _ := sc.Profile.Solo(sc.Workload, 0.05, 2000, 1)
	hi, _ := sc.Profile.Solo(sc.Workload, 0.95, 2000, 1)
	tg := sc.Targets()
	if !(tg.TTFT > lo && tg.TTFT < hi) || tg.TPOT != TPOTTarget {
		t.Errorf("scenario 9 targets %+v, want TTFT between the solo P5 %v and P95 %v", tg, lo, hi)
	}
	if d := (Scenario{}).Targets(); d.TTFT != TTFTTarget || d.TPOT != TPOTTarget {
		t.Errorf("default targets %+v", d)
	}
}

// A listed miss is printed, not enforced; an unlisted miss and a check that
// holds are left as they are.
func TestMarkNotMet(t *testing.T) {
	checks := []Check{
		{What: "idle slots while demand waited at most half (0.04 vs 0.05)"},
		{What: "adaptive >= 0.95 x oracle (0.9)"},
		{What: "idle slots again", OK: true},
	}
	markNotMet(9, checks)
	if checks[0].Reported == "" || checks[1].Reported != "" || checks[2].Reported != "" {
		t.Fatalf("%+v", checks)
	}
}

// The held cap is the one in force longest inside the window, not the
// last one nor one held only before the window.
func TestHeldCap(t *testing.T) {
	s := time.Second
	caps := []CapPoint{{0, 2}, {10 * s, 9}, {100 * s, 5}, {130 * s, 6}, {150 * s, 5}}
	// Window 60-200 s: 9 for 40 s, 5 for 30+50 s, 6 for 20 s.
	if got := heldCap(caps, 60*s, 200*s); got != 5 {
		t.Fatalf("held cap %d, want 5", got)
	}
	// Window 0-100 s: 2 for 10 s, 9 for 90 s.
	if got := heldCap(caps, 0, 100*s); got != 9 {
		t.Fatalf("held cap %d, want 9", got)
	}
	if got := heldCap(nil, 0, 100*s); got != 0 {
		t.Fatalf("held cap of no trajectory %d, want 0", got)
	}
}

// Re-convergence is judged as the median over the adaptive runs on
// reconvergeSeeds seeds, found by their mode's name; a seed missing (or a
// run that never measured it) leaves the count short, which fails the
// check.
func TestReconvergeMedianOverSeeds(t *testing.T) {
	s := &Suite{Runs: map[int][]RunResult{}}
	secs := []int{141, 53, 14, 127, 54, 11, 45, 0} // scenario 4, seeds 1-8, 2026-12-07
	for k, v := range secs {
		s.Runs[4] = append(s.Runs[4], RunResult{Mode: Mode{Kind: "adaptive", SeedOffset: uint64(k)}.String(), Reconverge: time.Duration(v) * time.Second})
	}
	s.Runs[4] = append(s.Runs[4], RunResult{Mode: "adaptive-next", Reconverge: time.Hour}) // today's clients: not counted
	if med, n := s.reconvergeMedian(4); n != reconvergeSeeds || med != 49*time.Second {
		t.Fatalf("median %v over %d seeds, want 49s over %d", med, n, reconvergeSeeds)
	}
	s.Runs[4][3].Reconverge = -1 // never measured
	if _, n := s.reconvergeMedian(4); n != reconvergeSeeds-1 {
		t.Fatalf("%d seeds counted with one unmeasured, want %d", n, reconvergeSeeds-1)
	}
	if !reconverges(4) || !reconverges(5) || reconverges(1) {
		t.Error("re-convergence is judged in 4 and 5 alone")
	}
}

// fakeOutside counts one second of idle slot time per second since it
// was made.
type fakeOutside struct{ since time.Time }

func (f fakeOutside) Outside() admission.OutsideStats {
	return admission.OutsideStats{IdleSlotTime: time.Since(f.since)}
}

// The count over a window is the count at its end less the count at its
// start, whichever of the run's end and the end's timer comes first: a run
// that ends first counts the end itself (the timer's count was still zero
// then, and the idle slot time over the window came out negative).
func TestWindowCountWhenTheRunEndsFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := countWindow(fakeOutside{time.Now()}, 5*time.Second, 10*time.Second)
		time.Sleep(14 * time.Second) // the run ends before the window's timer
		if got := w.result().IdleSlots; got < 0.89 || got > 0.91 {
			t.Fatalf("idle slots %.3f over a window cut at 9 of its 10 s, want 0.9 (9 s of 10)", got)
		}
		w = countWindow(fakeOutside{time.Now()}, 5*time.Second, 10*time.Second)
		time.Sleep(20 * time.Second) // the timer came first
		if got := w.result().IdleSlots; got < 0.99 || got > 1.01 {
			t.Fatalf("idle slots %.3f over a whole window, want 1", got)
		}
	})
}

// In 23-26 the adaptive gateway is compared, printed and not enforced,
// with kneecap's own static cap of the users' count (the token budget on):
// a miss is reported with its reason, a lead passes, and without that run
// there is no such check.
func TestBudgetAloneComparison(t *testing.T) {
	sc, _ := ByID(23)
	if !sc.BudgetAlone || sc.Users != 256 {
		t.Fatalf("scenario 23: BudgetAlone %v with %d users", sc.BudgetAlone, sc.Users)
	}
	if s27, _ := ByID(27); s27.BudgetAlone {
		t.Fatal("scenario 27 (open loop) runs the budget mode")
	}
	budget := Mode{Kind: "budget", Cap: 256}.String()
	for _, tc := range []struct {
		name           string
		budget         float64 // 0: no such run
		failed         int
		want, reported bool
	}{
		{"behind", 21.5, 9, false, true},
		{"ahead", 19.0, 300, true, false},
		{"failing more", 19.0, 9, false, true},
		{"no run", 0, 0, false, false},
	} {
		s := &Suite{Runs: map[int][]RunResult{}}
		s.Runs[23] = []RunResult{
			{Mode: "adaptive", Goodput: 20.0, Failed: 197},
			{Mode: "static", Cap: 96, Goodput: 16.0, Failed: 605},
		}
		if tc.budget > 0 {
			s.Runs[23] = append(s.Runs[23], RunResult{Mode: budget, Cap: 256, Goodput: tc.budget, Failed: tc.failed})
		}
		var found *Check
		row := s.row(sc)
		for i, c := range row.Checks {
			if strings.HasPrefix(c.What, "against the token budget alone") {
				found = &row.Checks[i]
			}
		}
		if tc.budget == 0 {
			if found != nil {
				t.Errorf("%s: a check without the run: %+v", tc.name, *found)
			}
			continue
		}
		if found == nil {
			t.Fatalf("%s: no comparison in %+v", tc.name, row.Checks)
		}
		if found.OK != tc.want || (found.Reported != "") != tc.reported {
			t.Errorf("%s: %+v, want OK %v, reported %v", tc.name, *found, tc.want, tc.reported)
		}
	}
}
