package admission

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kneecap/kneecap/slo"
)

// costs of a simple engine: 1 ms of prefill per prompt token and a fixed
// 10 ms step, nothing else.
var testCosts = Costs{PrefillPerToken: 1e-3, StepBase: 10 * time.Millisecond}

func tokenRequest(prompt int, ttft time.Duration) Request {
	return Request{Arrival: time.Now(), Targets: slo.Targets{TTFT: ttft}, PromptTokens: prompt, MaxWait: 10 * time.Second}
}

// Behind a long prefill, a short prompt that still meets its deadline
// after it starts at once, while a second long one that would not waits
// for the first's first token.
func TestPrefillBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 8, MaxQueue: 10})
		l.SetCosts(testCosts)
		ctx := t.Context()
		long, err := l.Acquire(ctx, tokenRequest(600, time.Second)) // nothing under way: at once
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // it has started (a step has passed)
		short, err := l.Acquire(ctx, tokenRequest(100, time.Second))
		if err != nil {
			t.Fatalf("short prompt behind a long one: %v, want a slot (600ms + 100ms < 1s)", err)
		}
		if tok, span, _ := short.PrefillAhead(); tok != 600 || span != 50*time.Millisecond {
			t.Fatalf("PrefillAhead = %d tokens, %v; want 600, 50ms", tok, span)
		}
		second := acquireAsync(ctx, l, tokenRequest(600, time.Second))
		synctest.Wait()
		select {
		case <-second:
			t.Fatal("a second long prompt was granted while it would end past its deadline")
		default:
		}
		if s := l.State(); s.Queued != 1 || s.Prefilling != 2 {
			t.Fatalf("state %+v, want 1 queued, 2 prefilling", s)
		}
		time.Sleep(550 * time.Millisecond)
		long.FirstToken()
		short.FirstToken()
		synctest.Wait()
		r := <-second
		if r.err != nil {
			t.Fatal(r.err)
		}
		if h := l.Held(); h.Prefill != 1 || h.Cap != 0 {
			t.Fatalf("held counts %+v, want one request held by the prefill budget", h)
		}
		for _, tk := range []*Ticket{long, short, r.t} {
			tk.Release()
		}
	})
}

// A request that cannot meet its deadline even with the engine to itself
// is never refused for its size: it starts when no other prefill is under
// way.
func TestDoomedRequestWaitsForAnEmptyPipeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 8, MaxQueue: 10})
		l.SetCosts(testCosts)
		ctx := t.Context()
		short, err := l.Acquire(ctx, tokenRequest(100, time.Second))
		if err != nil {
			t.Fatal(err)
		}
		huge := acquireAsync(ctx, l, tokenRequest(5000, time.Second)) // 5s alone
		synctest.Wait()
		select {
		case <-huge:
			t.Fatal("a request that misses its deadline alone started beside another prefill")
		default:
		}
		time.Sleep(100 * time.Millisecond)
		short.FirstToken()
		synctest.Wait()
		r := <-huge
		if r.err != nil {
			t.Fatal(r.err)
		}
		// And with nothing under way it starts at once.
		r.t.FirstToken()
		other, err := l.Acquire(ctx, tokenRequest(5000, time.Second))
		if err != nil {
			t.Fatal(err)
		}
		short.Release()
		r.t.Release()
		other.Release()
	})
}

// The step budget holds a request whose KV tokens would slow the decode
// step past StepLimit, and grants it when a running request leaves; with
// nothing running it starts whatever its size.
func TestStepBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 8, MaxQueue: 10})
		l.SetCosts(Costs{StepBase: 10 * time.Millisecond, StepPerKVToken: 1e-6, StepLimit: 20 * time.Millisecond})
		ctx := t.Context()
		a, err := l.Acquire(ctx, tokenRequest(6000, 0))
		if err != nil {
			t.Fatal(err)
		}
		a.Generated(1000)
		if kv := l.ResidentKV(); kv != 7000 {
			t.Fatalf("ResidentKV = %d, want 7000", kv)
		}
		b := acquireAsync(ctx, l, tokenRequest(4000, 0)) // 10ms + 11ms > 20ms
		synctest.Wait()
		select {
		case <-b:
			t.Fatal("granted past the step budget")
		default:
		}
		a.Release()
		synctest.Wait()
		r := <-b
		if r.err != nil {
			t.Fatal(r.err)
		}
		if kv := l.ResidentKV(); kv != 4000 {
			t.Fatalf("ResidentKV = %d after the first left, want 4000", kv)
		}
		if h := l.Held(); h.Step != 1 {
			t.Fatalf("held counts %+v, want one held by the step budget", h)
		}
		r.t.Release()
	})
}

