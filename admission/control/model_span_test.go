package control

import (
	"testing"
	"time"
)

// TestLocalSpanCoversEveryLocalQuantile: outside localSpan, localQuantile
// finds no sample at all, which is what lets refresh skip those levels.
func TestLocalSpanCoversEveryLocalQuantile(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	samples := []sample{{t: now, n: 40, y: 0.5}, {t: now.Add(-time.Second), n: 44, y: 0.7}, {t: now, n: 61, y: 0.9}}
	lo, hi := localSpan(samples)
	if lo != 40-localReach || hi != 61+localReach {
		t.Fatalf("span [%d, %d], want [%d, %d]", lo, hi, 40-localReach, 61+localReach)
	}
	flat := func(float64) float64 { return 0.5 }
	for n := 1; n <= 200; n++ {
		_, ok := localQuantile(samples, n, 0.9, now, time.Minute, flat, nil)
		if inside := n >= lo && n <= hi; ok != inside {
			t.Errorf("level %d: localQuantile found samples = %v, inside span = %v", n, ok, inside)
		}
	}
	if lo, hi := localSpan(nil); lo <= hi {
		t.Fatalf("empty samples: span [%d, %d] is not empty", lo, hi)
	}
}
