package scenarios

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
)

// TestScalingJoin runs scenario 29 in virtual time: a cold replica joins a
// loaded fleet of two datacenter replicas, the adaptive fleet against
// static fleets at JoinOracleCaps, in parallel. It fails on a check of
// JoinReport not listed as not met (report.go), and when the balancer
// could not tell which replica served a good request.
func TestScalingJoin(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("skipped in -short and under -race (CI runs it in the suite's step)")
	}
	s := Scenario29
	var mu sync.Mutex
	oracles := map[int]ScalingResult{}
	var auto ScalingResult
	t.Run("fleets", func(t *testing.T) {
		for _, c := range append([]int{0}, JoinOracleCaps...) {
			t.Run(fmt.Sprintf("cap-%d", c), func(t *testing.T) {
				t.Parallel()
				fs := s
				fs.StaticCap = c
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
				if c == 0 {
					auto = res
				} else {
					oracles[c] = res
				}
			})
		}
	})
	if t.Failed() {
		return
	}
	checks, summary := JoinReport(s, auto, oracles)
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
