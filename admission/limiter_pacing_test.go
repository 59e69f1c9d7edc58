package admission

import (
	"testing"
	"testing/synctest"
	"time"
)

// With pacing, a free slot is granted only once the request granted before
// it has its first token: the second waits in the queue, and State tells
// the gate why (a slot free, one request prefilling for so long).
func TestPacingHoldsTheNextGrantUntilTheFirstToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 4, MaxQueue: 10})
		l.SetPacing(1, 10*time.Second)
		ctx := t.Context()
		a, err := l.Acquire(ctx, Request{})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		b := acquireAsync(ctx, l, Request{})
		synctest.Wait()
		select {
		case <-b:
			t.Fatal("second request granted while the first was still prefilling")
		default:
		}
		s := l.State()
		if s.Running != 1 || s.Queued != 1 || s.Prefilling != 1 || s.PrefillAge != 300*time.Millisecond {
			t.Fatalf("state %+v, want 1 running, 1 queued, 1 prefilling for 300ms", s)
		}
		time.Sleep(400 * time.Millisecond)
		a.FirstToken()
		a.FirstToken() // only the first call counts
		synctest.Wait()
		r := <-b
		if r.err != nil || r.t.QueueWait() != 400*time.Millisecond {
			t.Fatalf("second request: %v, wait %v; want a slot after 400ms", r.err, r.t.QueueWait())
		}
		// A request that ends before its first token (an engine error, a
		// client gone) ends its prefill too.
		c := acquireAsync(ctx, l, Request{})
		synctest.Wait()
		r.t.Release()
		synctest.Wait()
		rc := <-c
		if rc.err != nil {
			t.Fatal(rc.err)
		}
		rc.t.FirstToken()
		if s := l.State(); s.Prefilling != 0 || s.Running != 2 {
			t.Fatalf("state %+v, want 2 running, none prefilling", s)
		}
		a.Release()
		rc.t.Release()
	})
}

// A request counts as prefilling for at most the bound: an engine that
// never sends a first token cannot hold the queue.
func TestPacingBoundFreesTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 4, MaxQueue: 10})
		l.SetPacing(1, 2*time.Second)
		ctx := t.Context()
		a, _ := l.Acquire(ctx, Request{})
		b := acquireAsync(ctx, l, Request{})
		synctest.Wait()
		time.Sleep(2*time.Second - time.Millisecond)
		select {
		case <-b:
			t.Fatal("granted before the bound")
		default:
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		r := <-b
		if r.err != nil || r.t.QueueWait() != 2*time.Second {
			t.Fatalf("waiter: %v, wait %v; want a slot at the bound (2s)", r.err, r.t.QueueWait())
		}
		a.Release()
		r.t.Release()
	})
}

// A limit of k lets k prefills run at once; SetPacing(0) turns pacing off
// and grants what it held back.
func TestPacingLimitAndOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 8, MaxQueue: 10})
		l.SetPacing(2, time.Minute)
		ctx := t.Context()
		var held []*Ticket
		for range 2 {
			tk, err := l.Acquire(ctx, Request{})
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, tk)
		}
		third := acquireAsync(ctx, l, Request{})
		synctest.Wait()
		if s := l.State(); s.Running != 2 || s.Queued != 1 || s.Prefilling != 2 {
			t.Fatalf("state %+v, want 2 running and prefilling, 1 queued", s)
		}
		l.SetPacing(0, 0)
		r := <-third
		if r.err != nil {
			t.Fatal(r.err)
		}
		held = append(held, r.t)
		if s := l.State(); s.Running != 3 || s.Prefilling != 0 {
			t.Fatalf("pacing off: %+v, want 3 running, none counted as prefilling", s)
		}
		for _, tk := range held {
			tk.Release()
		}
	})
}

// A request held only by pacing (a slot free) whose queue-wait bound ends
// is granted, not refused: pacing defers a prefill, it does not turn a
// request away. Held by the cap, it is refused as before.
func TestPacedWaiterIsGrantedAtItsQueueBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 2, MaxQueue: 10})
		l.SetPacing(1, time.Minute)
		ctx := t.Context()
		a, _ := l.Acquire(ctx, Request{})
		paced := acquireAsync(ctx, l, Request{MaxWait: time.Second})
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		r := <-paced
		if r.err != nil || r.t.QueueWait() != time.Second {
			t.Fatalf("paced waiter at its bound: %v, wait %v; want a slot after 1s", r.err, r.t.QueueWait())
		}
		full := acquireAsync(ctx, l, Request{MaxWait: time.Second})
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		if rf := <-full; rf.err == nil {
			t.Fatal("a waiter held by the cap was granted at its bound")
		}
		a.Release()
		r.t.Release()
	})
}
