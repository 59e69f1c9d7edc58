package admission

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// queued is a request waiting in the limiter, labelled for the order of
// grants.
type queued struct {
	label string
	ch    <-chan result
}

// grantOrder releases the one held slot and each granted ticket in turn
// (after marking it served prompt+output tokens), and returns the labels
// in the order their slots were granted.
func grantOrder(t *testing.T, held *Ticket, qs []queued, prompt, output int) []string {
	t.Helper()
	var order []string
	cur := held
	for range qs {
		cur.Release()
		synctest.Wait()
		next := -1
		for i, q := range qs {
			select {
			case r := <-q.ch:
				if r.err != nil {
					t.Fatalf("%s: %v", q.label, r.err)
				}
				if next >= 0 {
					t.Fatalf("two grants for one release: %s and %s", qs[next].label, q.label)
				}
				next, cur = i, r.t
				cur.Served(prompt, output)
			default:
			}
		}
		if next < 0 {
			t.Fatalf("no grant after %v", order)
		}
		order = append(order, qs[next].label)
	}
	cur.Release()
	return order
}

func TestStrictPriorityAcrossClasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 1, MaxQueue: 10, Classes: []ClassConfig{{Name: "interactive"}, {Name: "batch"}}})
		held, _ := l.Acquire(t.Context(), Request{Class: 1})
		var qs []queued
		for i, c := range []int{1, 1, 0, 7, 0} { // 7: out of range, the lowest class
			qs = append(qs, queued{fmt.Sprintf("%d/%d", i, c), acquireAsync(t.Context(), l, Request{Class: c})})
			synctest.Wait()
		}
		got := fmt.Sprint(grantOrder(t, held, qs, 10, 10))
		if want := "[2/0 4/0 0/1 1/1 3/7]"; got != want {
			t.Fatalf("grant order %s, want %s (strict priority, FIFO within a class)", got, want)
		}
		cs := l.Classes()
		if cs[0].Granted != 2 || cs[1].Granted != 4 || cs[0].Queued+cs[1].Queued+cs[0].Running+cs[1].Running != 0 {
			t.Fatalf("class stats %+v", cs)
		}
	})
}

func TestTenantsShareByTokensServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 1, MaxQueue: 10})
		held, _ := l.Acquire(t.Context(), Request{Tenant: "big"})
		held.Served(1000, 1000) // big was served much already
		var qs []queued
		for i := range 4 {
			qs = append(qs, queued{fmt.Sprintf("big%d", i), acquireAsync(t.Context(), l, Request{Tenant: "big"})})
			synctest.Wait()
		}
		for i := range 2 {
			qs = append(qs, queued{fmt.Sprintf("small%d", i), acquireAsync(t.Context(), l, Request{Tenant: "small"})})
			synctest.Wait()
		}
		// small starts at big's counter (before big's 2000 tokens are
		// settled, at the release), then each grant costs 200 tokens.
		got := fmt.Sprint(grantOrder(t, held, qs, 100, 100))
		if want := "[small0 small1 big0 big1 big2 big3]"; got != want {
			t.Fatalf("grant order %s, want %s", got, want)
		}
		ts := l.Tenants(1)
		if len(ts) != 2 || ts[0].Tenant != "big" || ts[0].Served != 2000+4*200 || ts[1].Tenant != "other" || ts[1].Served != 400 {
			t.Fatalf("tenants %+v", ts)
		}
	})
}

func TestTenantWeights(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := map[string]float64{"a": 2, "b": 1}
		l := NewLimiter(Config{Limit: 1, MaxQueue: 20, Fairness: Fairness{Weight: func(s string) float64 { return w[s] }}})
		held, _ := l.Acquire(t.Context(), Request{Tenant: "x"})
		var qs []queued
		for i := range 6 {
			qs = append(qs, queued{"a", acquireAsync(t.Context(), l, Request{Tenant: "a"})})
			synctest.Wait()
			qs = append(qs, queued{"b", acquireAsync(t.Context(), l, Request{Tenant: "b"})})
			synctest.Wait()
			_ = i
		}
		order := grantOrder(t, held, qs, 50, 50)
		a := 0
		for _, s := range order[:6] {
			if s == "a" {
				a++
			}
		}
		// Weight 2 gets two grants for each of b's while both wait.
		if a != 4 {
			t.Fatalf("first 6 grants %v: a got %d, want 4", order[:6], a)
		}
	})
}

