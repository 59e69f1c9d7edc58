package control

import (
	"math"
	"testing"
	"time"

	"github.com/kneecap/kneecap/slo"
)

// headerDone reports a finished request whose x-slo-* headers gave it
// targets of its own.
func headerDone(c *Controller, now time.Time, t slo.Targets) {
	c.ObserveDone(now, Finished{Targets: t, Running: float64(c.Cap()), EngineTTFT: 300 * time.Millisecond,
		TPOT: 50 * time.Millisecond, Hold: time.Second, OutputTokens: 20, Good: true})
}

// Requests with random x-slo-* values create classes of their own; the
// controller keeps at most 16, and they evict only each other: the
// operator's class and what was measured of it stay, however faint.
func TestHeaderClassesNeverEvictTheOperators(t *testing.T) {
	e := bf16Like()
	c := NewController(ControllerConfig{Fixed: true, InitialCap: 4})
	now, _ := e.run(t, c, t0, time.Minute)
	if m := c.measured[c.op].get(4); m.w < measuredMin {
		t.Fatalf("setup: %.1f requests measured at the cap, want at least %d", m.w, measuredMin)
	}
	// Half an hour of requests with targets of their own, each different:
	// the operator's class fades to nothing meanwhile.
	for i := range 2000 {
		now = now.Add(900 * time.Millisecond)
		headerDone(c, now, slo.Targets{TTFT: time.Duration(1+i) * time.Millisecond, TPOT: 7 * time.Millisecond})
		if len(c.classes) > maxClasses {
			t.Fatalf("%d classes kept, want at most %d", len(c.classes), maxClasses)
		}
	}
	if c.classes[c.op] == nil {
		t.Fatal("the operator's class was evicted by classes from headers")
	}
	if c.measured[c.op] == nil || c.measured[c.op][4] == nil || c.measured[c.op][4].w == 0 {
		t.Fatal("the operator's measured attainment was evicted by classes from headers")
	}
	last := slo.Targets{TTFT: 2000 * time.Millisecond, TPOT: 7 * time.Millisecond}
	if c.classes[last] == nil || len(c.classes) != maxClasses {
		t.Errorf("%d classes, newest kept %v: header classes should evict each other", len(c.classes), c.classes[last] != nil)
	}
	// The operator's class comes back into a table full of header classes
	// by evicting one of them.
	c2 := NewController(ControllerConfig{})
	for i := range 3 * maxClasses {
		headerDone(c2, t0.Add(time.Duration(i)*time.Second), slo.Targets{TTFT: time.Duration(1+i) * time.Millisecond})
	}
	headerDone(c2, t0.Add(time.Hour), c2.op)
	if c2.classes[c2.op] == nil || len(c2.classes) != maxClasses {
		t.Errorf("after header classes, the operator's request: %d classes, operator's kept %v", len(c2.classes), c2.classes[c2.op] != nil)
	}
}

// A zero target on a request (x-slo-ttft-ms: 0) is no bound on that
// latency: its class is its own, not the operator's; its predicted
// attainment counts that latency as always met; and the deadline check
// never refuses a request without a TTFT bound.
func TestZeroTargetIsNoBound(t *testing.T) {
	_, c, now, n, _ := atKneeUnderDemand(t)
	noTTFT := slo.Targets{TPOT: c.op.TPOT} // the operator's TPOT, TTFT unbounded
	headerDone(c, now, noTTFT)
	if c.classes[noTTFT] == nil {
		t.Errorf("a request with TTFT 0 was counted to another class: %v", c.classes)
	}
	now = now.Add(time.Second)
	c.Decide(now, Load{Running: n, PeakRunning: n})

	// Attainment: with no bound at all every level computed meets it; a
	// TTFT bound no engine can meet is met nowhere; no TTFT bound is met
	// at least as often as the operator's, which adds one.
	free, tight := c.attainment(slo.Targets{}), c.attainment(slo.Targets{TTFT: time.Millisecond})
	op, ttftFree := c.attainment(c.op), c.attainment(noTTFT)
	for k := 1; k <= 2*n; k++ {
		if free[k] != 1 {
			t.Errorf("no targets: attainment %.3f at %d, want 1", free[k], k)
		}
		if tight[k] > 0.01 {
			t.Errorf("TTFT 1ms: attainment %.3f at %d, want 0", tight[k], k)
		}
		if ttftFree[k] < op[k]-0.01 { // (the operator's measured attainment takes over where the cap held)
			t.Errorf("at %d: attainment %.3f without a TTFT bound < %.3f with the operator's", k, ttftFree[k], op[k])
		}
	}

	// The deadline check: a request that waited an hour misses any TTFT
	// bound, but one without a bound is let queue.
	late := now.Add(-time.Hour)
	if v := c.Admit(now, Query{Arrival: late, Ahead: 5, Targets: slo.Targets{TTFT: time.Second}}); v.OK && !v.Raised {
		t.Errorf("admitted a request an hour past its 1s TTFT target: %+v", v)
	}
	if v := c.Admit(now, Query{Arrival: late, Ahead: 5, Targets: noTTFT}); !v.OK {
		t.Errorf("refused a request with no TTFT bound: %+v", v)
	}
	if v := c.Admit(now, Query{Arrival: late, Paced: true, Targets: noTTFT}); !v.OK {
		t.Errorf("refused a paced request with no TTFT bound: %+v", v)
	}
}

// A request with no target at all (a batch class without targets) runs on
// the engine but has nothing to meet: it forms no class, and moves neither
// the measured attainment nor the goodput counted to the cap, however many
// come; the model still learns its hold time.
func TestNoTargetsCountNowhereButTheModel(t *testing.T) {
	_, c, now, n, _ := atKneeUnderDemand(t)
	classes, att, good := len(c.classes), c.measuredAttainment(now), c.goodSince
	hold := c.holdAvg
	for range 500 {
		now = now.Add(100 * time.Millisecond)
		c.ObserveDone(now, Finished{Running: float64(n), EngineTTFT: 300 * time.Millisecond,
			TPOT: 50 * time.Millisecond, Hold: time.Minute, OutputTokens: 20, Good: true})
	}
	if len(c.classes) != classes || c.classes[slo.Targets{}] != nil {
		t.Errorf("requests without targets formed a class: %v", c.classes)
	}
	if got := c.measuredAttainment(now); math.Abs(got-att) > 1e-9 {
		t.Errorf("measured attainment %.3f, was %.3f: requests without targets moved it", got, att)
	}
	if c.goodSince != good {
		t.Errorf("%d good completions counted, was %d", c.goodSince, good)
	}
	if c.holdAvg == hold {
		t.Error("the model did not learn the hold time of requests without targets")
	}
}
