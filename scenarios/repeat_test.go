package scenarios

import (
	"reflect"
	"testing"
	"testing/synctest"
	"time"
)

// A run is exactly repeatable: the same seed gives the same requests, the
// same outcomes and the same trajectory of the cap, whatever order Go runs
// goroutines in (see eventSpacing). Checked on the adaptive gateway, where
// every decision feeds back into the next, on the open-loop bursts, and on
// users half of whom do not stream (reassembled answers), and where the
// gateway reads the engine's metrics between its ticks (18), and where a
// flood of users arrives together (17), and where long prompts wait at
// the head of the queue (16).
func TestRunsRepeat(t *testing.T) {
	short := Timing{Warmup: 20 * time.Second, Window: 60 * time.Second}
	cases := []struct {
		id     int
		timing Timing
	}{{4, short}, {7, short}, {18, short}, {20, short},
		// The flood of 16 users, from minute 2 (they once all joined it
		// at one instant).
		{17, Timing{Warmup: 90 * time.Second, Window: 60 * time.Second}},
		// Long prompts held at the head of the queue by the token budget
		// until their queue-wait bound (the waiters behind one once
		// waited for the next release, or not, as its timeout and a
		// wake at the same instant fell).
		{16, Timing{Warmup: 60 * time.Second, Window: 60 * time.Second}}}
	for _, c := range cases {
		id := c.id
		sc, _ := ByID(id)
		run := Run{Scenario: sc, Mode: Mode{Kind: "adaptive"}, Timing: c.timing, KneeCapacity: 0.5, Seed: 3}
		var res [3]RunResult
		for i := range res {
			var err error
			synctest.Test(t, func(t *testing.T) { res[i], err = run.execute(t.Context()) })
			if err != nil {
				t.Fatal(err)
			}
			res[i].Wall = 0
		}
		if res[0].Completed == 0 || len(res[0].Caps) < 2 {
			t.Fatalf("scenario %d: nothing to compare: %+v", id, res[0])
		}
		for i := 1; i < len(res); i++ {
			if !reflect.DeepEqual(res[0], res[i]) {
				t.Errorf("scenario %d: run %d differs from run 0:\n%+v\n%+v", id, i, res[i], res[0])
			}
		}
	}
}
