package scenarios

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestScenarios runs the suite in virtual time. Without flags it runs the
// issue's sweep, every static cap 1..64 as the issue asks (568 runs, about
// 10 minutes on a 2-core machine), and fails on any of the issue's
// thresholds; it is heavy, so it skips under -race and in -short. CI runs
// it in its own step:
//
//	go test -count=1 -timeout 30m -run TestScenarios ./scenarios/
//
// Its flags (flags_test.go, after -args) choose the scenarios, caps, seed,
// timing, a JSON file of the table, or real time instead; thresholds fail
// the test only on the issue's sweep (any subset of its scenarios), and
// are otherwise printed in the table only. -v shows the table and a line
// per run as it ends. Ctrl-C stops it: the runs under way finish, the rest
// are skipped, and it fails with no table.
func TestScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("heavy: skipped in -short")
	}
	opt, issueSweep, err := flagOptions()
	if err != nil {
		t.Fatal(err)
	}
	opt.Context = interruptible(t)
	if *flagRealTime {
		testRealTime(t, opt)
		return
	}
	if raceEnabled {
		t.Skip("heavy: run without -race (CI does, in its own step)")
	}
	opt.Progress = func(sc Scenario, r RunResult) {
		mode := r.Mode
		if r.Mode == "static" || r.Mode == "engine" && r.Cap > 0 {
			mode = fmt.Sprintf("%s-%d", r.Mode, r.Cap)
		}
		t.Logf("scenario %d %-16s %-18s goodput %.3f req/s (wall %v)", sc.ID, sc.Name, mode, r.Goodput, r.Wall.Round(time.Millisecond))
	}
	s := RunSuite(t, opt)
	if err := opt.Context.Err(); err != nil {
		t.Fatalf("interrupted: stopped after %d runs, no table", s.runs())
	}
	var b strings.Builder
	if err := WriteTable(&b, s); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	for _, sc := range s.Scenarios {
		if r, ok := s.find(sc.ID, "adaptive"); ok {
			t.Logf("scenario %d adaptive: %d good of %d completed, %d rejected, %d failed (%s clients), %.2f idle slots, %d returns, %d refused again; cap trajectory %s",
				sc.ID, r.Good, r.Completed, r.Rejected, r.Failed, r.Clients, r.Outside.IdleSlots, r.Outside.Returned, r.Outside.RefusedAgain, trajectoryString(r.Caps))
		}
	}
	if *flagJSON != "" {
		if err := writeJSONFile(*flagJSON, s); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", *flagJSON)
	}
	// The mixes (14, 15) sweep no caps and run no peers: their
	// thresholds hold on seed 1 with the default timing.
	if opt.Seed == 1 && opt.Timing == DefaultTiming {
		for _, r := range s.MixRows() {
			for _, c := range r.Checks {
				if !c.OK && c.Reported == "" {
					t.Errorf("%s: %s", r.Scenario, c.What)
				}
			}
		}
	}
	if !issueSweep {
		t.Log("thresholds printed above, not enforced: the flags chose other than the issue's sweep (caps 1-64 and the peers, seed 1, the default timing)")
		return
	}
	// The issue's thresholds are printed above (ok / MISS). Runs of one
	// seed are exactly repeatable (TestRunsRepeat), so CI checks every
	// threshold on seed 1.
	for _, r := range s.Rows() {
		for _, c := range r.Checks {
			if !c.OK && c.Reported == "" {
				t.Errorf("%s: %s", r.Scenario, c.What)
			}
		}
	}
}

// runs counts the finished runs.
func (s *Suite) runs() (n int) {
	for _, rs := range s.Runs {
		n += len(rs)
	}
	return n
}

func writeJSONFile(path string, s *Suite) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteJSON(f, s); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// testRealTime runs each chosen scenario in real time over TCP, its modes
// at once, and logs a table per scenario.
func testRealTime(t *testing.T, opt Options) {
	if *flagJSON != "" {
		t.Fatal("-json-out is for the virtual-time suite, not -real-time")
	}
	modes := []Mode{{Kind: "engine"}, {Kind: "adaptive"}}
	if len(opt.Caps) <= 8 {
		for _, c := range opt.Caps {
			modes = append(modes, Mode{Kind: "static", Cap: c})
		}
	}
	for _, sc := range All() {
		if len(opt.Scenarios) > 0 && !slices.Contains(opt.Scenarios, sc.ID) {
			continue
		}
		res, err := RunRealTime(opt.Context, sc, modes, opt.Timing, *flagKnee, opt.Seed)
		if opt.Context.Err() != nil {
			t.Fatalf("interrupted in scenario %d", sc.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "scenario %d %s, real time over TCP on 127.0.0.1, %v warm-up + %v window\n", sc.ID, sc.Name, opt.Timing.Warmup, opt.Timing.Window)
		fmt.Fprintf(&b, "%-10s %8s %6s %9s %9s %11s %9s %6s\n", "mode", "cap", "good", "completed", "rejected", "goodput/s", "p50 TTFT", "final")
		for _, r := range res {
			fmt.Fprintf(&b, "%-10s %8d %6d %9d %9d %11.3f %9s %6d\n", r.Mode, r.Cap, r.Good, r.Completed, r.Rejected, r.Goodput, r.MedianTTFT.Round(time.Millisecond), r.FinalCap)
		}
		t.Log("\n" + b.String())
	}
}
