package control

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/kneecap/kneecap/slo"
)

// finishAt reports k finished requests at the cap, good of them meeting
// their targets as the client felt them.
func finishAt(c *Controller, now time.Time, k, good int) {
	for i := range k {
		c.ObserveDone(now, Finished{Targets: c.op, Running: float64(c.Cap()), EngineTTFT: 300 * time.Millisecond,
			TPOT: 50 * time.Millisecond, Hold: time.Second, OutputTokens: 120, Good: i < good})
	}
}

// slowFirstTokens makes the model predict engine TTFT far over the target
// at the cap, with steady chunk gaps, for d.
func slowFirstTokens(c *Controller, e *engine, now time.Time, d time.Duration) time.Time {
	n := c.Cap()
	for end := now.Add(d); now.Before(end); {
		for k := 0; k < 20; k++ {
			now = now.Add(50 * time.Millisecond)
			c.ObserveGap(now, n, e.gap(n), false)
			if k%5 == 0 {
				c.ObserveFirst(now, n, 3*time.Second)
			}
		}
	}
	return now
}

// A few measured misses at the cap are evidence only when the share that
// met the targets could not plausibly come from a level meeting P: 10 good
// of 12 may come from P90 (one standard error), 14 of 24 may not.
func TestMeasuredMissNeedsMoreThanChance(t *testing.T) {
	e, c, now, capBefore, load := atKneeUnderDemand(t)
	// The slow first tokens are a shift: what was measured before is
	// forgotten, and the model predicts a miss at the cap.
	now = slowFirstTokens(c, e, now, 10*time.Second)
	for i := 0; i < 10 && c.shifts == 0; i++ {
		now = now.Add(time.Second)
		if d := c.Decide(now, load); d.Cap < capBefore {
			t.Fatalf("cap lowered %d->%d with no request finished under it: %s", capBefore, d.Cap, d.Reason)
		}
	}
	if c.shifts == 0 {
		t.Fatal("setup: the slow first tokens were not taken for a shift")
	}
	now = now.Add(time.Second)
	finishAt(c, now, 12, 10)
	for range 5 {
		now = now.Add(time.Second)
		if d := c.Decide(now, load); d.Cap < capBefore {
			t.Fatalf("cap lowered %d->%d on 2 misses of 12: %s", capBefore, d.Cap, d.Reason)
		}
	}
	now = now.Add(time.Second)
	finishAt(c, now, 12, 4)
	lowered := false
	for range 5 {
		now = now.Add(time.Second)
		if d := c.Decide(now, load); d.Cap < capBefore {
			lowered = true
			break
		}
	}
	if !lowered {
		t.Fatalf("cap held at %d with 14 good of 24 finished under it", capBefore)
	}
}

// runLightLoad runs the controller at a cap reached under demand, then with
// one request running for three minutes, and returns the time reached.
func runLightLoad(t *testing.T, c *Controller, e *engine) time.Time {
	t.Helper()
	now, _ := e.run(t, c, t0, 3*time.Minute)
	e.demand = 1
	now, _ = e.run(t, c, now, 3*time.Minute)
	return now
}

// Under light load, where the engine runs far below the cap on average,
// misses (prefills of a rare burst colliding) do not lower the cap: a
// lower cap would only queue the next burst past its TTFT target. Under
// demand the same misses do.
func TestLightLoadMissesDoNotLowerTheCap(t *testing.T) {
	for _, light := range []bool{true, false} {
		e := bf16Like()
		c := NewController(ControllerConfig{})
		var now time.Time
		if light {
			now = runLightLoad(t, c, e)
		} else {
			now, _ = e.run(t, c, t0, 5*time.Minute)
		}
		capBefore := c.Cap()
		lowered := false
		for i := range 60 {
			now = now.Add(time.Second)
			finishAt(c, now, 2, 0)
			// Every 20 s a burst reaches the cap for a moment.
			load := Load{Running: min(capBefore, e.demand), PeakRunning: min(capBefore, e.demand)}
			if i%20 == 0 {
				load.PeakRunning = capBefore
			}
			if d := c.Decide(now, load); d.Cap < capBefore {
				lowered = true
				if light {
					t.Fatalf("light load: cap lowered %d->%d: %s", capBefore, d.Cap, d.Reason)
				}
				break
			}
		}
		if !light && !lowered {
			t.Fatalf("under demand: cap held at %d after 50 misses finished under it", capBefore)
		}
	}
}

