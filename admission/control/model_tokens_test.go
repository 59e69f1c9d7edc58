package control

import (
	"math"
	"testing"
	"time"

	"github.com/kneecap/kneecap/slo"
)

// The prefill model recovers an engine's costs from finished requests: a
// prefill of p tokens after the prompts ahead of it takes 1.5 decode steps
// and 160 us a token.
func TestTokenModelLearnsPrefill(t *testing.T) {
	c := NewController(ControllerConfig{})
	now := time.Unix(0, 0)
	for i := range 200 {
		now = now.Add(100 * time.Millisecond)
		p := 200 + (i*997)%6000
		ahead := (i * 331) % 3 * 1000
		step := time.Duration(10+i%30) * time.Millisecond
		ttft := time.Duration(1.5*float64(step)) + time.Duration(float64(ahead+p)*160e3)
		c.ObserveDone(now, Finished{Targets: c.op, Running: 4, EngineTTFT: ttft, Hold: ttft, OutputTokens: 100,
			PromptTokens: p, PromptEstimate: p, PrefillAhead: ahead, PrefillStep: step})
	}
	c.refresh(now)
	f := c.tok.prefill
	if !f.ok || math.Abs(f.c[2]-160e-6) > 2e-6 || math.Abs(f.c[1]-1.5) > 0.05 || f.c[0] > 1e-3 {
		t.Fatalf("prefill fit %+v ok=%v, want 160us a token, 1.5 steps, no base", f.c, f.ok)
	}
	if got, ok := c.tok.prefillOf(6000); !ok || got < 950*time.Millisecond || got > 1010*time.Millisecond {
		t.Fatalf("6000 tokens alone: %v (%v), want about 0.96-1s", got, ok)
	}
	if !c.tokenBudget() {
		t.Fatal("token budget off with the prefill learnt")
	}
}

// A request granted while the gateway had more on the engine than the
// engine runs (its limit, seen in its metrics) waited in the engine's own
// queue before its prefill: that wait is no prefill, and requests like it
// mixed in (every fourth, waiting 2-6 s) leave the prefill model where the
// others put it. Without the limit known they are learnt as prefill.
func TestPrefillLeavesOutWaitsInTheEngine(t *testing.T) {
	learn := func(limitKnown bool) planeFit {
		c := NewController(ControllerConfig{InitialCap: 10})
		now := time.Unix(0, 0)
		if limitKnown {
			for range 3 {
				now = now.Add(time.Second)
				c.ObserveEngine(now, EngineReading{KVTokens: math.NaN(), Running: 8, Waiting: 2}, 10, 0)
			}
			if n, ok := c.limit.at(now); !ok || n != 8 {
				t.Fatalf("engine limit %d %v", n, ok)
			}
		}
		for i := range 200 {
			now = now.Add(100 * time.Millisecond)
			p := 1000 + (i*997)%3000
			step := time.Duration(10+i%30) * time.Millisecond
			ttft := time.Duration(1.5*float64(step)) + time.Duration(float64(p)*160e3)
			granted := 5 + i%4
			if i%4 == 3 {
				granted = 9 + i%2 // past the engine's 8: it waited for a slot
				ttft += time.Duration(2+i%5) * time.Second
			}
			c.ObserveDone(now, Finished{Targets: c.op, Running: 6, EngineTTFT: ttft, Hold: ttft, OutputTokens: 100,
				PromptTokens: p, PromptEstimate: p, PrefillStep: step, GrantRunning: granted})
		}
		c.refresh(now)
		return c.tok.prefill
	}
	if f := learn(true); !f.ok || math.Abs(f.c[2]-160e-6) > 5e-6 {
		t.Errorf("prefill fit %+v ok=%v with the engine's limit known, want 160us a token", f.c, f.ok)
	}
	if f := learn(false); f.ok && math.Abs(f.c[2]-160e-6) <= 5e-6 && f.c[0] < 0.1 {
		t.Errorf("prefill fit %+v: the waits left no mark without the limit known; the test shows nothing", f.c)
	}
}

// The step model separates what the running requests and their KV tokens
// cost, and counts the engine's hidden tokens (its metrics) as KV.
func TestTokenModelLearnsStepWithHiddenKV(t *testing.T) {
	c := NewController(ControllerConfig{})
	now := time.Unix(0, 0)
	step := func(n, kv int) time.Duration {
		return 2*time.Millisecond + time.Duration(n)*200*time.Microsecond + time.Duration(float64(kv)*2.2e3)
	}
	for i := range 3000 {
		now = now.Add(10 * time.Millisecond)
		if i%100 == 0 {
			hidden := (i / 100 % 5) * 10000
			c.ObserveEngine(now, EngineReading{KVTokens: float64(8000 + hidden), Running: 4, Waiting: 0}, 4, 8000)
		}
		n := 1 + i%8
		kv := n * (1000 + (i*7)%3000)
		c.ObserveStep(now, n, kv, step(n, kv+int(c.tok.hidden.mean())), false)
	}
	c.refresh(now)
	f := c.tok.step
	if !f.ok || math.Abs(f.c[2]-2.2e-6) > 0.1e-6 || math.Abs(f.c[1]-200e-6) > 20e-6 || math.Abs(f.c[0]-2e-3) > 0.3e-3 {
		t.Fatalf("step fit %+v ok=%v, want 2ms + 200us a request + 2.2us a KV token", f.c, f.ok)
	}
}