func TestFullQueueShedsLowerClassThenLargerTenant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 1, MaxQueue: 3, Classes: []ClassConfig{{Name: "hi"}, {Name: "lo"}}})
		held, _ := l.Acquire(t.Context(), Request{})
		time.Sleep(time.Second) // a slot held 1s: Retry-After has a measure
		lo := acquireAsync(t.Context(), l, Request{Class: 1})
		synctest.Wait()
		a1 := acquireAsync(t.Context(), l, Request{Tenant: "a"})
		synctest.Wait()
		a2 := acquireAsync(t.Context(), l, Request{Tenant: "a"})
		synctest.Wait()
		// Full: a third of a's requests displaces the batch waiter.
		a3 := acquireAsync(t.Context(), l, Request{Tenant: "a"})
		synctest.Wait()
		r := <-lo
		if !errors.Is(r.err, ErrShed) || AsReject(r.err).Reason() != "shed" || AsReject(r.err).RetryAfter <= 0 {
			t.Fatalf("batch waiter: %v, want shed with a Retry-After", r.err)
		}
		// Full of a's: b (no waiter) displaces a's newest.
		b := acquireAsync(t.Context(), l, Request{Tenant: "b"})
		synctest.Wait()
		if r := <-a3; !errors.Is(r.err, ErrShed) {
			t.Fatalf("a's newest: %v, want shed", r.err)
		}
		// Now a has 2, b 1: a fourth of a's is refused, and so is batch.
		if _, err := l.Acquire(t.Context(), Request{Tenant: "a"}); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("a over its share: %v, want queue full", err)
		}
		if re := l.Precheck(Request{Class: 1}); re == nil || !errors.Is(re, ErrQueueFull) {
			t.Fatalf("precheck of batch: %v, want queue full", re)
		}
		if re := l.Precheck(Request{Tenant: "c"}); re != nil {
			t.Fatalf("precheck of a new tenant: %v, want room (it may displace a's newest)", re)
		}
		if s := l.Classes(); s[1].Shed != 1 || s[0].Shed != 1 {
			t.Fatalf("class stats %+v", s)
		}
		held.Release()
		for _, ch := range []<-chan result{a1, b, a2} {
			r := <-ch
			if r.err != nil {
				t.Fatal(r.err)
			}
			r.t.Release()
		}
	})
}

func TestClassQueueShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 1, MaxQueue: 4, Classes: []ClassConfig{{Name: "hi"}, {Name: "lo", QueueShare: 0.25}}})
		held, _ := l.Acquire(t.Context(), Request{})
		lo := acquireAsync(t.Context(), l, Request{Class: 1})
		synctest.Wait()
		if _, err := l.Acquire(t.Context(), Request{Class: 1}); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("second batch waiter: %v, want queue full (its class holds a quarter of 4)", err)
		}
		held.Release()
		r := <-lo
		r.t.Release()
	})
}

func TestTenantStateIsBounded(t *testing.T) {
	l := NewLimiter(Config{Limit: 1, MaxQueue: 10, Fairness: Fairness{MaxTenants: 8}})
	for i := range 100 {
		tk, err := l.Acquire(t.Context(), Request{Tenant: fmt.Sprint("t", i)})
		if err != nil {
			t.Fatal(err)
		}
		tk.Served(1, 1)
		tk.Release()
	}
	if n := len(l.Tenants(1000)); n > 8 {
		t.Fatalf("%d tenants tracked, want at most 8", n)
	}
}

