package control

import (
	"github.com/kneecap/kneecap/slo"
	"math"
	"strings"
	"testing"
	"time"
)

// engine is a fluid model of a decode-bound engine for script tests:
// gap(n) = gapA + gapB*n, engine TTFT(n) = ttftA + ttftB*n, every request
// has out output tokens, one per chunk, and the engine always runs exactly
// min(cap, demand) requests.
type engine struct {
	gapA, gapB   time.Duration
	ttftA, ttftB time.Duration
	out          int
	demand       int // concurrent users wanting service
	phase        float64
	// slowEvery > 0 makes every slowEvery-th request's TPOT 1.5 times the
	// step (a neighbour's prefill stalled it).
	slowEvery, done int
	// prompt > 0 tells the token model too: prompts of prompt/2 to
	// 3 prompt/2 tokens, prefilled in 1.5 steps and 160 us a token, and
	// each step with the running requests' KV tokens.
	prompt int
	// targets, when set, are what finished requests carry instead of the
	// operator's (a class of their own).
	targets *slo.Targets
	// tenant, when set, is a tenant of that many requests beside the
	// others (weights equal, the others wanting more than they run): the
	// limiter's TenantShort and TenantBounded at each cap.
	tenant int
}

func (e *engine) gap(n int) time.Duration  { return e.gapA + time.Duration(n)*e.gapB }
func (e *engine) ttft(n int) time.Duration { return e.ttftA + time.Duration(n)*e.ttftB }

