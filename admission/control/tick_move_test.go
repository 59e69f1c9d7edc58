package control

import "testing"

// A cap that misses P by a little comes down by the share of the cap it
// falls short, one level at least: a level is a large step for a small
// engine's knee and a tiny one at a datacenter's.
func TestLowerByTheShortfall(t *testing.T) {
	for _, tc := range []struct {
		cap, target int
		att         float64
		want        int
	}{
		{222, 184, 0.83, 207}, // 222 * 0.07 = 15.5
		{222, 215, 0.83, 215}, // not past the target
		{8, 5, 0.80, 7},       // 8 * 0.10 < 2: one
		{40, 20, 0.60, 20},    // more than bigViolation short: half the cap
	} {
		c := NewController(ControllerConfig{})
		c.cap = tc.cap
		if m := c.moveLower(plan{target: tc.target, aCap: tc.att}); m.to != tc.want || !m.fail {
			t.Errorf("cap %d, attainment %.2f, target %d: lowered to %d (fail %v), want %d", tc.cap, tc.att, tc.target, m.to, m.fail, tc.want)
		}
	}
}