// A refused request of a higher class keeps a slot from the classes below
// it until it comes back (its Retry-After): the slot is there for it, not
// held by a batch request for a whole generation. A reservation nobody
// comes back for ends by itself.
func TestRefusalReservesASlotForTheReturn(t *testing.T) {
	for _, comesBack := range []bool{true, false} {
		t.Run(fmt.Sprint("comes back ", comesBack), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := NewLimiter(Config{Limit: 1, MaxQueue: 4, Classes: []ClassConfig{{Name: "hi"}, {Name: "lo"}}})
				held, _ := l.Acquire(t.Context(), Request{Class: 1})
				time.Sleep(2 * time.Second) // a measured hold: Retry-After about 2s
				_, err := l.Acquire(t.Context(), Request{Class: 0, MaxWait: 100 * time.Millisecond})
				re := AsReject(err)
				if re == nil || re.RetryAfter <= 0 {
					t.Fatalf("hi: %v, want a refusal with a Retry-After", err)
				}
				held.Release()
				lo := acquireAsync(t.Context(), l, Request{Class: 1})
				synctest.Wait()
				select {
				case r := <-lo:
					t.Fatalf("lo took the slot reserved for hi's return: %v", r.err)
				default:
				}
				if comesBack {
					time.Sleep(re.RetryAfter)
					hi, err := l.Acquire(t.Context(), Request{Class: 0})
					if err != nil {
						t.Fatalf("hi back after its Retry-After: %v", err)
					}
					hi.Release()
				} else {
					time.Sleep(re.RetryAfter + 2*time.Second) // the reservation ends: lo's turn, with no other event
				}
				synctest.Wait()
				select {
				case r := <-lo:
					if r.err != nil {
						t.Fatal(r.err)
					}
					r.t.Release()
				default:
					t.Fatal("lo was not granted the slot once the reservation ended")
				}
			})
		})
	}
}

// A tenant under its share (fewer requests running than another tenant,
// at no higher a counter) that was refused keeps the next free slot for
// its return: the over-share tenant's newcomer does not take it, even
// waiting first, and the refused tenant is told to come back at that
// slot, not at the Gate's longer Retry-After. A reservation nobody comes
// back for ends by itself, and the newcomer has the slot.
func TestRefusedTenantUnderShareGetsTheNextSlot(t *testing.T) {
	for _, comesBack := range []bool{true, false} {
		t.Run(fmt.Sprint("comes back ", comesBack), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				refuse := true
				l := NewLimiter(Config{Limit: 2, MaxQueue: 10, Hooks: Hooks{Gate: gateFunc(func(r Request, s State) (bool, time.Duration) {
					return !refuse, 30 * time.Second // the Gate's promise: behind every request told to come back
				})}})
				a1, _ := l.Acquire(t.Context(), Request{Tenant: "a"})
				a2, _ := l.Acquire(t.Context(), Request{Tenant: "a"})
				time.Sleep(2 * time.Second) // held 2s: a slot frees about every second
				_, err := l.Acquire(t.Context(), Request{Tenant: "b"})
				re := AsReject(err)
				if re == nil || !errors.Is(err, ErrDeadline) {
					t.Fatalf("b: %v, want a deadline refusal", err)
				}
				if re.RetryAfter > 2*time.Second {
					t.Fatalf("b told to come back after %v, want the next slot's (about 1s)", re.RetryAfter)
				}
				refuse = false
				a3 := acquireAsync(t.Context(), l, Request{Tenant: "a"})
				synctest.Wait()
				a1.Release()
				synctest.Wait()
				select {
				case r := <-a3:
					t.Fatalf("a's newcomer took the slot kept for b's return: %v", r.err)
				default:
				}
				if comesBack {
					time.Sleep(re.RetryAfter)
					b, err := l.Acquire(t.Context(), Request{Tenant: "b"})
					if err != nil {
						t.Fatalf("b back after its Retry-After: %v", err)
					}
					b.Release()
				} else {
					time.Sleep(re.RetryAfter + 2*time.Second) // the reservation ends: a3's turn, with no other event
				}
				synctest.Wait()
				select {
				case r := <-a3:
					if r.err != nil {
						t.Fatal(r.err)
					}
					r.t.Release()
				default:
					t.Fatal("a's newcomer was not granted the slot after b's turn")
				}
				a2.Release()
			})
		})
	}
}

