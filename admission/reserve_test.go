package admission

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// classGate refuses every request that must queue while *ra > 0, telling
// it to come back after *ra, and admits it otherwise.
func classGate(ra *time.Duration) Hooks {
	return Hooks{Gate: gateFunc(func(Request, State) (bool, time.Duration) { return *ra <= 0, *ra })}
}

// refuse has a request of class c refused by the gate and returns its
// Retry-After.
func refuse(t *testing.T, l *Limiter, c int) time.Duration {
	t.Helper()
	_, err := l.Acquire(t.Context(), Request{Class: c})
	re := AsReject(err)
	if re == nil || !errors.Is(err, ErrDeadline) {
		t.Fatalf("class %d: %v, want a deadline refusal", c, err)
	}
	return re.RetryAfter
}

// pending fails when ch has an answer.
func pending(t *testing.T, ch <-chan result, what string) {
	t.Helper()
	synctest.Wait()
	select {
	case r := <-ch:
		t.Fatalf("%s granted early (%v)", what, r.err)
	default:
	}
}

// granted returns ch's ticket, failing when it has none yet.
func granted(t *testing.T, ch <-chan result, what string) *Ticket {
	t.Helper()
	synctest.Wait()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.t
	default:
		t.Fatalf("%s not granted", what)
	}
	return nil
}

// A new request of the higher class that comes before the refused one may
// (a closed-loop user's next turn) is not its return: it takes a free slot
// but leaves the reservation, which keeps the slot from the lower class
// when the new request ends, until the refused one is back.
func TestNewRequestLeavesTheReturnsReservation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ra := 10 * time.Second
		l := NewLimiter(Config{Limit: 1, MaxQueue: 10, Classes: []ClassConfig{{Name: "hi"}, {Name: "lo"}}, Hooks: classGate(&ra)})
		lo1, _ := l.Acquire(t.Context(), Request{Class: 1})
		if got := refuse(t, l, 0); got != ra {
			t.Fatalf("Retry-After %v, want the gate's %v", got, ra)
		}
		ra = 0
		lo2 := acquireAsync(t.Context(), l, Request{Class: 1})
		time.Sleep(time.Second)
		lo1.Release()
		pending(t, lo2, "lo, with the slot held for hi's return,")

		time.Sleep(time.Second) // another hi user's next turn, 8 s before the return may come
		hi, err := l.Acquire(t.Context(), Request{Class: 0})
		if err != nil {
			t.Fatalf("new hi request: %v", err)
		}
		time.Sleep(time.Second)
		hi.Release()
		pending(t, lo2, "lo, after the new hi request (it took the return's reservation)")

		time.Sleep(ra + 7*time.Second) // the refused request back, 10 s after its refusal
		back, err := l.Acquire(t.Context(), Request{Class: 0})
		if err != nil {
			t.Fatalf("hi back: %v", err)
		}
		back.Release()
		granted(t, lo2, "lo, once hi is back and done").Release()
	})
}

// A slot held back for a refused request's return is released when its
// reservation ends even when the reservation timer was armed for a later
// one: a request refused later, with a shorter Retry-After, ends first.
func TestReservationTimerRearmsForAnEarlierEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ra := 20 * time.Second
		l := NewLimiter(Config{Limit: 2, MaxQueue: 10, Classes: []ClassConfig{{Name: "hi"}, {Name: "lo"}}, Hooks: classGate(&ra)})
		lo1, _ := l.Acquire(t.Context(), Request{Class: 1})
		lo1b, _ := l.Acquire(t.Context(), Request{Class: 1})
		refuse(t, l, 0) // held until 21.5 s
		ra = 0
		lo2 := acquireAsync(t.Context(), l, Request{Class: 1})
		time.Sleep(time.Second)
		lo1.Release() // the timer armed for 21.5 s
		pending(t, lo2, "lo, with a slot held for hi's return,")
		time.Sleep(time.Second)
		hi, err := l.Acquire(t.Context(), Request{Class: 0})
		if err != nil {
			t.Fatalf("new hi request: %v", err)
		}
		time.Sleep(time.Second)
		ra = 3 * time.Second
		refuse(t, l, 0) // at 3 s, held until 7.5 s
		ra = 0
		time.Sleep(time.Second)
		hi.Release()
		time.Sleep(time.Second)
		lo1b.Release()
		pending(t, lo2, "lo, with two slots held for hi's returns,")
		time.Sleep(3 * time.Second) // 8 s: the second reservation has ended
		granted(t, lo2, "lo, once a reservation ended").Release()
	})
}

// Under strict priority a lower class gets only what the higher ones
// leave free; while they take every slot, its next waiter still starts
// once the class has gone starveBound without a grant, ahead of them.
func TestLowerClassIsNotStarved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 1, MaxQueue: 10, Classes: []ClassConfig{{Name: "hi"}, {Name: "lo"}}})
		ctx, stop := context.WithCancel(t.Context())
		defer stop()
		// Two hi users, each holding the slot 10 s and asking again at
		// once: one of them always waits.
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				for ctx.Err() == nil {
					tk, err := l.Acquire(ctx, Request{Class: 0})
					if err != nil {
						return
					}
					time.Sleep(10 * time.Second)
					tk.Release()
				}
			})
		}
		synctest.Wait()
		start := time.Now()
		lo := acquireAsync(ctx, l, Request{Class: 1})
		time.Sleep(starveBound - time.Second)
		pending(t, lo, "lo, while hi waits,")
		time.Sleep(11 * time.Second)
		tk := granted(t, lo, "lo, after starveBound without a grant")
		if waited := time.Since(start); waited < starveBound {
			t.Fatalf("lo started after %v, before starveBound", waited)
		}
		tk.Release()
		stop()
		wg.Wait()
	})
}

// A tenant's new request before its refused one may be back takes a free
// slot, like a class's, and leaves the tenant's reservation for the return.
func TestTenantsNewRequestLeavesItsReservation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refuse := true
		l := NewLimiter(Config{Limit: 2, MaxQueue: 10, Hooks: Hooks{Gate: gateFunc(func(r Request, s State) (bool, time.Duration) {
			return !refuse, 30 * time.Second
		})}})
		a1, _ := l.Acquire(t.Context(), Request{Tenant: "a"})
		a2, _ := l.Acquire(t.Context(), Request{Tenant: "a"})
		time.Sleep(4 * time.Second) // held 4 s: a slot frees about every 2 s
		_, err := l.Acquire(t.Context(), Request{Tenant: "b"})
		re := AsReject(err)
		if re == nil || re.RetryAfter < time.Second {
			t.Fatalf("b: %v, want a refusal told to come back after a second or more", err)
		}
		refuse = false
		a3 := acquireAsync(t.Context(), l, Request{Tenant: "a"})
		synctest.Wait()
		a1.Release()
		pending(t, a3, "a's newcomer, with the slot kept for b's return,")
		b, err := l.Acquire(t.Context(), Request{Tenant: "b"}) // b's next request, before the return
		if err != nil {
			t.Fatalf("b's new request: %v", err)
		}
		b.Release()
		pending(t, a3, "a's newcomer, after b's new request (it took the return's reservation)")
		time.Sleep(re.RetryAfter)
		back, err := l.Acquire(t.Context(), Request{Tenant: "b"})
		if err != nil {
			t.Fatalf("b back: %v", err)
		}
		back.Release()
		granted(t, a3, "a's newcomer, once b is back and done").Release()
		a2.Release()
	})
}
