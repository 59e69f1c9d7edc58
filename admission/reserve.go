package admission

import "time"

// reservation is a slot held back from lower classes for a refused
// request of class class, told to come back by until.
type reservation struct {
	class int
	until time.Time
}

// reserveGrace is how long past its Retry-After (rounded up to whole
// seconds, as the HTTP edge sends it) a refused request's slot stays
// reserved for its return.
const reserveGrace = 500 * time.Millisecond

// reserveLocked holds a slot back from the classes below class until the
// refused request returns (after retry): a request of a higher class that
// was told to wait is demand the slot must keep for, or a lower class
// would take it at once and the returning request would find it held for
// a whole generation. At most limit slots are held back, for the requests
// due back first: a new reservation replaces the one that ends last if it
// ends sooner. The lowest class reserves nothing (nothing is below it).
func (l *Limiter) reserveLocked(now time.Time, class int, retry time.Duration) {
	class = l.queue.classOf(class)
	if class == len(l.queue.classes)-1 || retry <= 0 {
		return
	}
	l.dropExpiredLocked(now)
	until := now.Add(retry.Truncate(time.Second) + time.Second + reserveGrace)
	if len(l.reserved) >= l.limit {
		last := 0
		for i, r := range l.reserved {
			if r.until.After(l.reserved[last].until) {
				last = i
			}
		}
		if !until.Before(l.reserved[last].until) {
			return
		}
		l.reserved = append(l.reserved[:last], l.reserved[last+1:]...)
	}
	l.reserved = append(l.reserved, reservation{class: class, until: until})
}

func (l *Limiter) dropExpiredLocked(now time.Time) {
	kept := l.reserved[:0]
	for _, r := range l.reserved {
		if r.until.After(now) {
			kept = append(kept, r)
		}
	}
	clear(l.reserved[len(kept):])
	l.reserved = kept
}

// heldForLocked counts the slots held back from class: those reserved by
// a higher class.
func (l *Limiter) heldForLocked(now time.Time, class int) int {
	l.dropExpiredLocked(now)
	n := 0
	for _, r := range l.reserved {
		if r.class < class {
			n++
		}
	}
	return n
}

// consumeLocked ends one reservation of class (the earliest to end): a
// request of that class was granted a slot, as the one refused would have
// been on its return.
func (l *Limiter) consumeLocked(class int) {
	at := -1
	for i, r := range l.reserved {
		if r.class == class && (at < 0 || r.until.Before(l.reserved[at].until)) {
			at = i
		}
	}
	if at >= 0 {
		l.reserved = append(l.reserved[:at], l.reserved[at+1:]...)
	}
}

// mayGrantClassLocked reports whether a request of class may take a slot
// now: one is free beyond those held back for higher classes, and pacing
// lets one more prefill start.
func (l *Limiter) mayGrantClassLocked(now time.Time, class int) bool {
	return l.mayGrantLocked(now) && l.runningLocked()+l.heldForLocked(now, l.queue.classOf(class)) < l.limit
}

// armReserveLocked arms the reservation timer when the next waiter is held
// only by reservations, for the end of the first of them.
func (l *Limiter) armReserveLocked(now time.Time) {
	if l.reserveTimer != nil || l.queue.n == 0 || !l.mayGrantLocked(now) {
		return
	}
	if w := l.queue.next(); l.mayGrantClassLocked(now, w.flow.key.class) || len(l.reserved) == 0 {
		return // not held by a reservation (dropped the expired ones)
	}
	first := l.reserved[0].until
	for _, r := range l.reserved[1:] {
		if r.until.Before(first) {
			first = r.until
		}
	}
	l.reserveTimer = time.AfterFunc(max(first.Sub(now), 0), func() {
		l.mu.Lock()
		l.reserveTimer = nil
		l.wakeLocked(time.Now())
		l.mu.Unlock()
	})
}

// noteRefusal reserves a slot for a refused request's return (see
// reserveLocked); call it without the lock held.
func (l *Limiter) noteRefusal(re *RejectError, req Request) {
	if re.Err == ErrDraining {
		return
	}
	l.mu.Lock()
	l.reserveLocked(time.Now(), req.Class, re.RetryAfter)
	l.mu.Unlock()
}
