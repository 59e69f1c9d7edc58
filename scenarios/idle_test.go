package scenarios

import (
	"testing"
	"testing/synctest"
)

// TestIdleBurst runs scenario 21 (idle, then a burst at the old load) with
// the adaptive controller and with scenario 1's oracle cap (6), in virtual
// time, and holds the adaptive run to the threshold: the burst's
// first 30 s serve at least 0.9 of the steady goodput, and the idle minute
// leaves the cap where it was. About 7 s of CPU; CI runs it without the
// race detector, with TestScenarios.
func TestIdleBurst(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("skipped in -short and under -race (CI runs it in the suite's step)")
	}
	for _, mode := range []Mode{{Kind: "adaptive"}, {Kind: "static", Cap: 6}} {
		t.Run(mode.String(), func(t *testing.T) {
			var res IdleResult
			var err error
			synctest.Test(t, func(t *testing.T) { res, err = Scenario21.Run(t.Context(), mode, *flagSeed) })
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("scenario 21 %s\n  caps %s", res, trajectoryString(res.Trajectory))
			if mode.Kind != "adaptive" {
				return
			}
			if !res.OK() {
				t.Errorf("the burst's first 30 s served %.3f req/s, under %.1f x the steady %.3f", res.Burst, IdleBurstShare, res.Steady)
			}
			if res.CapIdle > res.CapBefore {
				t.Errorf("the cap rose from %d to %d while idle", res.CapBefore, res.CapIdle)
			}
			if res.CapPeak > 2*res.CapBefore {
				t.Errorf("the burst raised the cap to %d, over twice the %d learned before", res.CapPeak, res.CapBefore)
			}
		})
	}
}
