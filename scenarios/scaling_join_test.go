package scenarios

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
)

// TestScalingJoin runs scenario 29 in virtual time: a replica joins a
// loaded fleet of two datacenter replicas from the fleet's state file, the
// adaptive fleet against static fleets at JoinOracleCaps and against the
// same fleet with a cold joiner (printed), in parallel. It fails on a check of
// JoinReport not listed as not met (report.go), and when the balancer
// could not tell which replica served a good request.
func TestScalingJoin(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("skipped in -short and under -race (CI runs it in the suite's step)")
	}
	s := Scenario29
	var mu sync.Mutex
	oracles := map[int]ScalingResult{}
	var auto, cold ScalingResult
	t.Run("fleets", func(t *testing.T) {
		// -1: the cold joiner's fleet; 0: the adaptive fleet with the state file.
		for _, c := range append([]int{0, -1}, JoinOracleCaps...) {
			t.Run(fmt.Sprintf("cap-%d", c), func(t *testing.T) {
				t.Parallel()
				fs := s
				if c < 0 {
					fs = Scenario29Cold
				}
				fs.StaticCap = max(c, 0)
				var res ScalingResult
				var err error
				synctest.Test(t, func(t *testing.T) { res, err = fs.Run(t.Context(), *flagSeed) })
				if err != nil {
					t.Fatal(err)
				}
				if n := len(res.Good); res.Unattributed > n/100 {
					t.Errorf("cap %d: %d of %d good requests not told apart by replica", c, res.Unattributed, n)
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case c == 0:
					auto = res
				case c < 0:
					cold = res
				default:
					oracles[c] = res
				}
			})
		}
	})
	if t.Failed() {
		return
	}
	checks, summary := JoinReport(s, auto, cold, oracles)
	t.Logf("scenario 29 (seed %d): %d completed, %d rejected, %d failed, %d good not told apart by replica; %s", *flagSeed, auto.Completed, auto.Rejected, auto.Failed, auto.Unattributed, summary)
	for _, c := range checks {
		switch {
		case c.OK:
			t.Logf("ok    %s", c.What)
		case c.Reported != "":
			t.Logf("miss (%s)  %s", c.Reported, c.What)
		default:
			t.Errorf("MISS  %s", c.What)
		}
	}
}
