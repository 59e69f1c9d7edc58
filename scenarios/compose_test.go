package scenarios

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/kneecap/kneecap/sim"
)

// composeRun runs a fixed fleet of n replicas (step factors per replica)
// behind scenario 22's balancer at an open-loop rate for 8 minutes, and
// returns its goodput over the last 6.
func composeRun(t *testing.T, n int, rate float64, factors []float64, weighted bool, tries int) float64 {
	t.Helper()
	s := Scaling{
		Profile: sim.GB10BF16, Workload: sim.SecondWorkload, Rate: rate,
		Phases: [3]time.Duration{8 * time.Minute, 0, 0}, Fixed: n, HPA: DefaultHPA,
		StepFactors: factors, Weighted: weighted, Tries: tries,
	}
	var res ScalingResult
	var err error
	synctest.Test(t, func(t *testing.T) { res, err = s.Run(t.Context(), *flagSeed) })
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed > 0 {
		t.Errorf("%d replicas at %.2f req/s: %d requests failed: %v", n, rate, res.Failed, res.FailedSamples)
	}
	return res.GoodputBetween(2*time.Minute, 8*time.Minute)
}

// TestFleetComposes is the fleet of issue 23 in virtual time, where no
// other process shares the clock: three replicas behind a least-request
// balancer that retries a refusal on another replica and weighs replicas
// by their caps (HAProxy with kneecap's agent-check, deploy/fleet), each
// replica its own kneecap, against one replica alone at a third of the
// rate, open loop at about 1.3 times a replica's knee (clients that never
// retry). The fleet must serve at least 0.95 of three replicas alone, and
// with the third replica 1.25x slower at least 0.95 of two fast replicas
// and the slow one alone. About 25 s of CPU.
func TestFleetComposes(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("skipped in -short and under -race (CI runs it in the suite's step)")
	}
	const rate = 0.7 // a replica's share
	fast := composeRun(t, 1, rate, nil, false, 3)
	slow := composeRun(t, 1, rate, []float64{1.25}, false, 3)
	homo := composeRun(t, 3, 3*rate, nil, true, 3)
	hetero := composeRun(t, 3, 3*rate, []float64{1, 1, 1.25}, true, 3)
	t.Logf("alone: %.3f good req/s (the slower engine %.3f); three behind the balancer: %.3f (%.3f of three alone); with the third slower: %.3f (%.3f of the sum alone)",
		fast, slow, homo, homo/(3*fast), hetero, hetero/(2*fast+slow))
	if homo < 0.95*3*fast {
		t.Errorf("three replicas served %.3f req/s, under 0.95 of three alone (%.3f)", homo, 3*fast)
	}
	if hetero < 0.95*(2*fast+slow) {
		t.Errorf("with the slower replica the fleet served %.3f req/s, under 0.95 of the sum alone (%.3f)", hetero, 2*fast+slow)
	}
}
