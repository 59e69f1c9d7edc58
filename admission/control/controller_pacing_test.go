package control

import (
	"testing"
	"time"
)

// The prefill limit is as many prefills as fit the TTFT target one after
// another, from the median engine TTFT, with hysteresis.
func TestPrefillLimitFollowsTheEngineTTFT(t *testing.T) {
	for _, tc := range []struct {
		ttft time.Duration
		want int
	}{
		{700 * time.Millisecond, 1}, // gb10-bf16's 4k-token prompts
		{300 * time.Millisecond, 3}, // T/median 3.3
		{90 * time.Millisecond, 10},
	} {
		e := bf16Like()
		e.ttftA, e.ttftB = tc.ttft, 0
		c := NewController(ControllerConfig{})
		if k := c.PrefillLimit(); k != 1 {
			t.Fatalf("before any first token: %d, want 1", k)
		}
		now, _ := e.run(t, c, t0, time.Minute)
		if k := c.PrefillLimit(); k != tc.want {
			t.Errorf("engine TTFT %v: prefill limit %d, want %d", tc.ttft, k, tc.want)
		}
		// Hysteresis: T/median 2.9 keeps 3 (it would take 3.25 to rise
		// from 2 to 3, and below 2.75 to fall from 3).
		if tc.want == 3 {
			e.ttftA = 345 * time.Millisecond
			e.run(t, c, now, time.Minute)
			if k := c.PrefillLimit(); k != 3 {
				t.Errorf("T/median 2.9 after 3: %d, want 3 (hysteresis)", k)
			}
		}
	}
}

// A request that finds a slot free but waits for another's prefill is
// refused when the rest of that prefill and its own would miss its TTFT
// target, and let queue when they fit; under light load it always queues
// (the engine alone would serve it, late perhaps, and no request is
// refused there).
func TestPacedRequestIsRefusedOnlyWhenItWouldMiss(t *testing.T) {
	_, c, now, _, _ := atKneeUnderDemand(t)
	eng := c.predict(c.Cap()).MeanTTFT
	if eng <= 0.3 || eng >= 0.9 {
		t.Fatalf("setup: predicted engine TTFT %.3fs, want between 0.3 and 0.9", eng)
	}
	early := Query{Arrival: now, Paced: true, PrefillAge: 0, Targets: c.op}
	if v := c.Admit(now, early); v.OK || v.RetryAfter <= 0 {
		t.Errorf("paced behind a prefill just begun (%.2fs + %.2fs > 1s): %+v, want refused with a Retry-After", eng, eng, v)
	}
	late := Query{Arrival: now, Paced: true, PrefillAge: time.Duration(eng * float64(time.Second)), Targets: c.op}
	if v := c.Admit(now, late); !v.OK {
		t.Errorf("paced behind a prefill about to end: %+v, want queued", v)
	}

	e := bf16Like()
	light := NewController(ControllerConfig{})
	now = runLightLoad(t, light, e)
	if v := light.Admit(now, Query{Arrival: now, Paced: true, Targets: light.op}); !v.OK {
		t.Errorf("under light load: %+v, want queued", v)
	}
}

// Gaps that hold a prefill step (more than 3x the fitted step) are not
// decode steps and stay out of the time-per-token curve; the shift
// detector ignores them too, unless most recent samples are such.
func TestStallGapsStayOutOfTheStepCurve(t *testing.T) {
	c := NewController(ControllerConfig{Fixed: true, InitialCap: 6})
	now := t0
	step := 60 * time.Millisecond
	// Every running stream reports each step's gap; one step in 12 holds
	// a prefill (650 ms).
	for i := range 3000 {
		n := 4 + i%3
		g := step
		if i%12 == 0 {
			g = 650 * time.Millisecond
		}
		now = now.Add(g)
		for range n {
			c.ObserveGap(now, n, g, false)
		}
		if i%20 == 19 {
			c.Decide(now, Load{Running: 6, PeakRunning: 6, Queued: 3, PeakQueued: 3})
		}
	}
	if g := c.gap.at(6); g > 0.066 {
		t.Errorf("fitted step at 6: %.1fms, want about 60 (stalls kept out)", 1000*g)
	}
	if c.shifts != 0 {
		t.Fatalf("stalls taken for a shift: %s", c.lastShift)
	}
	// Every gap 4x longer from now: a new regime, not stalls.
	for i := range 600 {
		n := 4 + i%3
		now = now.Add(4 * step)
		for range n {
			c.ObserveGap(now, n, 4*step, false)
		}
		if i%5 == 4 {
			c.Decide(now, Load{Running: 6, PeakRunning: 6, Queued: 3, PeakQueued: 3})
		}
	}
	if c.shifts == 0 {
		t.Fatalf("a 4x slower step was not taken for a shift; step at 6 %.1fms", 1000*c.gap.at(6))
	}
}

// A slope fitted below zero (samples at low levels taken in a transient)
// keeps the last rising shape instead of a constant, which would make
// every level above the measured ones look free.
func TestFallingFitKeepsTheRisingShape(t *testing.T) {
	cv := newCurve(64, time.Minute, 200)
	now := t0
	for range 100 {
		cv.add(now, 4, 0.040)
		cv.add(now, 8, 0.080)
	}
	cv.fit(now)
	if cv.b <= 0 {
		t.Fatalf("setup: slope %.4f, want rising", cv.b)
	}
	now = now.Add(10 * time.Minute) // what was learnt then has faded
	for range 200 {
		now = now.Add(10 * time.Millisecond)
		cv.add(now, 6, 0.070)
		cv.add(now, 8, 0.060)
	}
	cv.fit(now)
	if cv.b <= 0 || cv.at(16) <= cv.at(8)*1.5 {
		t.Fatalf("after falling samples: a=%.4f b=%.4f, at 16 %.1fms vs at 8 %.1fms; want the rising shape kept",
			cv.a, cv.b, 1000*cv.at(16), 1000*cv.at(8))
	}
}

// A request that would queue for a slot is held to its own prefill, not
// the mean engine TTFT at the cap, when its client is not known to retry
// (a refusal may lose it; the limiter still refuses it at its grant if
// the prefills then under way would make it late); an SDK client, which
// comes back, is told at once when to.
func TestQueuedShortPromptOfAClientThatDoesNotRetry(t *testing.T) {
	e := bf16Like()
	e.out, e.prompt = 10, 2000
	c := NewController(ControllerConfig{})
	now, _ := e.run(t, c, t0, 3*time.Minute)
	if !c.tokenBudget() {
		t.Fatal("setup: no token budget")
	}
	wait, ok := c.waitBound(0)
	eng := c.engineTTFTOf(now, 100)
	own := 20 * time.Millisecond
	if !ok || eng < 4*own || wait+eng >= c.op.TTFT {
		t.Fatalf("setup: wait %v, engine TTFT %v of a 100-token prompt; want the two within the target and the second above %v", wait, eng, 4*own)
	}
	// Arrived so long ago that the mean engine TTFT misses the target and
	// its own prefill does not.
	age := c.op.TTFT - wait - eng/2
	q := Query{Arrival: now.Add(-age), Targets: c.op, PromptTokens: 100, PrefillOwn: own}
	if v := c.Admit(now, q); !v.OK {
		t.Errorf("client not known to retry: %+v, want queued (%v + %v + %v <= %v)", v, age, wait, own, c.op.TTFT)
	}
	q.SDK = true
	if v := c.Admit(now, q); v.OK {
		t.Errorf("SDK client: %+v, want refused (%v + %v + %v > %v)", v, age, wait, eng, c.op.TTFT)
	}
}
