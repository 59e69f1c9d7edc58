package control

import (
	"strings"
	"testing"
	"time"

	"github.com/kneecap/kneecap/slo"
)

// A cap the engine does not fill while demand waits (the token budget or
// the clients bind first) is no longer what limits the engine: the ramp
// ends after rampUnfilled such decisions, saying so, and does not double a
// level nothing tried.
func TestRampEndsWhenTheCapIsNotFilled(t *testing.T) {
	e := h100Like()
	c := NewController(ControllerConfig{TPOT: 50 * time.Millisecond})
	now, caps := e.run(t, c, t0, 10*time.Second)
	if !c.ramp.on || caps[len(caps)-1] < 16 {
		t.Fatalf("after 10 s the ramp is on %v at cap %d, want on and >= 16; caps %v", c.ramp.on, caps[len(caps)-1], caps)
	}
	toward := c.ramp.toward
	ran := c.Cap() / 4 // far below rampMinRun of the cap, with requests waiting
	for i := range 3 * rampUnfilled {
		now = now.Add(time.Second)
		d := c.Decide(now, Load{Running: ran, Queued: 10, PeakRunning: ran, PeakQueued: 10})
		if (d.Changed && strings.HasPrefix(d.Reason, "ramp")) || c.ramp.toward != toward {
			t.Fatalf("decision %d: the ramp moved the cap to %d though the engine ran %d: %s", i, d.Cap, ran, d.Reason)
		}
	}
	st := c.Status(now)
	if st.Ramp.On || !strings.Contains(st.Ramp.End, "for 8 decisions") {
		t.Fatalf("ramp after %d unfilled decisions: %+v", 3*rampUnfilled, st.Ramp)
	}
}

// Requests their clients do not stream are judged by E2E alone, which shows
// only when they end: the ramp doubles only from a level where such
// requests finished (measuredMin of them, at P), so it climbs slower than
// for streams, and climbs all the same.
func TestRampWaitsForE2EOnlyRequestsToFinish(t *testing.T) {
	e2e := slo.Targets{E2E: 20 * time.Second}
	cfg := ControllerConfig{TTFT: time.Second, TPOT: 50 * time.Millisecond}
	streamed := NewController(cfg)
	_, sCaps := h100Like().run(t, streamed, t0, 10*time.Second)

	e := h100Like()
	e.targets = &e2e
	c := NewController(cfg)
	_, caps := e.run(t, c, t0, 90*time.Second)
	if 4*caps[9] > sCaps[9] {
		t.Fatalf("cap after 10 s: %d judged by E2E alone, %d streamed; want the first at a quarter of the second at most", caps[9], sCaps[9])
	}
	for i := 1; i < len(caps); i++ {
		if caps[i] > 2*caps[i-1] {
			t.Fatalf("decision %d: cap %d->%d, more than a doubling", i, caps[i-1], caps[i])
		}
	}
	if got := caps[len(caps)-1]; got < 32 {
		t.Fatalf("cap after 90 s judged by E2E alone: %d, want >= 32 (the ramp climbs from measured levels); caps %v", got, caps)
	}
}
