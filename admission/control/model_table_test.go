package control

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// fullSize gives a controller's curves and shift detectors storage for
// every level up to MaxCap at once, as they had before their storage grew
// on demand; with it refresh also stores every level of its table.
func fullSize(c *Controller) {
	for _, cv := range []*curve{c.gap, c.ttft} {
		cv.levels = make([]decayed, cv.maxN+1)
	}
	for _, d := range []*shiftDetector{c.gapShift, c.ttftShift} {
		d.lv = make([]shiftLevel, d.maxN+1)
	}
}

// runPair feeds two controllers the same observations of engine e (with a
// running count that wanders below the cap, as a real one does) and checks
// after every decision that they decided alike and predict exactly the same
// at every level.
func runPair(t *testing.T, e *engine, lazy, full *Controller, now time.Time, d time.Duration, rng *rand.Rand) time.Time {
	t.Helper()
	end := now.Add(d)
	tick := 100 * time.Millisecond
	for i := 0; now.Before(end); i++ {
		now = now.Add(tick)
		n := max(1, min(lazy.Cap(), e.demand)-rng.IntN(3))
		g := e.gap(n)
		for range int(float64(n) * float64(tick) / float64(g)) {
			at := now.Add(-time.Duration(rng.IntN(int(tick))))
			lazy.ObserveGap(at, n, g, false)
			full.ObserveGap(at, n, g, false)
		}
		hold := e.ttft(n) + time.Duration(e.out-1)*g
		e.phase += float64(n) * float64(tick) / float64(hold)
		for e.phase >= 1 {
			e.phase--
			f := Finished{Targets: lazy.op, Running: float64(n), EngineTTFT: e.ttft(n), TPOT: g, Hold: hold, OutputTokens: e.out, Good: g <= 100*time.Millisecond}
			ttft := e.ttft(n) + time.Duration(rng.IntN(20))*time.Millisecond
			for _, c := range []*Controller{lazy, full} {
				c.ObserveFirst(now, n, ttft)
				c.ObserveDone(now, f)
			}
		}
		if i%10 != 9 {
			continue
		}
		queued := max(e.demand-lazy.Cap(), 0)
		load := Load{Running: n, Queued: queued, PeakRunning: n, PeakQueued: queued}
		dl, df := lazy.Decide(now, load), full.Decide(now, load)
		if dl != df {
			t.Fatalf("%v: decisions differ: %+v with storage on demand, %+v with every level stored", now.Sub(t0), dl, df)
		}
		if lazy.tab.ok != full.tab.ok {
			t.Fatalf("%v: table ready %v vs %v", now.Sub(t0), lazy.tab.ok, full.tab.ok)
		}
		if !lazy.tab.ok {
			continue
		}
		if len(full.tab.p) != full.cfg.MaxCap+1 {
			t.Fatalf("the full controller stored %d levels, want all %d", len(full.tab.p)-1, full.cfg.MaxCap)
		}
		for n := 1; n <= lazy.cfg.MaxCap; n++ {
			if pl, pf := lazy.predict(n), full.predict(n); pl != pf {
				t.Fatalf("%v: level %d of %d stored: predicted %+v, want %+v", now.Sub(t0), n, len(lazy.tab.p)-1, pl, pf)
			}
		}
		tg := lazy.op
		if al, af := lazy.attainment(tg), full.attainment(tg); !slices.Equal(al, af) {
			t.Fatalf("%v: attainment differs", now.Sub(t0))
		}
	}
	return now
}

// TestStorageOnDemandPredictsAsBefore: curves, shift detectors and the
// prediction table that grow with the levels seen decide and predict
// bit for bit as the ones sized to MaxCap did, for a cap fixed far above
// the running count, for the adaptive cap, and across a shift.
func TestStorageOnDemandPredictsAsBefore(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  ControllerConfig
	}{
		{"fixed cap 3000", ControllerConfig{MaxCap: 3000, InitialCap: 3000, Fixed: true}},
		{"adaptive", ControllerConfig{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			e := bf16Like()
			if tc.cfg.Fixed {
				e.demand = 150
			}
			lazy, full := NewController(tc.cfg), NewController(tc.cfg)
			fullSize(full)
			now := runPair(t, e, lazy, full, t0, 90*time.Second, rng)
			e.gapA, e.gapB = e.gapA*14/10, e.gapB*14/10
			e.ttftA, e.ttftB = e.ttftA*14/10, e.ttftB*14/10
			runPair(t, e, lazy, full, now, 60*time.Second, rng)
			if n := len(lazy.tab.p) - 1; n >= lazy.cfg.MaxCap && lazy.cfg.MaxCap > 512 {
				t.Errorf("the table stores all %d levels", n)
			}
			if n := len(lazy.gap.levels); n > 2*e.demand+16 {
				t.Errorf("the gap curve stores %d levels for running counts up to %d", n, e.demand)
			}
		})
	}
}

// BenchmarkDecideFixedLargeCap is one decision of a controller whose cap is
// fixed far above the running count (the relay benchmark's setting).
func BenchmarkDecideFixedLargeCap(b *testing.B) {
	e := bf16Like()
	e.demand = 100
	c := NewController(ControllerConfig{MaxCap: 100000, InitialCap: 100000, Fixed: true})
	now := t0
	for i := range 600 {
		now = now.Add(100 * time.Millisecond)
		n := 80 + i%20
		c.ObserveGap(now, n, e.gap(n), false)
		if i%4 == 0 {
			c.ObserveFirst(now, n, e.ttft(n))
			c.ObserveDone(now, Finished{Targets: c.op, Running: float64(n), EngineTTFT: e.ttft(n), TPOT: e.gap(n), Hold: 10 * time.Second, OutputTokens: 100})
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Second)
		c.Decide(now, Load{Running: 100, PeakRunning: 100})
	}
}
