package admission

import "time"

// reservation is a slot held back for a refused request, told to come
// back by until: from the classes below class, and, when flow is set (a
// tenant under its share, see underShare), from the tenants of its
// class it goes before (see aheadOf).
type reservation struct {
	class int
	flow  *flow
	// from is the earliest the refused request may come back (told to
	// wait its Retry-After, taken in whole seconds), until the last it is
	// waited for.
	from, until time.Time
}

// reserveGrace is how long past its Retry-After (rounded up to whole
// seconds, as the HTTP edge sends it) a refused request's slot stays
// reserved for its return.
const reserveGrace = 500 * time.Millisecond

// reserve holds a slot back for the return (after retry) of a
// refused request of flow f: a request that was told to wait is demand
// the slot must keep for, or a request that ranks below it would take the
// slot at once and the returning request would find it held for a whole
// generation. It is held back from the classes below f's, and, when
// tenant is set, from the tenants of f's class that f goes before. At
// most limit slots are held back, for the requests due back first: a new
// reservation replaces the one that ends last if it ends sooner. A
// request of the lowest class reserves only as a tenant under its share
// (nothing is below it).
func (s *policy) reserve(now time.Time, f *flow, tenant bool, retry time.Duration, limit int) {
	class := f.key.class
	if (class == len(s.queue.classes)-1 && !tenant) || retry <= 0 {
		return
	}
	s.dropExpired(now)
	until := now.Add(retry.Truncate(time.Second) + time.Second + reserveGrace)
	if len(s.reserved) >= limit {
		last := 0
		for i, r := range s.reserved {
			if r.until.After(s.reserved[last].until) {
				last = i
			}
		}
		if !until.Before(s.reserved[last].until) {
			return
		}
		s.reserved = append(s.reserved[:last], s.reserved[last+1:]...)
	}
	r := reservation{class: class, from: now.Add(retry.Truncate(time.Second)), until: until}
	if tenant {
		r.flow = f
	}
	s.reserved = append(s.reserved, r)
}

// dropExpired drops the reservations that ended, and those of a
// tenant whose flow was forgotten (see flowFor): its return finds a new
// flow, which cannot consume them.
func (s *policy) dropExpired(now time.Time) {
	kept := s.reserved[:0]
	for _, r := range s.reserved {
		if r.until.After(now) && (r.flow == nil || s.queue.flows[r.flow.key] == r.flow) {
			kept = append(kept, r)
		}
	}
	clear(s.reserved[len(kept):])
	s.reserved = kept
}

// heldFor counts the slots held back from flow f: those reserved by
// a higher class, and by a tenant of f's class that goes before f.
func (s *policy) heldFor(now time.Time, f *flow) int {
	s.dropExpired(now)
	n := 0
	for _, r := range s.reserved {
		if r.class < f.key.class || (r.flow != nil && r.flow != f && r.class == f.key.class && aheadOf(r.flow, f, 0)) {
			n++
		}
	}
	return n
}

// aheadOf reports whether tenant flow a, counted as running extra more
// requests, ranks before flow b of its class for a slot as a tenant under
// its share: its counter is no higher than b's (a counter lower than
// another's is no claim by itself, since idle time is no credit: a flow
// that starts waiting is lifted to the smallest counter, see push), and
// it runs fewer requests per weight.
func aheadOf(a, b *flow, extra int) bool {
	return a.vtc <= b.vtc && float64(a.running+extra)/a.weight < float64(b.running)/b.weight
}

// underShare reports whether a refused request of flow f holds a
// slot back from the tenants of its class: f goes before (aheadOf, counting
// the slots it holds reserved already and the one it asks for) at least
// one other tenant of its class that runs or waits (the class's busy
// set: bounded by the cap and the queue, not by the tenants known).
func (s *policy) underShare(f *flow) bool {
	own := s.ownReservations(f)
	for g := range s.queue.classes[f.key.class].busy {
		if g != f && aheadOf(f, g, own+1) {
			return true
		}
	}
	return false
}

// ownReservation reports whether f holds a live tenant reservation.
func (s *policy) ownReservation(now time.Time, f *flow) bool {
	s.dropExpired(now)
	return s.ownReservations(f) > 0
}

// ownReservations counts the live tenant reservations of f (call
// dropExpired first).
func (s *policy) ownReservations(f *flow) int {
	n := 0
	for _, r := range s.reserved {
		if r.flow == f {
			n++
		}
	}
	return n
}

// consume ends one reservation of f (the earliest to end): a request
// of f was granted a slot, as the one refused would have been on its
// return. It takes f's own (tenant) reservation first, else, when class
// is set, one of its class's; either only once the refused request may
// have come back: a request granted before the refused one was told it
// may return is a new one (a closed-loop user's next turn), not the
// return, and taking the reservation would leave the slot to a lower
// class or another tenant when the return comes (scenario 14's batch
// took an interactive user's slot for a whole generation that way, one
// grant in twenty).
func (s *policy) consume(now time.Time, f *flow, class bool) {
	at := -1
	for i, r := range s.reserved {
		if r.flow == f && !now.Before(r.from) && (at < 0 || r.until.Before(s.reserved[at].until)) {
			at = i
		}
	}
	if at < 0 && class {
		for i, r := range s.reserved {
			if r.class == f.key.class && r.flow == nil && !now.Before(r.from) && (at < 0 || r.until.Before(s.reserved[at].until)) {
				at = i
			}
		}
	}
	if at >= 0 {
		s.reserved = append(s.reserved[:at], s.reserved[at+1:]...)
	}
}

// armReserve arms the reservation timer for the end of the first
// reservation, or re-arms it for an earlier end than the one it was armed
// for (a request refused later, told a shorter Retry-After). When it
// fires, it calls fire with forget, which fire calls under the limiter's
// lock to forget the timer (unless it was replaced as it fired). Nothing
// is armed while nothing is reserved.
func (s *policy) armReserve(now time.Time, fire func(forget func())) {
	if len(s.reserved) == 0 {
		return
	}
	first := s.reserved[0].until
	for _, r := range s.reserved[1:] {
		if r.until.Before(first) {
			first = r.until
		}
	}
	if s.reserveTimer != nil {
		if !first.Before(s.reserveAt) {
			return
		}
		s.reserveTimer.Stop()
	}
	var tm *time.Timer
	forget := func() {
		if s.reserveTimer == tm {
			s.reserveTimer = nil
		}
	}
	tm = time.AfterFunc(max(first.Sub(now), 0), func() { fire(forget) })
	s.reserveAt, s.reserveTimer = first, tm
}

// refused tells the policy of a refused request of flow f: whether it
// holds a slot back as a tenant under its share (tenant: see underShare),
// and then the slots held back already for it or before it (ahead), which
// place its wait (see Limiter.noteRefusal).
func (s *policy) refused(now time.Time, f *flow) (tenant bool, ahead int) {
	s.dropExpired(now)
	if !s.underShare(f) {
		return false, 0
	}
	return true, s.heldFor(now, f) + s.ownReservations(f)
}
