package admission

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// acquireAsync starts an Acquire and returns a channel with its result.
type result struct {
	t   *Ticket
	err error
}

func acquireAsync(ctx context.Context, l *Limiter, req Request) <-chan result {
	ch := make(chan result, 1)
	go func() {
		t, err := l.Acquire(ctx, req)
		ch <- result{t, err}
	}()
	return ch
}

func TestFIFOAndRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 2, MaxQueue: 10})
		ctx := t.Context()
		a, _ := l.Acquire(ctx, Request{})
		b, _ := l.Acquire(ctx, Request{})
		var waits []<-chan result
		for range 3 {
			waits = append(waits, acquireAsync(ctx, l, Request{}))
			synctest.Wait() // keep arrival order
		}
		if s := l.State(); s.Running != 2 || s.Queued != 3 {
			t.Fatalf("state %+v, want 2 running, 3 queued", s)
		}
		time.Sleep(3 * time.Second)
		a.Release()
		a.Release() // exactly once: the second call does nothing
		synctest.Wait()
		r0 := <-waits[0]
		if r0.err != nil || r0.t.QueueWait() != 3*time.Second {
			t.Fatalf("first waiter: %v, wait %v", r0.err, r0.t.QueueWait())
		}
		select {
		case <-waits[1]:
			t.Fatal("second waiter granted out of turn")
		default:
		}
		if s := l.State(); s.Running != 2 || s.Queued != 2 {
			t.Fatalf("after one release: %+v", s)
		}
		b.Release()
		r1 := <-waits[1]
		r0.t.Release()
		r2 := <-waits[2]
		r1.t.Release()
		r2.t.Release()
		if s := l.State(); s.Running != 0 || s.Queued != 0 {
			t.Fatalf("end state %+v", s)
		}
	})
}

func TestRejections(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		req    Request
		sleep  time.Duration
		want   error
		reason string
	}{
		{"queue full", Config{Limit: 1, MaxQueue: 0}, Request{}, 0, ErrQueueFull, "queue_full"},
		{"queue timeout from request", Config{Limit: 1, MaxQueue: 5}, Request{MaxWait: time.Second}, 0, ErrQueueTimeout, "queue_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := NewLimiter(tt.cfg)
				held, _ := l.Acquire(t.Context(), Request{})
				time.Sleep(4 * time.Second) // age of the held slot: 4 s
				start := time.Now()
				_, err := l.Acquire(t.Context(), tt.req)
				re := AsReject(err)
				if !errors.Is(err, tt.want) || re == nil || re.Reason() != tt.reason {
					t.Fatalf("err = %v, want %v", err, tt.want)
				}
				if tt.want == ErrQueueTimeout {
					bound := tt.req.MaxWait
					if waited := time.Since(start); waited != bound {
						t.Fatalf("waited %v, want %v", waited, bound)
					}
				}
				if re.RetryAfter <= 0 {
					t.Fatalf("RetryAfter = %v, want > 0", re.RetryAfter)
				}
				if s := l.State(); s.Queued != 0 {
					t.Fatalf("queue not empty after rejection: %+v", s)
				}
				held.Release()
			})
		})
	}
}

func TestRetryAfterFromHoldTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 2, MaxQueue: 2})
		ctx := t.Context()
		// Measure a 10 s hold.
		a, _ := l.Acquire(ctx, Request{})
		time.Sleep(10 * time.Second)
		a.Release()
		a, _ = l.Acquire(ctx, Request{})
		b, _ := l.Acquire(ctx, Request{})
		w1 := acquireAsync(ctx, l, Request{})
		w2 := acquireAsync(ctx, l, Request{})
		synctest.Wait()
		_, err := l.Acquire(ctx, Request{})
		re := AsReject(err)
		// Position 3 behind 2 slots freeing every 10 s on average: 15 s.
		if re == nil || re.RetryAfter != 15*time.Second || re.State.Position != 3 {
			t.Fatalf("rejection %+v, want RetryAfter 15s at position 3", re)
		}
		a.Release()
		b.Release()
		r1, r2 := <-w1, <-w2
		r1.t.Release()
		r2.t.Release()
	})
}

func TestCancelLeavesQueueAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 1, MaxQueue: 5})
		held, _ := l.Acquire(t.Context(), Request{})
		ctx, cancel := context.WithCancel(t.Context())
		w := acquireAsync(ctx, l, Request{})
		synctest.Wait()
		if l.State().Queued != 1 {
			t.Fatal("not queued")
		}
		cancel()
		r := <-w
		if !errors.Is(r.err, context.Canceled) || l.State().Queued != 0 {
			t.Fatalf("after cancel: %v, %+v", r.err, l.State())
		}
		held.Release()
		if s := l.State(); s.Running != 0 {
			t.Fatalf("slot leaked: %+v", s)
		}
	})
}