// The engine's own limit: when it keeps running the same number of
// requests and queues the rest at three readings in a row, the cap comes
// down to it and is not raised past it; one reading of a waiting request
// (a request that arrived during a long step) is no limit.
func TestEngineLimitBoundsTheCap(t *testing.T) {
	c := NewController(ControllerConfig{InitialCap: 12, MaxCap: 64})
	now := time.Unix(0, 0)
	c.ObserveEngine(now, EngineReading{KVTokens: math.NaN(), Running: 9, Waiting: 1}, 10, 0)
	if d := c.Decide(now, Load{Running: 10}); d.Cap != 12 {
		t.Fatalf("one reading of a waiting request moved the cap to %d", d.Cap)
	}
	for i := range 3 {
		now = now.Add(time.Second)
		c.ObserveEngine(now, EngineReading{KVTokens: math.NaN(), Running: 8, Waiting: 4}, 12, 0)
		if i < 2 && c.limit.n != 0 {
			t.Fatalf("limit after %d readings", i+1)
		}
	}
	d := c.Decide(now, Load{Running: 12, PeakRunning: 12, PeakQueued: 5})
	// The most seen running was 9: the limit is never below it.
	if !d.Changed || d.Cap != 9 || c.engineBound(now) != 9 {
		t.Fatalf("decision %+v, bound %d; want the cap lowered to the engine's limit 9", d, c.engineBound(now))
	}
	// Running more than the limit forgets it.
	c.ObserveEngine(now, EngineReading{KVTokens: math.NaN(), Running: 10, Waiting: 0}, 10, 0)
	if _, ok := c.limit.at(now); ok {
		t.Fatal("the limit outlived the engine running more")
	}
}

// With the budget turned off the model is learnt and shown but not handed
// to the limiter, and the count model's predictions are today's: no
// stall term.
func TestNoTokenBudget(t *testing.T) {
	c := NewController(ControllerConfig{NoTokenBudget: true})
	now := time.Unix(0, 0)
	for i := range 50 {
		now = now.Add(100 * time.Millisecond)
		c.ObserveDone(now, Finished{Targets: slo.Targets{TTFT: time.Second}, Running: 2, EngineTTFT: 500 * time.Millisecond,
			Hold: time.Second, OutputTokens: 100, PromptTokens: 3000 + i, PromptEstimate: 3000})
	}
	c.refresh(now)
	if k := c.Costs(); k.PrefillPerToken != 0 || k.StepLimit != 0 || c.tokenBudget() {
		t.Fatalf("costs %+v with the token budget off", k)
	}
	if c.stallPer(100) != 0 {
		t.Fatal("stall term without the token budget")
	}
	if st := c.tokenStatus(); st.Budget || st.MeanPrompt == 0 {
		t.Fatalf("status %+v: want the model shown, the budget off", st)
	}
}

// TestPlaneFitAddSameSums: planeFit.add, written out, leaves every sum bit
// for bit where the loop over x = (1, u, v) it replaced left it, over
// samples of a stream's chunks (decays, scales and refits between them).
func TestPlaneFitAddSameSums(t *testing.T) {
	var got, want planeFit
	loopAdd := func(f *planeFit, now time.Time, tau time.Duration, u, v, y float64) {
		if !finite(u) || !finite(v) || !finite(y) {
			return
		}
		f.decay(now, tau)
		x := [3]float64{1, u, v}
		f.w++
		f.samples++
		for i := range 3 {
			f.r[i] += x[i] * y
			for j := range 3 {
				f.m[i][j] += x[i] * x[j]
			}
		}
	}
	now, tau := time.Unix(0, 0), time.Minute
	for i := range 200000 {
		now = now.Add(time.Duration(1+(i*7919)%5000) * time.Microsecond)
		u := float64(1 + (i*31)%97)
		v := float64((i*104729)%200000) + 0.37*float64(i%11)
		y := 0.004 + 1e-5*u + 3e-8*v + 1e-4*math.Sin(float64(i))
		got.add(now, tau, u, v, y)
		loopAdd(&want, now, tau, u, v, y)
		switch i % 50000 {
		case 12345:
			got.scale(1.3, 0.1)
			want.scale(1.3, 0.1)
		case 33333:
			got.fit(now, tau)
			want.fit(now, tau)
		}
	}
	if got != want {
		t.Fatalf("sums differ:\nwritten out %+v\nloop        %+v", got, want)
	}
}
