package control

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// h100Like is a datacenter engine in the fluid model: a 7 ms step and 60 us
// per running sequence, 200-token answers, 512 users. With TPOT 50 ms its
// knee is far above DefaultMaxCap (7 + 0.06 n <= 47.5 ms up to n = 675).
func h100Like() *engine {
	return &engine{gapA: 7 * time.Millisecond, gapB: 60 * time.Microsecond,
		ttftA: 40 * time.Millisecond, ttftB: 200 * time.Microsecond, out: 200, demand: 512}
}

// From a cold start the cap doubles while the targets hold with margin: a
// knee in the hundreds is reached in seconds, not one level every 2 s.
func TestRampReachesADatacenterKneeInSeconds(t *testing.T) {
	e := h100Like()
	c := NewController(ControllerConfig{TPOT: 50 * time.Millisecond})
	_, caps := e.run(t, c, t0, 30*time.Second)
	if caps[19] < 256 {
		t.Fatalf("cap %d after 20 s, want >= 256 (a doubling every 2 s from 1); caps %v", caps[19], caps)
	}
	st := c.Status(t0.Add(30 * time.Second))
	if st.Ramp.From != 1 || st.Ramp.Toward < 256 || st.Ramp.Seconds <= 0 {
		t.Fatalf("ramp status %+v", st.Ramp)
	}
	// The careful moves alone (a quarter of the cap at most) are behind.
	slow := NewController(ControllerConfig{TPOT: 50 * time.Millisecond})
	slow.endRamp(t0, "test")
	_, slowCaps := h100Like().run(t, slow, t0, 30*time.Second)
	if slowCaps[19] >= caps[19] {
		t.Fatalf("without the ramp cap %d after 20 s, with it %d", slowCaps[19], caps[19])
	}
}

// The ramp doubles only while the doubled level keeps its margin: on an
// engine whose knee is 7, it ends below the knee's double, and the cap
// still converges to the knee.
func TestRampEndsAtTheMargin(t *testing.T) {
	e := bf16Like()
	c := NewController(ControllerConfig{})
	_, caps := e.run(t, c, t0, 2*time.Minute)
	for i, n := range caps {
		if n > 9 {
			t.Fatalf("cap %d at decision %d above the knee 7 by more than the band; caps %v", n, i, caps)
		}
	}
	if got := caps[len(caps)-1]; got != 7 {
		t.Fatalf("final cap %d, want 7; caps %v", got, caps)
	}
	st := c.Status(t0.Add(2 * time.Minute))
	if st.Ramp.On || st.Ramp.End == "" {
		t.Fatalf("ramp still on or without a reason after 2 minutes: %+v", st.Ramp)
	}
}

// A gateway started in front of a busy engine starts at what the engine
// runs (its metrics' first reading), then ramps on; a fixed cap does not
// move, and an engine that runs less changes nothing.
func TestStartFromTheEnginesRunningCount(t *testing.T) {
	for _, tc := range []struct {
		cfg     ControllerConfig
		running float64
		want    int
	}{
		{ControllerConfig{}, 150, 150},
		{ControllerConfig{MaxCap: 100}, 150, 100},
		{ControllerConfig{InitialCap: 8}, 3, 8},
		{ControllerConfig{InitialCap: 8, Fixed: true}, 150, 8},
	} {
		c := NewController(tc.cfg)
		c.ObserveEngine(t0, EngineReading{Running: tc.running}, 0, 0)
		d := c.Decide(t0, Load{})
		if d.Cap != tc.want {
			t.Errorf("%+v, engine running %v: cap %d, want %d (%s)", tc.cfg, tc.running, d.Cap, tc.want, d.Reason)
		}
		if tc.want == 150 && (!d.Changed || !strings.Contains(d.Reason, "already runs 150")) {
			t.Errorf("start from the engine: changed %v, reason %q", d.Changed, d.Reason)
		}
		// Only the first reading counts: a later one is load, not a start.
		c.ObserveEngine(t0.Add(time.Second), EngineReading{Running: 300}, 0, 0)
		if d := c.Decide(t0.Add(time.Second), Load{}); d.Cap != tc.want {
			t.Errorf("%+v: a later reading moved the cap to %d", tc.cfg, d.Cap)
		}
	}
}

// A controller started from a Prior (a state file's costs) holds the token
// budget from its first request, with the costs it was given; an invalid
// Prior is ignored.
func TestPriorSeedsTheTokenBudget(t *testing.T) {
	p := Prior{PrefillBase: 0.01, PrefillSteps: 1.5, PrefillPerToken: 30e-6, StepBase: 0.007, StepPerRunning: 60e-6,
		StepPerKVToken: 15e-9, MeanPrompt: 800, KVPerRunning: 900, Cap: 128}
	c := NewController(ControllerConfig{Prior: &p})
	c.refresh(t0)
	k := c.Costs()
	if !c.tokenBudget() || math.Abs(k.PrefillPerToken-p.PrefillPerToken) > 1e-9 || math.Abs(k.StepBase.Seconds()-p.StepBase) > 1e-6 {
		t.Fatalf("costs from the prior: %+v (budget %v)", k, c.tokenBudget())
	}
	if got := c.prior(); math.Abs(got.PrefillPerToken-p.PrefillPerToken) > 1e-9 || math.Abs(got.StepPerRunning-p.StepPerRunning) > 1e-9 {
		t.Fatalf("the prior read back: %+v", got)
	}
	for _, bad := range []Prior{{}, {PrefillPerToken: math.NaN(), StepBase: 0.007, MeanPrompt: 800, Cap: 1},
		{PrefillPerToken: -1, StepBase: 0.007, MeanPrompt: 800, Cap: 1}, {PrefillPerToken: 1e-5, StepBase: 1e9, MeanPrompt: 800, Cap: 1}} {
		c := NewController(ControllerConfig{Prior: &bad})
		c.refresh(t0)
		if c.tokenBudget() {
			t.Errorf("invalid prior %+v seeded the budget", bad)
		}
	}
}

// Past its margin the ramp narrows between the last level measured good
// and the first one predicted to miss, halfway each step, not by a fixed
// quarter: on an engine whose TPOT target of 20 ms is met up to about 200
// running, the doublings end at 64 and two measured steps reach 140 (by
// quarters it took four: 80, 100, 125, 156). Answers of 50 tokens let
// requests finish at each level within a settle time (the measured steps).
func TestRampNarrowsHalfwayToTheFirstPredictedMiss(t *testing.T) {
	e := h100Like()
	e.out = 50
	c := NewController(ControllerConfig{TPOT: 20 * time.Millisecond})
	_, caps := e.run(t, c, t0, time.Minute)
	var steps []int
	for i, n := range caps {
		if n > 64 && (i == 0 || n != caps[i-1]) {
			steps = append(steps, n)
		}
		if n >= 140 {
			break
		}
	}
	if len(steps) == 0 || steps[len(steps)-1] < 140 || len(steps) > 2 {
		t.Fatalf("from 64 the ramp took %v to reach 140, want at most two steps; caps %v", steps, caps)
	}
	if top := slices.Max(caps); top > 230 {
		t.Fatalf("cap reached %d, past the first predicted miss; caps %v", top, caps)
	}
}
