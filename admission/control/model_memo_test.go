package control

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// TestExpMemoSameSums feeds the same chunks and first chunks to a
// controller with its decay memos and to one without: every level of the
// curves and of the shift detectors must end bit for bit the same.
func TestExpMemoSameSums(t *testing.T) {
	cfg := ControllerConfig{MaxCap: 64, TTFT: time.Second, TPOT: 100 * time.Millisecond}
	memo, plain := NewController(cfg), NewController(cfg)
	plain.gap.memo, plain.gapShift.memo, plain.ttft.memo, plain.ttftShift.memo = nil, nil, nil, nil
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Unix(1000, 0)
	for i := range 200000 {
		if rng.IntN(3) > 0 { // chunks often share an instant
			now = now.Add(time.Duration(rng.IntN(5000)) * time.Microsecond)
		}
		running := 1 + rng.IntN(40)
		gap := time.Duration(5+rng.IntN(30)) * time.Millisecond
		if rng.IntN(50) == 0 {
			gap *= 20 // an outlier: a prefill stall
		}
		if i%64 == 0 {
			ttft := time.Duration(50+rng.IntN(400)) * time.Millisecond
			memo.ObserveFirst(now, running, ttft)
			plain.ObserveFirst(now, running, ttft)
		}
		memo.ObserveGap(now, running, gap, false)
		plain.ObserveGap(now, running, gap, false)
		if i%20000 == 0 {
			memo.Decide(now, Load{Running: running})
			plain.Decide(now, Load{Running: running})
		}
	}
	for _, c := range []struct {
		name     string
		got, was any
	}{
		{"gap levels", memo.gap.levels, plain.gap.levels},
		{"ttft levels", memo.ttft.levels, plain.ttft.levels},
		{"gap shift levels", memo.gapShift.lv, plain.gapShift.lv},
		{"ttft shift levels", memo.ttftShift.lv, plain.ttftShift.lv},
		{"gap fit", [2]float64{memo.gap.a, memo.gap.b}, [2]float64{plain.gap.a, plain.gap.b}},
		{"cap", memo.Cap(), plain.Cap()},
	} {
		if !reflect.DeepEqual(c.got, c.was) {
			t.Errorf("%s differ with the memo", c.name)
		}
	}
}

// BenchmarkObserveGap is the controller's work per relayed chunk (under the
// loop's lock), with its decay memos and without.
func BenchmarkObserveGap(b *testing.B) {
	for _, withMemo := range []bool{true, false} {
		name := "memo"
		if !withMemo {
			name = "plain"
		}
		b.Run(name, func(b *testing.B) {
			c := NewController(ControllerConfig{MaxCap: 4096, Fixed: true, InitialCap: 4096, TTFT: time.Second, TPOT: 100 * time.Millisecond})
			if !withMemo {
				c.gap.memo, c.gapShift.memo = nil, nil
			}
			now := time.Unix(1000, 0)
			i := 0
			for b.Loop() {
				now = now.Add(7 * time.Microsecond)
				c.ObserveGap(now, 900+i%100, 20*time.Millisecond, false)
				i++
			}
		})
	}
}