// A request that would be refused (it would wait past its TTFT target)
// raises the cap instead when the engine runs at most half the cap on
// average and the level above meets the targets; under demand it is
// refused.
func TestBurstUnderLightLoadRaisesInsteadOfRefusing(t *testing.T) {
	// A saturated engine: each running request slows every chunk by 5 ms,
	// so more running requests add no goodput (the plan never raises for
	// it) while levels well above the cap still meet TPOT 100 ms. A
	// request that already waited 0.9 s cannot meet TTFT 1 s in the queue.
	saturated := func(demand int) *engine {
		return &engine{gapB: 5 * time.Millisecond, ttftA: 300 * time.Millisecond, out: 120, demand: demand}
	}
	late := func(now time.Time) Query {
		return Query{Arrival: now.Add(-900 * time.Millisecond), Targets: slo.Targets{TTFT: time.Second}}
	}

	e := saturated(64)
	c := NewController(ControllerConfig{})
	now, _ := e.run(t, c, t0, 5*time.Minute)
	if v := c.Admit(now, late(now)); v.OK {
		t.Fatalf("under demand (cap %d, all running) admitted a request that cannot meet its TTFT target: %+v; %s", c.Cap(), v, c.Status(now).Reason)
	}

	e = saturated(64)
	c = NewController(ControllerConfig{})
	now = runLightLoad(t, c, e)
	capBefore := c.Cap()
	v := c.Admit(now, late(now))
	if !v.OK || !v.Raised || v.Cap != capBefore+1 {
		t.Fatalf("light load at cap %d: verdict %+v, want admitted by a raise to %d", capBefore, v, capBefore+1)
	}
	if r := c.Status(now).Reason; !strings.Contains(r, "burst") {
		t.Errorf("reason %q, want it to name the burst", r)
	}
}

// Holding the knee, the controller probes the level above when the model
// rests on one level; each probe that finds nothing better there makes the
// next one from the same level wait twice as long.
func TestProbesBackOff(t *testing.T) {
	e := bf16Like()
	c := NewController(ControllerConfig{})
	now, caps := e.run(t, c, t0, 3*time.Minute)
	knee := caps[len(caps)-1]
	var probes []time.Duration
	for i := range 60 {
		var cs []int
		now, cs = e.run(t, c, now, time.Minute)
		for k := 1; k < len(cs); k++ {
			if cs[k-1] == knee && cs[k] == knee+1 {
				probes = append(probes, time.Duration(i)*time.Minute+time.Duration(k)*time.Second)
			}
		}
	}
	t.Logf("probes from %d at %v", knee, probes)
	if len(probes) == 0 {
		t.Fatalf("no probe above the knee %d in an hour", knee)
	}
	for i := 2; i < len(probes); i++ {
		if probes[i]-probes[i-1] < probes[i-1]-probes[i-2] {
			t.Errorf("probes from %d at %v: the gaps do not grow", knee, probes)
		}
	}
	if len(probes) > 4 {
		t.Errorf("%d probes from %d in an hour, want at most 4 (8, 16, 32 min apart)", len(probes), knee)
	}
}

// With the token model's decode step learnt, the level above the knee is
// predicted from the KV tokens one more request holds, not extrapolated
// from one level: the controller does not probe it.
func TestNoProbeWithTheTokenModel(t *testing.T) {
	e := bf16Like()
	e.prompt = 2000
	c := NewController(ControllerConfig{})
	now, _ := e.run(t, c, t0, 3*time.Minute)
	if c.tokenGap(now) == nil {
		t.Fatal("the token model's step is not learnt")
	}
	before := maps.Clone(c.probes) // probes before the model was learnt
	for range 60 {
		now, _ = e.run(t, c, now, time.Minute)
		if !maps.Equal(c.probes, before) {
			t.Fatalf("probed at cap %d: %v (before: %v)", c.Cap(), c.probes, before)
		}
	}
}
