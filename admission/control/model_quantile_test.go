package control

import (
	"math"
	"testing"
	"time"
)

func TestLocalQuantile(t *testing.T) {
	flat := func(float64) float64 { return 0 }
	var s []sample
	// Level 1: ten samples 1..10. Level 5: ten samples 11..20.
	for i := range 10 {
		s = append(s, sample{t0, 1, float64(i + 1)}, sample{t0, 5, float64(i + 11)})
	}
	buf := make([]wsample, 0, len(s))
	// At level 1 the level-5 samples weigh e^-4 each: the median is about
	// the level's own, 5.5.
	if q, _ := localQuantile(s, 1, 0.5, t0, time.Minute, flat, buf); math.Abs(q-5.6) > 0.2 {
		t.Errorf("median at 1: %.3f, want about 5.5", q)
	}
	// Halfway (level 3) both weigh the same: the median is 10.5.
	if q, _ := localQuantile(s, 3, 0.5, t0, time.Minute, flat, buf); math.Abs(q-10.5) > 1e-9 {
		t.Errorf("median at 3: %.3f, want 10.5", q)
	}
	// Moved along a mean curve of slope 1: at level 9, level 5's samples
	// move up by 4.
	slope := func(n float64) float64 { return n }
	if q, _ := localQuantile(s, 9, 0.5, t0, time.Minute, slope, buf); math.Abs(q-19.5) > 0.2 {
		t.Errorf("median at 9: %.3f, want about 19.5", q)
	}
	if _, ok := localQuantile(nil, 1, 0.5, t0, time.Minute, flat, buf); ok {
		t.Errorf("ok with no samples")
	}
}
