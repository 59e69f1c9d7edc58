package admission

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// refuseAll is a gate that refuses every request that would queue, told
// to come back after ra.
func refuseAll(ra time.Duration) Hooks {
	return Hooks{Gate: gateFunc(func(Request, State) (bool, time.Duration) { return false, ra })}
}

// A refused request is away until it comes back; a slot free meanwhile is
// idle slot time, and its return is counted with how late it came.
func TestIdleSlotTimeWhileARefusedRequestIsAway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 1, MaxQueue: 10, Hooks: refuseAll(3 * time.Second)})
		a, _ := l.Acquire(t.Context(), Request{})
		_, err := l.Acquire(t.Context(), Request{Fingerprint: 7})
		if !errors.Is(err, ErrDeadline) {
			t.Fatalf("got %v, want a refusal", err)
		}
		if o := l.Outside(); o.Away != 1 || o.IdleSlotTime != 0 {
			t.Fatalf("after the refusal: %+v", o)
		}
		time.Sleep(time.Second) // every slot held: nothing idle
		a.Release()
		time.Sleep(1500 * time.Millisecond) // a slot free, one away
		if o := l.Outside(); o.IdleSlotTime != 1500*time.Millisecond {
			t.Fatalf("idle %v, want 1.5s", o.IdleSlotTime)
		}
		b, err := l.Acquire(t.Context(), Request{Fingerprint: 7})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		b.Release()
		o := l.Outside()
		if o.Away != 0 || o.Returned != 1 || o.Lateness != -500*time.Millisecond || o.IdleSlotTime != 1500*time.Millisecond {
			t.Fatalf("after the return: %+v, want none away, one return 0.5s early, 1.5s idle", o)
		}
	})
}

// A refused request that never comes back leaves the count returnGrace
// after its Retry-After; one refused on its client's last try is not
// expected at all.
func TestRefusedRequestsNotBackAreForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 1, MaxQueue: 10, Hooks: refuseAll(time.Second)})
		a, _ := l.Acquire(t.Context(), Request{})
		l.Acquire(t.Context(), Request{Fingerprint: 1})
		l.Acquire(t.Context(), Request{Fingerprint: 2, Retries: 2}) // the SDKs' last try
		a.Release()
		time.Sleep(time.Minute)
		o := l.Outside()
		if o.Away != 0 || o.GaveUp != 1 || o.IdleSlotTime != time.Second+returnGrace {
			t.Fatalf("%+v, want none away, one given up, idle %v", o, time.Second+returnGrace)
		}
	})
}

// A request refused again on its return is counted; its third refusal is
// a client that gave up, and it is not expected back.
func TestRefusedAgainAndThrice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 1, MaxQueue: 10, Hooks: refuseAll(time.Second)})
		a, _ := l.Acquire(t.Context(), Request{})
		defer a.Release()
		for i := range 3 {
			if _, err := l.Acquire(t.Context(), Request{Fingerprint: 9}); err == nil {
				t.Fatalf("attempt %d granted", i)
			}
			time.Sleep(time.Second)
		}
		o := l.Outside()
		if o.Returned != 2 || o.RefusedAgain != 2 || o.GaveUp != 1 || o.Away != 0 {
			t.Fatalf("%+v, want 2 returns refused again, the third refusal given up, none away", o)
		}
	})
}

// A slot the prefill limit holds for the prefill under way is not idle:
// the engine has no room for another prefill, whoever waits.
func TestSlotHeldByPacingIsNotIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 2, MaxQueue: 10})
		l.SetPacing(1, 10*time.Second)
		a, _ := l.Acquire(t.Context(), Request{})
		w := acquireAsync(t.Context(), l, Request{})
		synctest.Wait()
		time.Sleep(2 * time.Second)
		a.FirstToken()
		r := <-w
		if r.err != nil {
			t.Fatal(r.err)
		}
		defer a.Release()
		defer r.t.Release()
		if o := l.Outside(); o.IdleSlotTime != 0 {
			t.Fatalf("idle %v, want none: the slot was held for the prefill under way", o.IdleSlotTime)
		}
	})
}

// The longest Retry-After the clients wait out is learnt from requests that
// come back early (a client that bounds its wait) and raised by one waited
// out in full; the Gate sees it in State.Honoured. A return less than a
// second early (whole seconds) says nothing.
func TestHonouredRetryAfterIsLearntFromReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ra, seen := 30*time.Second, time.Duration(-1)
		l := NewLimiter(Config{Limit: 1, MaxQueue: 10, Hooks: Hooks{Gate: gateFunc(func(_ Request, s State) (bool, time.Duration) {
			seen = s.Honoured
			return false, ra
		})}})
		a, _ := l.Acquire(t.Context(), Request{})
		defer a.Release()
		back := func(key uint64, after time.Duration) {
			t.Helper()
			time.Sleep(after)
			if _, err := l.Acquire(t.Context(), Request{Fingerprint: key}); err == nil {
				t.Fatal("granted with the slot held")
			}
		}
		back(1, 0)
		back(1, 10*time.Second) // told 30s, back after 10s: its client waits 10s at most
		if h := l.Outside().Honoured; h != 10*time.Second {
			t.Fatalf("honoured %v after a return 20s early, want 10s", h)
		}
		back(1, 18*time.Second) // 12s early: the mean moves an eighth of the way
		if h := l.Outside().Honoured; h != 11*time.Second || seen != 11*time.Second {
			t.Fatalf("honoured %v (the gate saw %v), want 11s", h, seen)
		}
		ra = 12 * time.Second
		back(2, 0)
		back(2, 12*time.Second+500*time.Millisecond) // 12s waited out in full
		if h := l.Outside().Honoured; h != 12*time.Second {
			t.Fatalf("honoured %v after 12s waited out, want 12s", h)
		}
	})
}

// One client that does not wait out its Retry-After (or sends the same
// body again at once) among clients that do cannot cut the promises short:
// the bound counts only while most returns come early.
func TestOneEarlyClientDoesNotSetTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 1, MaxQueue: 10, Hooks: refuseAll(10 * time.Second)})
		a, _ := l.Acquire(t.Context(), Request{})
		defer a.Release()
		for key := uint64(1); key <= 4; key++ { // four clients back on time
			l.Acquire(t.Context(), Request{Fingerprint: key})
			time.Sleep(10 * time.Second)
			l.Acquire(t.Context(), Request{Fingerprint: key})
		}
		l.Acquire(t.Context(), Request{Fingerprint: 9}) // one back after a second
		time.Sleep(time.Second)
		l.Acquire(t.Context(), Request{Fingerprint: 9})
		if o := l.Outside(); o.Returned != 5 || o.Honoured != 0 {
			t.Fatalf("%+v: want 5 returns and no bound from one early client", o)
		}
	})
}
