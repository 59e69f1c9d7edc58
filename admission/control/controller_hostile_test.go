package control

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kneecap/kneecap/slo"
)

// nonFinite lists the Float fields of a status that are NaN or infinite.
func nonFinite(st ControllerStatus) []string {
	var bad []string
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		for i := range v.NumField() {
			f, name := v.Field(i), prefix+v.Type().Field(i).Name
			switch x := f.Interface().(type) {
			case Float:
				if !finite(float64(x)) {
					bad = append(bad, name)
				}
			case []LevelStatus:
				for k := range x {
					walk(fmt.Sprintf("%s[%d].", name, k), reflect.ValueOf(x[k]))
				}
			}
		}
	}
	walk("", reflect.ValueOf(st))
	return bad
}

// checkSane fails the test unless the cap is within its bounds and the
// status encodes to JSON with every number finite.
func checkSane(t *testing.T, c *Controller, now time.Time, when string) {
	t.Helper()
	if n, cfg := c.Cap(), c.Config(); n < cfg.MinCap || n > cfg.MaxCap {
		t.Fatalf("%s: cap %d outside [%d, %d]", when, n, cfg.MinCap, cfg.MaxCap)
	}
	st := c.Status(now)
	if _, err := json.Marshal(st); err != nil {
		t.Fatalf("%s: status does not encode: %v", when, err)
	}
	if bad := nonFinite(st); len(bad) > 0 {
		t.Fatalf("%s: status fields not finite: %v", when, bad)
	}
	if v := c.Admit(now, Query{Arrival: now, Ahead: 3, Targets: c.op}); v.RetryAfter < 0 || v.RetryAfter > maxPredicted {
		t.Fatalf("%s: Retry-After %v", when, v.RetryAfter)
	}
	if w, ok := c.PredictWait(now, 1<<20); ok && (w < 0 || w > maxPredicted) {
		t.Fatalf("%s: predicted wait %v", when, w)
	}
	if k := c.PrefillLimit(); k < 0 || k > maxPrefills {
		t.Fatalf("%s: prefill limit %d", when, k)
	}
}

// Whatever durations and counts arrive through the public Observe*, Decide
// and Admit paths (zero, negative, the extremes of a Duration, running
// counts that are NaN or infinite), the cap stays within its bounds, no
// NaN or infinity reaches the state, and Status encodes.
func TestHostileObservationsKeepTheControllerSane(t *testing.T) {
	durs := []time.Duration{0, -1, -time.Second, math.MinInt64, math.MaxInt64, 1, time.Nanosecond, 50 * time.Millisecond}
	runs := []int{0, -1, 1, 3, 1 << 40, math.MinInt, math.MaxInt}
	floats := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, -5, 1e308, 3}
	for _, tc := range []struct {
		cfg       ControllerConfig
		decisions int
	}{
		{ControllerConfig{}, 120},
		{ControllerConfig{MinCap: 2, MaxCap: 40, InitialCap: 10}, 120},
		// Samples at level 1 and at 4097 put all 4096 levels within reach
		// of the live TTFT samples: each refresh weighs every one.
		{ControllerConfig{Fixed: true, InitialCap: CapLimit, MaxCap: CapLimit}, 40},
	} {
		cfg := tc.cfg
		c := NewController(cfg)
		now := t0
		i := 0
		for k := range tc.decisions { // one a second
			for range 20 {
				i++
				now = now.Add(50 * time.Millisecond)
				d, n := durs[i%len(durs)], runs[(i/3)%len(runs)]
				c.ObserveGap(now, n, d, false)
				c.ObserveGap(now, n%8, 0, false) // zero gaps: two chunks read at once
				if i%4 == 0 {
					c.ObserveFirst(now, n, durs[(i/7)%len(durs)])
				}
				if i%5 == 0 {
					c.ObserveDone(now, Finished{
						Running: floats[(i/5)%len(floats)], EngineTTFT: d, TPOT: durs[(i/11)%len(durs)],
						Hold: durs[(i/13)%len(durs)], OutputTokens: []int{-1, 0, 1, 2, 120, math.MaxInt}[(i/5)%6],
						Targets: []slo.Targets{c.op, {}, {TTFT: -time.Second}, {TTFT: math.MaxInt64}}[(i/17)%4],
						Good:    i%2 == 0,
					})
				}
				if i%9 == 0 {
					c.Admit(now, Query{Arrival: now.Add(-durs[(i/9)%len(durs)]), Ahead: runs[(i/9)%len(runs)] & 0xffff,
						Targets: slo.Targets{TTFT: durs[(i/2)%len(durs)]}, Paced: i%2 == 0, PrefillAge: d})
					c.Promise(now, runs[(i/9)%len(runs)]&0xffff, Query{})
				}
			}
			n := runs[i%len(runs)]
			c.Decide(now, Load{Running: n, Queued: -n, PeakRunning: n, PeakQueued: -3, Rejected: -1})
			if n, cfg := c.Cap(), c.Config(); n < cfg.MinCap || n > cfg.MaxCap {
				t.Fatalf("cap %d outside [%d, %d]", n, cfg.MinCap, cfg.MaxCap)
			}
			if k%10 == 9 {
				checkSane(t, c, now, fmt.Sprintf("%+v after %v", cfg, now.Sub(t0)))
			}
		}
	}
}

