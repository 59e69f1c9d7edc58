package scenarios

import (
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// ScalingReaction is how soon after demand doubles the autoscaled fleet
// must serve 0.9 of the right-sized fleet's goodput: the HPA's reaction
// (the metric's 2-minute average, a 15 s sync, the 60 s scale-up window)
// plus one cold start (the 2-minute model load, and the minute a fresh
// gateway takes to find its knee).
var ScalingReaction = DefaultHPA.MetricWindow + DefaultHPA.Sync + DefaultHPA.UpWindow + Scenario22.LoadDelay + time.Minute

// TestScaling runs scenario 22 (issue 23) in virtual time: the fleet
// scaled by the HPA's rule on kneecap_demand_ratio, against the
// right-sized fleet (the size the autoscaler settled on while demand was
// doubled, fixed from the start). It holds the thresholds: within
// ScalingReaction of the doubling, a minute of the autoscaled fleet serves
// at least 0.9 of the right-sized fleet's goodput; while the demand holds
// the fleet only grows; after it halves the fleet shrinks, and no request
// is cut (every one ends in a 200 or a 429). About 40 s of CPU.
func TestScaling(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("skipped in -short and under -race (CI runs it in the suite's step)")
	}
	s := Scenario22
	var auto ScalingResult
	var err error
	synctest.Test(t, func(t *testing.T) { auto, err = s.Run(t.Context(), *flagSeed) })
	if err != nil {
		t.Fatal(err)
	}
	doubled, halved := s.Phases[0], s.Phases[0]+s.Phases[1]
	size := auto.SizeAt(halved)
	fs := s
	fs.Fixed, fs.Phases[2] = size, 0
	var fixed ScalingResult
	synctest.Test(t, func(t *testing.T) { fixed, err = fs.Run(t.Context(), *flagSeed) })
	if err != nil {
		t.Fatal(err)
	}
	// The right-sized fleet's goodput while demand is doubled, from a
	// minute after the doubling (its requests then are the doubled load's).
	want := fixed.GoodputBetween(doubled+time.Minute, halved)
	reached := time.Duration(-1)
	for at := doubled; at+time.Minute <= halved; at += 15 * time.Second {
		if auto.GoodputBetween(at, at+time.Minute) >= 0.9*want {
			reached = at + time.Minute - doubled
			break
		}
	}
	var b strings.Builder
	for at := time.Duration(0); at < halved+s.Phases[2]; at += 5 * time.Minute {
		b.WriteString("\n  ")
		b.WriteString(at.String() + ": " + ftoa(auto.GoodputBetween(at, at+5*time.Minute)) + " good req/s, " + itoa(auto.SizeAt(at+5*time.Minute)) + " replicas at the end")
	}
	t.Logf("scenario 22, autoscaled: %d completed, %d rejected, %d failed %v; scale events:\n  %s\n  sizes %s%s",
		auto.Completed, auto.Rejected, auto.Failed, auto.FailedSamples, strings.Join(auto.Events, "\n  "), trajectoryString(auto.Replicas), b.String())
	t.Logf("right-sized fleet (%d replicas): %.3f good req/s while demand is doubled; the autoscaled fleet reached 0.9 of it %v after the doubling (bound %v), and served %.3f over the doubled phase's last 10 minutes",
		size, want, reached, ScalingReaction, auto.GoodputBetween(halved-10*time.Minute, halved))

	if reached < 0 || reached > ScalingReaction {
		t.Errorf("the autoscaled fleet did not reach 0.9 of the right-sized fleet's goodput (%.3f req/s) within %v of the doubling (reached after %v)", want, ScalingReaction, reached)
	}
	for _, p := range auto.Replicas {
		if p.At > doubled && p.At < halved && p.Cap < auto.SizeAt(p.At-time.Second) {
			t.Errorf("the fleet shrank to %d at %v while demand held", p.Cap, p.At)
		}
	}
	if auto.SizeAt(halved+s.Phases[2]) >= size {
		t.Errorf("the fleet did not scale in after demand halved: %d replicas at the end, %d while doubled", auto.SizeAt(halved+s.Phases[2]), size)
	}
	if auto.Failed > 0 {
		t.Errorf("%d requests failed (a stream cut by a scale-in?): %v", auto.Failed, auto.FailedSamples)
	}
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', 3, 64) }
func itoa(n int) string     { return strconv.Itoa(n) }
