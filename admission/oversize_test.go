package admission

import (
	"testing"
	"testing/synctest"
	"time"
)

// oversizeCosts are testCosts with requests too long for their target
// held to a tenth of the engine's time.
var oversizeCosts = Costs{PrefillPerToken: 1e-3, StepBase: 10 * time.Millisecond, OversizeShare: 0.1}

// doomedRequest is a prompt of p tokens (p ms alone) with a TTFT target
// of 1 s, which it misses alone when p > 1000, queued for at most wait.
// At its queue-wait bound a waiter is granted if the credit covers it
// then (nothing else wakes the queue in these tests).
func doomedRequest(p int, wait time.Duration) Request {
	r := tokenRequest(p, time.Second)
	r.MaxWait = wait
	return r
}

// After a quiet spell, prompts too long for their target start one after
// another only as far as the credit's bound (2 s of prefill) covers them:
// the second of two 1.5 s prefills waits for the credit to refill, at a
// tenth of the time passed, rather than following the first at once.
func TestOversizeBurstIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 8, MaxQueue: 10})
		l.SetCosts(oversizeCosts)
		ctx := t.Context()
		first, err := l.Acquire(ctx, doomedRequest(1500, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1600 * time.Millisecond)
		first.FirstToken()
		first.Release()
		second := acquireAsync(ctx, l, doomedRequest(1500, 9*time.Second)) // 0.66 s of credit now, 1.56 s then
		synctest.Wait()
		pending(t, second, "a second 1.5 s prefill right after the first")
		time.Sleep(9 * time.Second)
		granted(t, second, "the second once the credit covers it").Release()
	})
}

// A prompt whose prefill alone is longer than the credit's bound (8 s
// against 2 s) is never starved: it starts whenever the credit is full,
// and the next waits until the credit has made up for it.
func TestOversizeLongerThanTheCreditStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 8, MaxQueue: 10})
		l.SetCosts(oversizeCosts)
		ctx := t.Context()
		huge := acquireAsync(ctx, l, doomedRequest(8000, time.Second))
		synctest.Wait()
		tk := granted(t, huge, "an 8 s prefill with the credit full")
		time.Sleep(8 * time.Second)
		tk.FirstToken()
		tk.Release()
		// The credit at -6 s: full again 80 s after the grant.
		early := acquireAsync(ctx, l, doomedRequest(8000, 60*time.Second))
		time.Sleep(61 * time.Second)
		if r := <-early; r.err == nil {
			t.Fatal("the next 8 s prefill started before the credit was full again")
		}
		late := acquireAsync(ctx, l, doomedRequest(8000, 20*time.Second))
		time.Sleep(21 * time.Second)
		granted(t, late, "the next 8 s prefill once the credit is full").Release()
	})
}