// TestCancelRacesGrant hammers the limiter with waiters that give up at
// random instants while slots are released, so that grants and cancels
// race; the cap must hold throughout and every slot must come back.
func TestCancelRacesGrant(t *testing.T) {
	const limit = 3
	l := NewLimiter(Config{Limit: limit, MaxQueue: 1000})
	var inUse, peak atomic.Int64
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(200))*time.Microsecond)
			defer cancel()
			tk, err := l.Acquire(ctx, Request{})
			if err != nil {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("request %d: %v", i, err)
				}
				return
			}
			n := inUse.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(time.Duration(rand.IntN(50)) * time.Microsecond)
			inUse.Add(-1)
			tk.Release()
		})
	}
	wg.Wait()
	if s := l.State(); s.Running != 0 || s.Queued != 0 || peak.Load() > limit {
		t.Fatalf("end state %+v, peak %d (limit %d)", s, peak.Load(), limit)
	}
}

func TestSetLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 1, MaxQueue: 10})
		ctx := t.Context()
		a, _ := l.Acquire(ctx, Request{})
		w1 := acquireAsync(ctx, l, Request{})
		w2 := acquireAsync(ctx, l, Request{})
		synctest.Wait()
		l.SetLimit(3)
		r1, r2 := <-w1, <-w2
		if r1.err != nil || r2.err != nil || l.Running() != 3 {
			t.Fatalf("raise did not grant: %v %v running %d", r1.err, r2.err, l.Running())
		}
		l.SetLimit(0) // means 1
		if l.Limit() != 1 {
			t.Fatalf("limit %d, want 1", l.Limit())
		}
		a.Release()
		r1.t.Release()
		w3 := acquireAsync(ctx, l, Request{})
		synctest.Wait()
		select {
		case <-w3:
			t.Fatal("granted above the lowered limit")
		default:
		}
		r2.t.Release()
		r3 := <-w3
		r3.t.Release()
	})
}

func TestDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 1, MaxQueue: 10})
		ctx := t.Context()
		held, _ := l.Acquire(ctx, Request{})
		w := acquireAsync(ctx, l, Request{})
		synctest.Wait()
		l.Drain()
		if r := <-w; !errors.Is(r.err, ErrDraining) || AsReject(r.err).Reason() != "draining" {
			t.Fatalf("queued request: %v, want ErrDraining", r.err)
		}
		if _, err := l.Acquire(ctx, Request{}); !errors.Is(err, ErrDraining) {
			t.Fatalf("new request: %v, want ErrDraining", err)
		}
		if l.Running() != 1 {
			t.Fatal("drain dropped a running request")
		}
		held.Release()
	})
}

type gateFunc func(Request, State) (bool, time.Duration)

func (f gateFunc) Admit(r Request, s State) (bool, time.Duration) { return f(r, s) }

type retryFunc func(Request, State) time.Duration

func (f retryFunc) Refused(r Request, s State) time.Duration { return f(r, s) }

func TestGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls int
		gate := gateFunc(func(r Request, s State) (bool, time.Duration) {
			calls++
			// Refuse when the request could not start within its TTFT target.
			if s.Position > 1 || r.Targets.TTFT < time.Second {
				return false, 7 * time.Second
			}
			return true, 0
		})
		l := NewLimiter(Config{Limit: 1, MaxQueue: 10, Hooks: Hooks{Gate: gate}})
		ctx := t.Context()
		held, err := l.Acquire(ctx, Request{})
		if err != nil || calls != 0 {
			t.Fatalf("gate consulted for a request that could run: calls %d, err %v", calls, err)
		}
		req := Request{Arrival: time.Now()}
		req.Targets.TTFT = 500 * time.Millisecond
		_, err = l.Acquire(ctx, req)
		if re := AsReject(err); !errors.Is(err, ErrDeadline) || re.RetryAfter != 7*time.Second || re.Reason() != "deadline" {
			t.Fatalf("err = %v, want deadline rejection with 7s", err)
		}
		req.Targets.TTFT = 2 * time.Second
		w := acquireAsync(ctx, l, req)
		synctest.Wait()
		if l.State().Queued != 1 {
			t.Fatal("admitted request not queued")
		}
		held.Release()
		r := <-w
		r.t.Release()
	})
}

func TestRetryEstimatorHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 1})
		l.SetHooks(Hooks{Refuser: retryFunc(func(Request, State) time.Duration { return 42 * time.Second })})
		held, _ := l.Acquire(t.Context(), Request{})
		_, err := l.Acquire(t.Context(), Request{})
		if re := AsReject(err); re == nil || re.RetryAfter != 42*time.Second {
			t.Fatalf("err = %v, want RetryAfter from the hook", err)
		}
		held.Release()
	})
}

func TestAcquireWithDoneContext(t *testing.T) {
	l := NewLimiter(Config{Limit: 1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Acquire(ctx, Request{}); !errors.Is(err, context.Canceled) || l.Running() != 0 {
		t.Fatalf("err = %v, running %d", err, l.Running())
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	l := NewLimiter(Config{Limit: 1 << 20})
	ctx := context.Background()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			t, _ := l.Acquire(ctx, Request{})
			t.Release()
		}
	})
}