// A long prompt held at the head of the queue by the token budget does not
// hold up those behind it that fit: a short one starts at once
// (backfilling), and the long one keeps its place until it leaves, at its
// queue-wait bound or with its client.
func TestShortPromptBackfillsPastAHeldHead(t *testing.T) {
	for _, how := range []string{"timeout", "cancel"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := NewLimiter(Config{Limit: 8, MaxQueue: 10})
				l.SetCosts(testCosts)
				ctx := t.Context()
				long, err := l.Acquire(ctx, tokenRequest(600, time.Second)) // 600 ms of prefill
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(50 * time.Millisecond)
				// 5 s alone: it starts only with no other prefill under way.
				huge := tokenRequest(5000, time.Second)
				huge.MaxWait = 100 * time.Millisecond
				hctx, leave := context.WithCancel(ctx)
				defer leave()
				headDone := acquireAsync(hctx, l, huge)
				synctest.Wait()
				if s := l.State(); s.Queued != 1 {
					t.Fatalf("the long prompt is not held at the head: %+v", s)
				}
				short := acquireAsync(ctx, l, tokenRequest(100, time.Second)) // fits behind the long one
				tk := granted(t, short, "the short prompt behind the held head")
				if tk.QueueWait() != 0 {
					t.Fatalf("waited %v", tk.QueueWait())
				}
				if how == "cancel" {
					time.Sleep(20 * time.Millisecond)
					leave()
				} else {
					time.Sleep(100 * time.Millisecond)
				}
				if r := <-headDone; r.err == nil {
					t.Fatal("the long prompt was granted")
				}
				tk.Release()
				long.Release()
			})
		})
	}
}

// The head held by the cap, not by the budget, holds up those behind it:
// no request passes the count cap by backfilling.
func TestNoBackfillPastTheCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 1, MaxQueue: 10})
		l.SetCosts(testCosts)
		ctx := t.Context()
		a, err := l.Acquire(ctx, tokenRequest(100, time.Second))
		if err != nil {
			t.Fatal(err)
		}
		first := acquireAsync(ctx, l, tokenRequest(100, time.Second))
		synctest.Wait()
		second := acquireAsync(ctx, l, tokenRequest(100, time.Second))
		synctest.Wait()
		pending(t, first, "the first waiter at a full cap")
		pending(t, second, "the second waiter at a full cap")
		a.Release()
		tk := granted(t, first, "the first waiter once a slot freed")
		pending(t, second, "the second waiter")
		tk.Release()
		granted(t, second, "the second waiter").Release()
	})
}

// Zero Costs hold nothing back: only the count cap applies.
func TestZeroCostsHoldNothing(t *testing.T) {
	l := NewLimiter(Config{Limit: 2})
	l.SetCosts(Costs{})
	a, err1 := l.Acquire(t.Context(), tokenRequest(1e6, time.Millisecond))
	b, err2 := l.Acquire(t.Context(), tokenRequest(1e6, time.Millisecond))
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	a.Release()
	b.Release()
}

// A static bound on the prompt tokens in the prefill phase (vLLM's
// max_num_queued_tokens) refuses at once a request that would take them
// beyond it, counting those prefilling and those queued.
func TestMaxPrefillTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 1, MaxQueue: 10})
		l.SetCosts(Costs{MaxPrefillTokens: 5000})
		ctx := t.Context()
		a, err := l.Acquire(ctx, tokenRequest(3000, 0))
		if err != nil {
			t.Fatal(err)
		}
		b := acquireAsync(ctx, l, tokenRequest(1500, 0)) // queued: 4500 in the prefill phase
		synctest.Wait()
		if _, err := l.Acquire(ctx, tokenRequest(1000, 0)); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("a request past the bound: %v, want ErrQueueFull", err)
		}
		a.FirstToken() // its prompt leaves the prefill phase
		c := acquireAsync(ctx, l, tokenRequest(1000, 0))
		synctest.Wait()
		a.Release()
		synctest.Wait()
		rb := <-b
		if rb.err != nil {
			t.Fatal(rb.err)
		}
		rb.t.Release()
		synctest.Wait()
		if rc := <-c; rc.err != nil {
			t.Fatal(rc.err)
		} else {
			rc.t.Release()
		}
	})
}

// The room a request of a given length finds: as many as the cap leaves,
// at most as many prefills as end by its deadline one after another, at
// most as many as the decode step holds, and none while it would not fit.
func TestRoom(t *testing.T) {
	now := time.Now()
	b := newBudget(10)
	typical := candidate{prompt: 200, deadline: now.Add(time.Second)}
	if n := b.room(now, typical, 4, 0); n != 6 {
		t.Fatalf("no costs: room %d, want the 6 slots the cap leaves", n)
	}
	b.costs = Costs{PrefillPerToken: 1e-3} // 200 ms a prefill: 5 by the deadline
	if n := b.room(now, typical, 4, 0); n != 5 {
		t.Fatalf("room %d, want 5 prefills of 200 ms within 1 s", n)
	}
	// A step of 10 ms + 1 ms per running request, at most 16 ms: 6
	// running fit, a seventh does not.
	b.costs = Costs{StepBase: 10 * time.Millisecond, StepPerRunning: time.Millisecond, StepLimit: 16 * time.Millisecond}
	if n := b.room(now, typical, 4, 0); n != 2 {
		t.Fatalf("room %d, want the two the step holds", n)
	}
	b.costs.StepLimit = 14 * time.Millisecond
	if n := b.room(now, typical, 4, 0); n != 0 {
		t.Fatalf("room %d, want none: the step is full", n)
	}
}