// With one tenant a refusal holds nothing back: the next request takes
// the slot that frees, as before tenants existed.
func TestOneTenantRefusalReservesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refuse := true
		l := NewLimiter(Config{Limit: 1, MaxQueue: 10, Hooks: Hooks{Gate: gateFunc(func(r Request, s State) (bool, time.Duration) {
			return !refuse, 30 * time.Second
		})}})
		held, _ := l.Acquire(t.Context(), Request{})
		time.Sleep(time.Second)
		_, err := l.Acquire(t.Context(), Request{})
		if re := AsReject(err); re == nil || re.RetryAfter != 30*time.Second {
			t.Fatalf("%v, want the Gate's refusal and Retry-After", err)
		}
		refuse = false
		next := acquireAsync(t.Context(), l, Request{})
		synctest.Wait()
		held.Release()
		synctest.Wait()
		select {
		case r := <-next:
			if r.err != nil {
				t.Fatal(r.err)
			}
			r.t.Release()
		default:
			t.Fatal("the next request did not take the free slot")
		}
	})
}

// A tenant forgotten for want of room (Fairness.MaxTenants) holds
// nothing back: its return finds a new flow, which could not take the
// slot kept for the old one.
func TestForgottenTenantHoldsNothingBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refuse := true
		l := NewLimiter(Config{Limit: 3, MaxQueue: 10, Fairness: Fairness{MaxTenants: 2}, Hooks: Hooks{Gate: gateFunc(func(r Request, s State) (bool, time.Duration) {
			return !refuse, 30 * time.Second
		})}})
		var as []*Ticket
		for range 3 {
			a, _ := l.Acquire(t.Context(), Request{Tenant: "a"})
			as = append(as, a)
		}
		time.Sleep(2 * time.Second)
		if _, err := l.Acquire(t.Context(), Request{Tenant: "b"}); !errors.Is(err, ErrDeadline) {
			t.Fatalf("b: %v, want a deadline refusal", err)
		}
		refuse = false
		as[0].Release()
		c, err := l.Acquire(t.Context(), Request{Tenant: "c"}) // b, idle, is forgotten for c
		if err != nil {
			t.Fatal(err)
		}
		c.Release()
		a := acquireAsync(t.Context(), l, Request{Tenant: "a"})
		synctest.Wait()
		select {
		case r := <-a:
			if r.err != nil {
				t.Fatal(r.err)
			}
			r.t.Release()
		default:
			t.Fatal("a slot was kept for a forgotten tenant")
		}
		for _, a := range as[1:] {
			a.Release()
		}
	})
}

// BenchmarkRefusalManyTenants is the refusal of a tenant that holds every
// slot while DefaultMaxTenants other tenants are known and idle: the case
// a client that picks its own tenant header can make as costly as it
// likes, checked once per refused request under the limiter's lock.
func BenchmarkRefusalManyTenants(b *testing.B) {
	l := NewLimiter(Config{Limit: 16, MaxQueue: 0})
	ctx := context.Background()
	for i := range DefaultMaxTenants - 1 {
		t, err := l.Acquire(ctx, Request{Tenant: fmt.Sprintf("t%d", i)})
		if err != nil {
			b.Fatal(err)
		}
		t.Served(100, 100)
		t.Release()
	}
	for range 16 {
		if _, err := l.Acquire(ctx, Request{Tenant: "big"}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := l.Acquire(ctx, Request{Tenant: "big"}); AsReject(err) == nil {
			b.Fatalf("err = %v, want a refusal", err)
		}
	}
}
