package admission

import (
	"testing"
	"testing/synctest"
	"time"
)

// A short answer (3 tokens at most, TPOT target 50 ms: 80 ms of slack
// over its two gaps at a 10 ms step) holds back a prefill of 600 ms that
// would fall in one of its gaps until it ends, but not a prefill of 30 ms;
// an answer of unknown length holds nothing back.
func TestShortAnswerHoldsALongPrefill(t *testing.T) {
	for _, bound := range []int{3, 0} {
		synctest.Test(t, func(t *testing.T) {
			l := NewLimiter(Config{Limit: 8, MaxQueue: 10})
			l.SetCosts(testCosts)
			ctx := t.Context()
			req := tokenRequest(100, time.Second)
			req.MaxOutput, req.Targets.TPOT = bound, 50*time.Millisecond
			short, err := l.Acquire(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(150 * time.Millisecond)
			short.FirstToken()
			short.Generated(1)
			long := acquireAsync(ctx, l, tokenRequest(600, time.Second))
			synctest.Wait()
			select {
			case r := <-long:
				if bound > 0 {
					t.Fatalf("a 600 ms prefill started in the gaps of a 3-token answer: %v", r.err)
				}
				r.t.Release()
				short.Release()
				return
			default:
				if bound == 0 {
					t.Fatal("a 600 ms prefill held back by an answer of unknown length")
				}
			}
			small, err := l.Acquire(ctx, tokenRequest(30, time.Second))
			if err != nil {
				t.Fatalf("a 30 ms prefill beside the short answer: %v, want a slot", err)
			}
			small.FirstToken()
			time.Sleep(20 * time.Millisecond)
			short.Release()
			synctest.Wait()
			r := <-long
			if r.err != nil {
				t.Fatalf("the long prompt once the short answer ended: %v, want a slot", r.err)
			}
			r.t.Release()
			small.Release()
		})
	}
}
