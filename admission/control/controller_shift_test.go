package control

import (
	"testing"
	"time"
)

// A shift of the time per token (heavy-tailed prompts move the step with
// the KV cache of the requests running) keeps the engine TTFT samples; a
// shift of engine TTFT forgets them. Both forget the goodput and
// attainment measured at the caps.
func TestStepShiftKeepsTheEngineTTFTSamples(t *testing.T) {
	e := bf16Like()
	c := NewController(ControllerConfig{})
	now, _ := e.run(t, c, t0, 3*time.Minute)
	kept := func() (samples, measured, dwell int) {
		return len(c.ttftSamples.live(now)), len(c.measured[c.op]), len(c.dwell)
	}
	s0, m0, d0 := kept()
	if s0 == 0 || m0 == 0 || d0 == 0 {
		t.Fatalf("before the shift: %d engine TTFT samples, %d levels measured, %d dwelt; want some of each", s0, m0, d0)
	}
	shifts := c.Status(now).Shifts
	c.shift(now, "time per token", c.gap, 1.4)
	if s, m, d := kept(); s != s0 || m != 0 || d != 0 {
		t.Errorf("after a step shift: %d samples, %d levels measured, %d dwelt; want %d samples kept, no level", s, m, d, s0)
	}
	if got := c.Status(now).Shifts; got != shifts+1 {
		t.Errorf("shifts %d, want %d", got, shifts+1)
	}
	c.shift(now, "engine TTFT", c.ttft, 1.4)
	if s, m, d := kept(); s != 0 || m != 0 || d != 0 {
		t.Errorf("after an engine TTFT shift: %d samples, %d levels measured, %d dwelt; want all forgotten", s, m, d)
	}
}

// A run of gaps far above the step, each spanning a prefill under way
// (the engine prefilling most of the time), is no shift of the time per
// token; the same run with no prefill under way is one (a slower engine).
func TestStallRunDuringPrefillsIsNoShift(t *testing.T) {
	run := func(prefill bool) *Controller {
		c := NewController(ControllerConfig{Fixed: true, InitialCap: 10})
		now := t0
		step := 20 * time.Millisecond
		for i := range 9000 {
			n := 8 + i%3
			g := step
			if i >= 8000 {
				g = 200 * time.Millisecond // every step from here holds a prefill
			}
			now = now.Add(g)
			for range n {
				c.ObserveGap(now, n, g, prefill && i >= 8000)
			}
			if i%20 == 19 {
				c.Decide(now, Load{Running: 10, PeakRunning: 10, Queued: 3, PeakQueued: 3})
			}
		}
		return c
	}
	if c := run(true); c.shifts != 0 {
		t.Errorf("stalls each during a prefill taken for a shift: %s", c.lastShift)
	}
	if c := run(false); c.shifts == 0 {
		t.Error("a run of long gaps with no prefill under way was not taken for a shift")
	}
}