// run feeds the controller for d of time from now in 100ms ticks, calling
// Decide every second, and returns the time reached and the caps decided.
func (e *engine) run(t *testing.T, c *Controller, now time.Time, d time.Duration) (time.Time, []int) {
	t.Helper()
	var caps []int
	end := now.Add(d)
	tick := 100 * time.Millisecond
	for i := 0; now.Before(end); i++ {
		now = now.Add(tick)
		n := min(c.Cap(), e.demand)
		g := e.gap(n)
		chunks := float64(n) * float64(tick) / float64(g)
		for k := 0; k < int(chunks); k++ {
			c.ObserveGap(now, n, g, false)
			if e.prompt > 0 {
				c.ObserveStep(now, n, n*(e.prompt+e.out/2), g, false)
			}
		}
		// Completions: n/hold per second; starts equal completions.
		hold := e.ttft(n) + time.Duration(e.out-1)*g
		e.phase += float64(n) * float64(tick) / float64(hold)
		for e.phase >= 1 {
			e.phase--
			c.ObserveFirst(now, n, e.ttft(n))
			tpot := g
			if e.done++; e.slowEvery > 0 && e.done%e.slowEvery == 0 {
				tpot = g * 3 / 2
			}
			f := Finished{Targets: c.op, Running: float64(n), EngineTTFT: e.ttft(n), TPOT: tpot,
				Hold: hold, OutputTokens: e.out, Good: tpot <= 100*time.Millisecond}
			if e.prompt > 0 {
				p := e.prompt/2 + (e.done*997)%e.prompt
				f.PromptTokens, f.PromptEstimate, f.PrefillStep = p, p, g
				f.EngineTTFT = time.Duration(1.5*float64(g)) + time.Duration(float64(p)*160e3)
			}
			if e.targets != nil {
				f.Targets = *e.targets
			}
			c.ObserveDone(now, f)
		}
		if i%10 == 9 {
			queued := max(e.demand-c.Cap(), 0)
			load := Load{Running: n, Queued: queued, PeakRunning: n, PeakQueued: queued}
			if e.tenant > 0 {
				load.ShortTenant = 2*e.tenant < n
				load.BoundedTenant = 2*e.tenant <= n
			}
			dec := c.Decide(now, load)
			caps = append(caps, dec.Cap)
		}
	}
	return now, caps
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func bf16Like() *engine {
	return &engine{gapA: 40 * time.Millisecond, gapB: 7750 * time.Microsecond,
		ttftA: 200 * time.Millisecond, ttftB: 50 * time.Millisecond, out: 120, demand: 64}
}

// lastOutOfBand returns the index after which caps stays within one of
// final (the band the scenario suite uses for convergence).
func lastOutOfBand(caps []int, final int) int {
	for i := len(caps) - 1; i >= 0; i-- {
		if caps[i] < final-1 || caps[i] > final+1 {
			return i + 1
		}
	}
	return 0
}

func TestControllerConvergesToKneeAndHolds(t *testing.T) {
	e := bf16Like()
	c := NewController(ControllerConfig{})
	_, caps := e.run(t, c, t0, 3*time.Minute)
	// Knee: largest n with 40ms + 7.75ms n <= 100ms * (1 - 5%) is 7.
	if got := caps[len(caps)-1]; got != 7 {
		t.Fatalf("final cap %d, want 7; caps %v", got, caps)
	}
	if i := lastOutOfBand(caps, 7); i > 60 {
		t.Errorf("cap out of 7 +- 1 after %ds: %v", i, caps)
	}
	st := c.Status(t0)
	if st.Cap != 7 || !strings.HasPrefix(st.Reason, "raise") {
		t.Errorf("status cap %d reason %q", st.Cap, st.Reason)
	}
}

func TestControllerNoRaiseWithoutDemand(t *testing.T) {
	e := bf16Like()
	e.demand = 2
	c := NewController(ControllerConfig{})
	_, caps := e.run(t, c, t0, time.Minute)
	if got := caps[len(caps)-1]; got != 4 {
		t.Fatalf("final cap %d, want the initial 4 with demand 2; caps %v", got, caps)
	}
}

func TestControllerEngineSlowdownLowersCap(t *testing.T) {
	e := bf16Like()
	c := NewController(ControllerConfig{})
	now, _ := e.run(t, c, t0, 2*time.Minute)
	e.gapA, e.gapB = e.gapA*14/10, e.gapB*14/10 // every step 40 % longer
	e.ttftA, e.ttftB = e.ttftA*14/10, e.ttftB*14/10
	_, caps := e.run(t, c, now, 2*time.Minute)
	// Coming down from 7: the largest n with 56ms + 10.85ms n <= 100ms is
	// 4; with the prior spread (1.05) before enough requests finished, 3.
	if got := caps[len(caps)-1]; got != 4 && got != 3 {
		t.Fatalf("final cap %d, want 3 or 4; caps %v", got, caps)
	}
	if i := lastOutOfBand(caps, caps[len(caps)-1]); i > 60 {
		t.Errorf("re-converged after %ds, want within 60s: %v", i, caps)
	}
	if c.Status(now).Shifts == 0 {
		t.Errorf("no shift detected")
	}
}

func TestControllerMinCapHolds(t *testing.T) {
	e := bf16Like()
	e.gapA = 150 * time.Millisecond // misses even alone
	c := NewController(ControllerConfig{MinCap: 2})
	_, caps := e.run(t, c, t0, time.Minute)
	if got := caps[len(caps)-1]; got != 2 {
		t.Fatalf("final cap %d, want MinCap 2; caps %v", got, caps)
	}
}

func TestControllerMaxCapBounds(t *testing.T) {
	e := bf16Like()
	e.gapB = 100 * time.Microsecond
	e.ttftB = time.Millisecond
	c := NewController(ControllerConfig{MaxCap: 20})
	_, caps := e.run(t, c, t0, 2*time.Minute)
	if got := caps[len(caps)-1]; got != 20 {
		t.Fatalf("final cap %d, want MaxCap 20; caps %v", got, caps)
	}
}

func TestAdmitDeadline(t *testing.T) {
	e := bf16Like()
	c := NewController(ControllerConfig{})
	now, _ := e.run(t, c, t0, 3*time.Minute)
	// At cap 7: hold = 0.55 + 119*0.09425 = 11.77s, a release every 1.68s;
	// engine TTFT 0.55s leaves 0.45s of queueing.
	iv, _ := c.slotInterval(now)
	if iv < 1600*time.Millisecond || iv > 1760*time.Millisecond {
		t.Fatalf("slot interval %v, want about 1.68s", iv)
	}
	// The check bounds the wait by a whole interval per release waited for:
	// 1.68s + 0.55s fits 2.5s, not 2s.
	if v := c.Admit(now, Query{Arrival: now, Ahead: 0, Targets: slo.Targets{TTFT: 2500 * time.Millisecond}}); !v.OK || v.Raised {
		t.Errorf("refused a request that fits a 2.5s TTFT target, or raised the cap at the knee: %+v", v)
	}
	if v := c.Admit(now, Query{Arrival: now, Ahead: 0, Targets: slo.Targets{TTFT: 2 * time.Second}}); v.OK {
		t.Errorf("admitted a request that may wait 1.68s + 0.55s for a 2s TTFT target")
	}
	v1 := c.Admit(now, Query{Arrival: now, Ahead: 0, Targets: c.op})
	if v1.OK {
		t.Fatalf("admitted a request predicted to wait up to 1.68s + 0.55s for a 1s target")
	}
	v2 := c.Admit(now, Query{Arrival: now, Ahead: 0, Targets: c.op})
	ra1, ra2 := v1.RetryAfter, v2.RetryAfter
	if ra1 <= 0 || ra2 <= ra1 {
		t.Errorf("Retry-After %v then %v: want positive and later for the second", ra1, ra2)
	}
	// Promises expire: much later the first answer comes back.
	if ra3 := c.Promise(now.Add(time.Hour), 0, Query{}); ra3 >= ra2 {
		t.Errorf("Retry-After an hour later %v, want below %v", ra3, ra2)
	}
}

// A request's own queue bound (Query.MaxWait: its class's wait, or the
// operator's KNEECAP_MAX_QUEUE_WAIT) longer than its TTFT target wins over
// the deadline check: a request predicted to miss its 1s target queues
// when the bound covers its predicted wait, and is refused when even the
// bound does not; a bound no longer than the target changes nothing. A
// paced request with such a bound queues.
func TestAdmitRequestQueueBoundWins(t *testing.T) {
	e := bf16Like()
	c := NewController(ControllerConfig{})
	now, _ := e.run(t, c, t0, 3*time.Minute)
	// As in TestAdmitDeadline: a release every 1.68s, engine TTFT 0.55s.
	for _, tc := range []struct {
		name   string
		q      Query
		wantOK bool
	}{
		{"bound 5s, nothing ahead", Query{Arrival: now, Targets: c.op, MaxWait: 5 * time.Second}, true},
		{"bound 5s, 3.5s already waited", Query{Arrival: now.Add(-3500 * time.Millisecond), Targets: c.op, MaxWait: 5 * time.Second}, false},
		{"bound 5s, 5 ahead", Query{Arrival: now, Ahead: 5, Targets: c.op, MaxWait: 5 * time.Second}, false},
		{"bound 60s, 5 ahead", Query{Arrival: now, Ahead: 5, Targets: c.op, MaxWait: time.Minute}, true},
		{"bound the TTFT target", Query{Arrival: now, Targets: c.op, MaxWait: c.op.TTFT}, false},
		{"no bound", Query{Arrival: now, Targets: c.op}, false},
		{"paced, bound 5s", Query{Arrival: now, Paced: true, Targets: c.op, MaxWait: 5 * time.Second}, true},
		{"paced, no bound", Query{Arrival: now, Paced: true, Targets: c.op}, false},
	} {
		v := c.Admit(now, tc.q)
		if v.OK != tc.wantOK || v.Raised {
			t.Errorf("%s: %+v, want OK %v and the cap not raised", tc.name, v, tc.wantOK)
		}
		if !v.OK && v.RetryAfter <= 0 {
			t.Errorf("%s: refused without a Retry-After", tc.name)
		}
	}
}

// A request judged by E2E alone (one its client does not stream: an E2E
// target, no TTFT target) is refused at once when the P-quantile of its
// wait plus its time on the engine misses its E2E target: the quantile of
// the sum, which is below the sum of the two quantiles (a request between
// the two is admitted); a queue bound longer than the target wins, as for
// TTFT.
func TestAdmitDeadlineE2E(t *testing.T) {
	e := bf16Like()
	e.slowEvery = 4 // TPOT spreads: its P-quantile is above its mean
	c := NewController(ControllerConfig{})
	now, _ := e.run(t, c, t0, 3*time.Minute)
	p := c.predict(c.cap)
	hold, e2eP := seconds(p.Hold), seconds(p.E2E)
	if hold < 5*time.Second || e2eP < hold+time.Second {
		t.Fatalf("predicted engine E2E at cap %d: P-quantile %v, mean %v; want seconds apart", c.cap, e2eP, hold)
	}
	iv, _ := c.slotInterval(now)
	const z = 1.2815515655446004 // P90
	for _, ahead := range []int{0, 3} {
		k := float64(ahead + 1)
		wait, waitP := time.Duration(k*float64(iv)), time.Duration((k+z*math.Sqrt(k))*float64(iv))
		need := wait + hold + time.Duration(math.Hypot(float64(waitP-wait), float64(e2eP-hold)))
		if sumOfQuantiles := waitP + e2eP; need > sumOfQuantiles-200*time.Millisecond {
			t.Fatalf("%d ahead: the quantile of the sum %v is not below the sum of the quantiles %v", ahead, need, sumOfQuantiles)
		}
		admit := func(target, bound time.Duration) Verdict {
			return c.Admit(now, Query{Arrival: now, Ahead: ahead, Targets: slo.Targets{E2E: target}, MaxWait: bound})
		}
		if v := admit(need+100*time.Millisecond, need+100*time.Millisecond); !v.OK {
			t.Errorf("%d ahead: refused a request predicted to end within %v of a %v E2E target: %+v", ahead, need, need+100*time.Millisecond, v)
		}
		if v := admit(need-100*time.Millisecond, need-100*time.Millisecond); v.OK {
			t.Errorf("%d ahead: admitted a request predicted to end %v after arrival for a target 100ms shorter: %+v", ahead, need, v)
		}
		if v := admit(need-100*time.Millisecond, time.Minute); !v.OK {
			t.Errorf("%d ahead: a queue bound of a minute did not win: %+v", ahead, v)
		}
	}
}

func TestAdmitBeforeLearningAdmitsAll(t *testing.T) {
	c := NewController(ControllerConfig{})
	if v := c.Admit(t0, Query{Arrival: t0, Ahead: 100, Targets: c.op}); !v.OK {
		t.Fatal("refused with nothing learned")
	}
}

// With a fixed cap far above anything measured, /status lists the levels
// that were measured and a few above, not every level up to the cap.
func TestStatusAtLargeFixedCapIsBounded(t *testing.T) {
	e := bf16Like()
	e.demand = 8
	c := NewController(ControllerConfig{Fixed: true, InitialCap: 100000, MaxCap: 100000})
	now, _ := e.run(t, c, t0, time.Minute)
	st := c.Status(now)
	if len(st.Levels) == 0 || len(st.Levels) > 64 {
		t.Fatalf("%d levels listed at a fixed cap of 100000 with 8 running, want 1..64", len(st.Levels))
	}
	if st.Levels[7].Running != 8 || st.Levels[7].GapSamples == 0 {
		t.Errorf("level 8, where the engine ran, is %+v", st.Levels[7])
	}
}

// Targets at the edge: when every third request's TPOT is half again the
// step, P90 holds only where 1.5 x the step meets the target (up to 3 on
// this engine) while levels up to 7 serve two thirds of their requests
// well and more of them per second. The cap goes where goodput is highest,
// not to the largest level meeting P, and the reason says why it holds
// there.
func TestEdgeTargetsHoldWhereGoodputIsHighest(t *testing.T) {
	e := bf16Like()
	e.slowEvery = 3
	c := NewController(ControllerConfig{})
	now, caps := e.run(t, c, t0, 3*time.Minute)
	final := caps[len(caps)-1]
	if final <= 3 {
		t.Fatalf("final cap %d, want above the largest level meeting P90 (3); caps %v", final, caps)
	}
	if i := lastOutOfBand(caps, final); i > 60 {
		t.Errorf("still moving after %ds (oscillating between the level meeting P and the one serving more): %v", i, caps)
	}
	st := c.Status(now)
	if !strings.HasPrefix(st.Reason, "hold") || !strings.Contains(st.Reason, "goodput is highest here") {
		t.Errorf("cap %d, reason %q: want it to say it holds for goodput below P90; caps %v", st.Cap, st.Reason, caps)
	}
}

// A refused request is promised a slot as far ahead as its client waits:
// an OpenAI SDK honours a Retry-After of up to a minute, a client that
// does not say who it is gets half that, and neither is told more than
// the clients were seen to wait out. Past its horizon every refused
// request is told the wait of the last slot promised.
func TestPromiseHorizonFollowsTheClients(t *testing.T) {
	for _, tc := range []struct {
		name string
		q    Query
		want time.Duration
	}{
		{"an OpenAI SDK", Query{SDK: true}, sdkHorizon},
		{"a client that does not say", Query{}, otherHorizon},
		{"SDKs seen to wait 20s at most", Query{SDK: true, Honoured: 20 * time.Second}, 20 * time.Second},
	} {
		e := bf16Like()
		c := NewController(ControllerConfig{})
		now, _ := e.run(t, c, t0, 3*time.Minute)
		var ra []time.Duration
		for range 100 {
			ra = append(ra, c.Promise(now, 0, tc.q))
		}
		// A release every 1.68s at cap 7 (TestAdmitDeadline): the last
		// answer is the first wait past the horizon, less half the budget.
		if last := ra[len(ra)-1]; last < tc.want-2*time.Second || last > tc.want+2*time.Second || ra[0] >= last {
			t.Errorf("%s: Retry-After %v first, %v last, want rising to about %v", tc.name, ra[0], last, tc.want)
		}
	}
}

// With the decode step switch, where the token budget's decode step
// check, not the cap, holds the engine below the cap, slots still free one
// every Hold/n and an SDK is promised a slot as far ahead as it waits (a
// minute); where neither binds it gets otherHorizon. With 30 s there, a
// cap one above what the step check let run (scenario 11) failed 5 % more
// SDK requests.
func TestPromiseHorizonWhileTheStepCheckHolds(t *testing.T) {
	for _, held := range []bool{true, false} {
		e := bf16Like()
		c := NewController(ControllerConfig{DecodeStep: true})
		now, _ := e.run(t, c, t0, 3*time.Minute)
		now = now.Add(peakMemory + time.Second)
		c.Decide(now, Load{Running: 3, PeakRunning: 3, PeakQueued: 5, StepHeld: held})
		if c.Cap() <= 3 {
			t.Fatalf("cap %d after one decision at 3 running: the test shows nothing", c.Cap())
		}
		var last time.Duration
		for range 100 {
			last = c.Promise(now, 0, Query{SDK: true})
		}
		want := otherHorizon
		if held {
			want = sdkHorizon
		}
		if last < want-2*time.Second || last > want+2*time.Second {
			t.Errorf("step check held %v: last Retry-After %v, want about %v", held, last, want)
		}
	}
}