// Inputs that are dropped (negative durations; running counts that are NaN
// or infinite, which drop the TPOT ratio) leave every decision as it would
// have been without them.
func TestDroppedObservationsChangeNoDecision(t *testing.T) {
	e, twin := bf16Like(), bf16Like()
	a, b := NewController(ControllerConfig{}), NewController(ControllerConfig{})
	now := t0
	for i := range 240 {
		na, ca := e.run(t, a, now, time.Second)
		nb, cb := twin.run(t, b, now, time.Second)
		if na != nb || !slices.Equal(ca, cb) {
			t.Fatalf("at %d s: caps %v vs %v", i, ca, cb)
		}
		now = na
		n := b.Cap()
		b.ObserveGap(now, n, -time.Millisecond, false)
		b.ObserveGap(now, n, math.MinInt64, false)
		b.ObserveFirst(now, n, -time.Second)
		a.keepPromise(now) // ObserveFirst keeps a promise whatever it measured
	}
	if a.Cap() != b.Cap() || a.Status(now).Reason != b.Status(now).Reason {
		t.Fatalf("cap %d (%s) vs %d (%s)", a.Cap(), a.Status(now).Reason, b.Cap(), b.Status(now).Reason)
	}
}

// A model that holds a NaN (it cannot get one from observations; here it
// is put there) is unknown: Decide holds the cap and says why, Admit lets
// requests queue, and Status encodes, with null for the NaN.
func TestNaNModelHoldsTheCap(t *testing.T) {
	e := bf16Like()
	c := NewController(ControllerConfig{})
	now, _ := e.run(t, c, t0, 3*time.Minute)
	capBefore := c.Cap()
	for range 10 {
		c.tpotR.push(ratioEntry{now, math.NaN()}) // past add, which drops it
	}
	for range 30 {
		now = now.Add(time.Second)
		d := c.Decide(now, Load{Running: capBefore, Queued: 50, PeakRunning: capBefore, PeakQueued: 50, Rejected: 5})
		if d.Changed || d.Cap != capBefore {
			t.Fatalf("a NaN model moved the cap: %+v", d)
		}
		if !strings.Contains(d.Reason, "not finite") {
			t.Fatalf("reason %q, want it to say the model is unknown", d.Reason)
		}
		if v := c.Admit(now, Query{Arrival: now.Add(-10 * time.Second), Ahead: 100, Targets: c.op}); v.Raised {
			t.Fatalf("a NaN model raised the cap: %+v", v)
		}
	}
	if _, err := json.Marshal(c.Status(now)); err != nil {
		t.Fatalf("status of a NaN model does not encode: %v", err)
	}
}

// Float encodes NaN and infinities as null and finite values as numbers,
// so a status holding them encodes.
func TestStatusWithNaNEncodesNull(t *testing.T) {
	st := ControllerStatus{
		Mode: "adaptive", Cap: 3, GapA: Float(math.NaN()), GapB: Float(math.Inf(1)), TTFTA: Float(math.Inf(-1)),
		TTFTB: 0.25, Levels: []LevelStatus{{Running: 1, MeanGap: Float(math.NaN()), Attainment: 0.5}},
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"gap_a_seconds":null`, `"gap_b_seconds":null`, `"engine_ttft_a_seconds":null`,
		`"engine_ttft_b_seconds":0.25`, `"mean_gap_seconds":null`, `"predicted_attainment":0.5`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s missing from %s", want, b)
		}
	}
	var back ControllerStatus
	if err := json.Unmarshal(b, &back); err != nil || back.TTFTB != 0.25 || back.GapA != 0 {
		t.Errorf("round trip: %+v %v", back, err)
	}
}

// With a cap of 10^7 (the gateway refuses it; a controller built in code
// need not), one Status allocates little: nothing in it grows with MaxCap.
func TestStatusAtHugeMaxCapAllocatesLittle(t *testing.T) {
	e := bf16Like()
	c := NewController(ControllerConfig{MaxCap: 10_000_000})
	now, _ := e.run(t, c, t0, time.Minute)
	c.Decide(now, Load{})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	st := c.Status(now)
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Errorf("one Status allocated %d bytes at MaxCap 10^7", got)
	}
	if len(st.Levels) == 0 || len(st.Levels) > maxStatusLevels {
		t.Errorf("%d levels", len(st.Levels))
	}
}

// Status lists at most 64 levels, around the cap, however many levels
// were measured.
func TestStatusListsAtMost64LevelsAroundTheCap(t *testing.T) {
	c := NewController(ControllerConfig{MaxCap: CapLimit, InitialCap: 1000})
	now := t0
	for n := 1; n <= CapLimit; n++ {
		c.ObserveGap(now, n, time.Duration(20+n)*time.Millisecond, false)
		c.ObserveFirst(now, n, time.Duration(200+n)*time.Millisecond)
	}
	c.refresh(now)
	st := c.Status(now)
	if len(st.Levels) != maxStatusLevels || st.LevelsOmitted != CapLimit-maxStatusLevels {
		t.Fatalf("%d levels listed, %d omitted; want %d and %d", len(st.Levels), st.LevelsOmitted, maxStatusLevels, CapLimit-maxStatusLevels)
	}
	if lo, hi := st.Levels[0].Running, st.Levels[len(st.Levels)-1].Running; lo > 1000 || hi < 1000 || hi-lo != maxStatusLevels-1 {
		t.Errorf("levels %d..%d, want 64 consecutive ones around the cap 1000", lo, hi)
	}
	b, err := json.Marshal(st)
	if err != nil || len(b) > 64<<10 {
		t.Errorf("status is %d bytes (%v)", len(b), err)
	}
}
