package scenarios

import (
	"os"
	"strings"
	"testing"
)

// ciCaps is the subset of static caps CI sweeps for the oracle: every cap
// around the knees of gb10-bf16 and gb10-fp8 with the second calibration
// workload, plus the powers of two. `kneecap scenarios` sweeps 1..64.
var ciCaps = []int{1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 32, 64}

// TestScenarios runs the suite and checks the thresholds. It is
// heavy (hundreds of runs of the whole path), so it skips under -race and
// in -short; CI runs it in its own step:
//
//	go test -count=1 -run TestScenarios ./scenarios/
//
// KNEECAP_SCENARIOS=1,3 limits it to some scenarios.
func TestScenarios(t *testing.T) {
	if raceEnabled {
		t.Skip("heavy: run without -race (CI does, in its own step)")
	}
	if testing.Short() {
		t.Skip("heavy: skipped in -short")
	}
	opt := Options{Caps: ciCaps, Seed: 1}
	if v := os.Getenv("KNEECAP_SCENARIOS"); v != "" {
		for _, f := range strings.Split(v, ",") {
			var id int
			for _, ch := range f {
				id = id*10 + int(ch-'0')
			}
			opt.Scenarios = append(opt.Scenarios, id)
		}
	}
	s := RunSuite(t, opt)
	var b strings.Builder
	if err := WriteTable(&b, s); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	for _, sc := range s.Scenarios {
		if r, ok := s.find(sc.ID, "adaptive"); ok {
			t.Logf("scenario %d adaptive: %d good of %d completed, %d rejected; cap trajectory %s", sc.ID, r.Good, r.Completed, r.Rejected, trajectoryString(r.Caps))
		}
	}
	for _, r := range s.Rows() {
		for _, c := range r.Checks {
			if !c.OK {
				t.Errorf("%s: %s", r.Scenario, c.What)
			}
		}
	}
}
