package control

import "time"

// stepShift watches the decode step for a change of regime (an engine
// slowdown and its recovery) pooled over every level: each chunk gap with
// no prefill under way, over the token model's step at the level and KV
// tokens it ran at. gapShift compares the gaps of the cap's own level
// with what was learnt there, and at a busy engine's cap it starves: the
// gaps free of a prefill come a few at a time (1-41 in 3 s at 217
// running, scenario 27), short of its shiftMinShort, and a doubled step
// went unseen for 22 s (scenario 28) where this finds it in 5. The ratio
// to a fit over every level is the same at each level, so the levels the
// running count passes through pool without weighing each other down.
// Its windows and band are gapShift's (constants.go).
type stepShift struct {
	long, short decayed
	strikes     int
}

// add records the ratio of a decode gap to the step model's prediction.
// It ages its means at most every decayGrain: it sees every decode gap of
// every stream, and the error is under 0.4 % of a sample's weight.
func (s *stepShift) add(now time.Time, tau time.Duration, r float64) {
	if !finite(r) || r <= 0 {
		return
	}
	if s.short.t.IsZero() || now.Sub(s.short.t) >= decayGrain {
		s.long.decay(now, tau)
		s.short.decay(now, shiftShort)
	}
	s.long.w, s.long.sum = s.long.w+1, s.long.sum+r
	s.short.w, s.short.sum = s.short.w+1, s.short.sum+r
}

// check returns the short mean over the long one and whether it stayed
// out of [1/shiftBand, shiftBand] at two checks in a row (then it forgets
// both means: the step model is rescaled by the shift, and what follows
// is measured against it).
func (s *stepShift) check(now time.Time, tau time.Duration) (float64, bool) {
	s.long.decay(now, tau)
	s.short.decay(now, shiftShort)
	if s.short.w < shiftMinShort || s.long.w < shiftMinLong || !(s.long.mean() > 0) {
		s.strikes = 0
		return 1, false
	}
	r := s.short.mean() / s.long.mean()
	if !finite(r) || (r <= shiftBand && r >= 1/shiftBand) {
		s.strikes = 0
		return r, false
	}
	if s.strikes++; s.strikes < 2 {
		return r, false
	}
	s.reset()
	return r, true
}

// reset forgets both means.
func (s *stepShift) reset() { *s = stepShift{} }
