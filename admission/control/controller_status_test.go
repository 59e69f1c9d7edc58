package control

import (
	"testing"
	"time"
)

// Status shows per level the goodput the controller weighs when it
// chooses the cap, with the cap at the best of them, and the measured
// points behind it where the cap held under demand; reading it leaves the
// next decision what it would have read.
func TestStatusGoodputPerLevel(t *testing.T) {
	_, c, now, n, _ := atKneeUnderDemand(t)
	st := c.Status(now)
	if st.Cap != n {
		t.Fatalf("status cap %d, controller %d", st.Cap, n)
	}
	var best, atCap float64
	measured := 0
	for _, l := range st.Levels {
		best = max(best, float64(l.Goodput))
		if l.Running == n {
			atCap = float64(l.Goodput)
		}
		if l.Dwell > 0 {
			measured++
			if l.MeasuredGoodput < 0 {
				t.Errorf("level %d: measured goodput %v", l.Running, l.MeasuredGoodput)
			}
		}
		if l.MeasuredRequests > 0 && (l.MeasuredAttainment < 0 || l.MeasuredAttainment > 1) {
			t.Errorf("level %d: measured attainment %v", l.Running, l.MeasuredAttainment)
		}
		if l.Attainment < minAttainment && l.Goodput != 0 {
			t.Errorf("level %d: goodput %v at a predicted attainment of %v (never an operating point)", l.Running, l.Goodput, l.Attainment)
		}
	}
	if best <= 0 || atCap < (1-goodputSlack)*best {
		t.Errorf("goodput at the cap %d is %.3f, the best level's %.3f", n, atCap, best)
	}
	if measured == 0 {
		t.Error("no level with a measured dwell after three minutes under demand")
	}

	// The class weights are as they were: the same decision follows.
	before := make(map[any]decayed)
	for k, d := range c.classes {
		before[k] = *d
	}
	_ = c.Status(now.Add(30 * time.Second))
	for k, d := range c.classes {
		if *d != before[k] {
			t.Errorf("Status aged the class weight %v: %+v, was %+v", k, *d, before[k])
		}
	}
}
