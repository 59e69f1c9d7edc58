package control

import (
	"testing"
	"time"
)

// finishBad reports k finished requests at the cap that missed their
// targets as the client felt them (a queue wait the model does not see).
func finishBad(c *Controller, now time.Time, k int) {
	for range k {
		c.ObserveDone(now, Finished{Targets: c.op, Running: float64(c.Cap()), EngineTTFT: 300 * time.Millisecond,
			TPOT: 50 * time.Millisecond, Hold: time.Second, OutputTokens: 120, Good: false})
	}
}

// atKneeUnderDemand runs an adaptive controller on bf16-like physics for
// three minutes with demand far above the knee, and returns the engine, the
// controller, the time reached, the cap it holds and a load of requests
// queued at that cap.
func atKneeUnderDemand(t *testing.T) (*engine, *Controller, time.Time, int, Load) {
	t.Helper()
	e := bf16Like()
	c := NewController(ControllerConfig{})
	now, caps := e.run(t, c, t0, 3*time.Minute)
	n := caps[len(caps)-1]
	return e, c, now, n, Load{Running: n, Queued: 10, PeakRunning: n, PeakQueued: 10}
}

// Where requests finished under the cap, their measured attainment takes
// over from the prediction; and attainment falls with n outward from the
// cap, so levels above it promise no more than it measured.
func TestMeasuredAttainmentTakesOverAndFallsFromTheCap(t *testing.T) {
	e := bf16Like()
	c := NewController(ControllerConfig{Fixed: true, InitialCap: 4})
	now, _ := e.run(t, c, t0, time.Minute)
	c.Decide(now, Load{})
	before := c.Status(now).Levels
	if before[3].Attainment < 0.9 || before[4].Attainment < 0.9 {
		t.Fatalf("predicted attainment at 4 and 5 %.2f %.2f, want >= 0.9 before the misses", before[3].Attainment, before[4].Attainment)
	}
	now = now.Add(time.Second)
	finishBad(c, now, 60)
	c.Decide(now, Load{})
	lv := c.Status(now).Levels
	if a := lv[3].Attainment; a > 0.3 {
		t.Errorf("attainment at the cap 4 is %.2f after 60 misses there, want the measured share (about 0)", a)
	}
	for n := 5; n <= 6; n++ {
		if lv[n-1].Attainment > lv[3].Attainment {
			t.Errorf("attainment at %d is %.2f, above the cap's %.2f", n, lv[n-1].Attainment, lv[3].Attainment)
		}
	}
	if lv[0].Attainment < lv[3].Attainment {
		t.Errorf("attainment at 1 is %.2f, below the cap's %.2f", lv[0].Attainment, lv[3].Attainment)
	}
}

// A predicted miss of engine TTFT alone does not lower the cap until
// requests finished under it confirm it.
func TestTTFTOnlyMissWaitsForEvidence(t *testing.T) {
	e, c, now, capBefore, load := atKneeUnderDemand(t)
	// Slow first tokens at the cap, steady chunk gaps, nothing finishes.
	for range 10 {
		now = slowFirstTokens(c, e, now, time.Second)
		if d := c.Decide(now, load); d.Cap < capBefore {
			t.Fatalf("cap lowered %d->%d on predicted TTFT alone: %s", capBefore, d.Cap, d.Reason)
		}
	}
	// Requests that ran under the cap now finish and miss.
	lowered := false
	for range 10 {
		now = now.Add(time.Second)
		finishBad(c, now, 5)
		if d := c.Decide(now, load); d.Cap < capBefore {
			lowered = true
			break
		}
	}
	if !lowered {
		t.Fatalf("cap held at %d after 50 misses finished under it", capBefore)
	}
}

// Time at a level counts toward its measured goodput only while there is
// demand: a cap idling under light load is not a poor level.
func TestDwellCountsOnlyWithDemand(t *testing.T) {
	c := NewController(ControllerConfig{InitialCap: 4})
	now := t0
	for range 30 {
		now = now.Add(time.Second)
		c.Decide(now, Load{Running: 1, PeakRunning: 1})
	}
	if d := c.dwell.get(4); d.w != 0 {
		t.Fatalf("dwell at 4 is %.1fs with one request running and none waiting", d.w)
	}
	for range 30 {
		now = now.Add(time.Second)
		c.Decide(now, Load{Running: 4, PeakRunning: 4, PeakQueued: 2})
	}
	if d := c.dwell.get(4); d.w < 20 {
		t.Fatalf("dwell at 4 is %.1fs after 30s at the cap with requests queued", d.w)
	}
}
