package control

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// withPrefillLearnt returns a controller whose token model knows the
// prefill (160 us a token): its token budget is on.
func withPrefillLearnt(t *testing.T) (*Controller, time.Time) {
	t.Helper()
	c := NewController(ControllerConfig{MaxCap: 512, DecodeStep: true})
	now := time.Unix(0, 0)
	for i := range 200 {
		now = now.Add(100 * time.Millisecond)
		p := 200 + (i*997)%6000
		step := time.Duration(10+i%30) * time.Millisecond
		ttft := time.Duration(1.5*float64(step)) + time.Duration(float64(p)*160e3)
		c.ObserveDone(now, Finished{Targets: c.op, Running: 4, EngineTTFT: ttft, Hold: ttft, OutputTokens: 100,
			PromptTokens: p, PromptEstimate: p, PrefillStep: step})
	}
	c.refresh(now)
	if !c.tokenBudget() {
		t.Fatal("token budget off with the prefill learnt")
	}
	return c, now
}

// engineStep is a decode step of the H100 8B engine's shape: 7 ms, 60 us a
// running request, 15 ns a KV token.
func engineStep(n, kv int) time.Duration {
	return 7*time.Millisecond + time.Duration(n)*60*time.Microsecond + time.Duration(kv*15)
}

// feedSteps sends chunk gaps for d at running counts spread over
// [lo, hi]: every third gap holds a prefill (2.5 x the step, within the
// outlier bound) and says so when flagged; slow multiplies every gap.
func feedSteps(c *Controller, now time.Time, d time.Duration, lo, hi int, slow float64, flagged bool) time.Time {
	end := now.Add(d)
	for i := 0; now.Before(end); i++ {
		now = now.Add(time.Millisecond)
		n := lo + (i*7919)%(hi-lo+1)
		kv := n * 900
		g := engineStep(n, kv)
		prefill := i%3 == 0
		if prefill {
			g = g * 5 / 2
		}
		g = time.Duration(float64(g) * slow)
		c.ObserveGap(now, n, g, prefill && flagged)
		c.ObserveStep(now, n, kv, g, prefill && flagged)
		if i%1000 == 999 {
			c.detectShift(now)
			c.refresh(now)
		}
	}
	return now
}

// With the token budget on, a gap with a prefill under way teaches no
// decode step: the step fit and the gap curve are the engine's decode step,
// where learnt from every gap they held a third of its gaps' prefills
// (counted again by the stall term).
func TestDecodeStepLeavesOutGapsWithPrefills(t *testing.T) {
	for _, flagged := range []bool{true, false} {
		c, now := withPrefillLearnt(t)
		now = feedSteps(c, now, 20*time.Second, 50, 250, 1, flagged)
		c.refresh(now)
		want := engineStep(200, 200*900).Seconds()
		got := c.tok.step.at(200, 200*900)
		curve := c.gap.at(200)
		ok := math.Abs(got/want-1) < 0.05 && math.Abs(curve/want-1) < 0.05
		if flagged && !ok {
			t.Errorf("step at 200 running %.2fms, gap curve %.2fms; want the decode step %.2fms", got*1e3, curve*1e3, want*1e3)
		}
		if !flagged && ok {
			t.Errorf("unflagged prefills left the step at %.2fms: the test shows nothing", got*1e3)
		}
	}
}

// The stall term's mean prompt follows the last hundred prompts: when
// prompts double, it doubles within a few seconds rather than over the
// minute's memory.
func TestStallFollowsLongerPrompts(t *testing.T) {
	c, now := withPrefillLearnt(t)
	for range 2000 {
		now = now.Add(100 * time.Millisecond)
		c.tok.observePrompt(now, 800)
	}
	before := c.stallPer(200)
	for range 300 {
		now = now.Add(10 * time.Millisecond)
		c.tok.observePrompt(now, 1600)
	}
	after := c.stallPer(200)
	if !(after > 1.85*before) {
		t.Errorf("stall per running request %.3gs after 300 prompts of twice the size, %.3gs before: want about double", after, before)
	}
	if m := c.tok.prompt.mean(); m > 1200 {
		t.Fatalf("the minute's mean prompt %.0f already followed: the test shows nothing", m)
	}
}

// A doubled decode step is seen within seconds even when the running
// count spreads over two hundred levels, none with enough gaps of its own
// for the per-level detector; a steady engine is no shift.
func TestStepShiftPooledOverLevels(t *testing.T) {
	c, now := withPrefillLearnt(t)
	now = feedSteps(c, now, 60*time.Second, 50, 250, 1, true)
	if c.shifts != 0 {
		t.Fatalf("a steady engine shifted: %s", c.lastShift)
	}
	feedSteps(c, now, 5*time.Second, 50, 250, 2, true)
	var r float64
	if _, err := fmt.Sscanf(c.lastShift, "time per token shifted x%g", &r); err != nil || c.shifts < 1 || r < shiftBand {
		t.Fatalf("%d shifts (%q) within 5 s of a doubled step, want one up", c.shifts, c.lastShift)
	}
}
