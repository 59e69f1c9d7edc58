package control

import "time"

// timed is an observation that knows when it was made.
type timed interface{ at() time.Time }

// timedRing keeps the last len(buf) observations; the oldest is overwritten
// first, and observations older than maxAge are ignored when read.
type timedRing[T timed] struct {
	buf    []T
	next   int
	full   bool
	maxAge time.Duration
}

func newTimedRing[T timed](size int, maxAge time.Duration) timedRing[T] {
	return timedRing[T]{buf: make([]T, size), maxAge: maxAge}
}

func (r *timedRing[T]) push(v T) {
	r.buf[r.next] = v
	r.next++
	if r.next == len(r.buf) {
		r.next, r.full = 0, true
	}
}

// live returns, in a new slice, the observations not older than maxAge.
func (r *timedRing[T]) live(now time.Time) []T {
	n := r.next
	if r.full {
		n = len(r.buf)
	}
	out := make([]T, 0, n)
	for _, v := range r.buf[:n] {
		if now.Sub(v.at()) <= r.maxAge {
			out = append(out, v)
		}
	}
	return out
}

// reset forgets every observation.
func (r *timedRing[T]) reset() { r.next, r.full = 0, false }
