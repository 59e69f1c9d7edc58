package tracing

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// fakeExporter counts what it is given; fail makes it fail, hang makes it
// wait for its context.
type fakeExporter struct {
	mu         sync.Mutex
	batches    []int
	fail, hang bool
	shut       bool
}

func (f *fakeExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	f.mu.Lock()
	f.batches = append(f.batches, len(spans))
	fail, hang := f.fail, f.hang
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	if fail {
		return errors.New("collector down")
	}
	return nil
}

// state returns the batches exported and whether it was shut down.
func (f *fakeExporter) state() ([]int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.batches...), f.shut
}

func (f *fakeExporter) Shutdown(context.Context) error {
	f.mu.Lock()
	f.shut = true
	f.mu.Unlock()
	return nil
}

// queued is a queue of maxQueue spans in front of exp, with a provider
// whose spans go to it.
func queued(exp sdktrace.SpanExporter, maxQueue, maxBatch int) (*queue, func(n int)) {
	q := newQueue(exp, maxQueue, maxBatch, time.Second, 10*time.Second, discard)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(q))
	tr := tp.Tracer("test")
	return q, func(n int) {
		for range n {
			_, s := tr.Start(context.Background(), "s")
			s.End()
		}
	}
}

// TestQueueBatches: full batches leave at once, a partial one after the
// delay, the rest when the context ends; every span is counted exported.
func TestQueueBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := &fakeExporter{}
		q, end := queued(exp, 100, 10)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { q.run(ctx); close(done) }()
		end(25)
		synctest.Wait()
		if got, _ := exp.state(); len(got) != 2 {
			t.Errorf("%d batches before the delay, want 2 full ones", got)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		end(3)
		cancel()
		<-done
		if batches, shut := exp.state(); q.Exported() != 28 || q.dropped.Load() != 0 || !shut {
			t.Errorf("batches %v, exported %d, dropped %d, shut %v", batches, q.Exported(), q.dropped.Load(), shut)
		}
		end(1) // after run: dropped, never blocking
		if q.dropped.Load() != 1 {
			t.Errorf("a span after shutdown: dropped %d", q.dropped.Load())
		}
	})
}

// TestQueueCollectorDown: failed exports count their spans as dropped,
// and so does a full queue; ending a span never waits.
func TestQueueCollectorDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := &fakeExporter{fail: true}
		q, end := queued(exp, 8, 4)
		end(20) // no run yet: 8 queued, 12 dropped
		if q.dropped.Load() != 12 {
			t.Errorf("dropped %d of 20 into a queue of 8", q.dropped.Load())
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { q.run(ctx); close(done) }()
		synctest.Wait()
		cancel()
		<-done
		if q.dropped.Load() != 20 || q.Exported() != 0 {
			t.Errorf("dropped %d, exported %d", q.dropped.Load(), q.Exported())
		}
	})
}

// TestQueueCollectorHangs: an export in flight to a collector that hangs
// is cut ShutdownTimeout after the context ends, and the spans left are
// counted as dropped.
func TestQueueCollectorHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := &fakeExporter{hang: true}
		q, end := queued(exp, 100, 4)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { q.run(ctx); close(done) }()
		end(10) // the first batch of 4 hangs
		synctest.Wait()
		start := time.Now()
		cancel()
		<-done
		if took := time.Since(start); took != ShutdownTimeout {
			t.Errorf("shutdown took %v, want %v", took, ShutdownTimeout)
		}
		if q.dropped.Load() != 10 || q.Exported() != 0 {
			t.Errorf("dropped %d, exported %d", q.dropped.Load(), q.Exported())
		}
	})
}

func (q *queue) Exported() int64 { return q.exported.Load() }

var discard = slog.New(slog.DiscardHandler)

// TestQueueDefer: span ends handed to Defer run on run's goroutine, a
// run of them wakes it, the rest go at the delay or at shutdown; beyond
// the queue's bound they are refused and counted as dropped.
func TestQueueDefer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := &fakeExporter{}
		q := newQueue(exp, 100, 10, time.Second, 10*time.Second, discard)
		tr := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(q)).Tracer("test")
		end := func() {
			_, s := tr.Start(context.Background(), "s")
			s.End()
		}
		for range 100 {
			if !q.Defer(end) {
				t.Fatal("refused within the bound")
			}
		}
		if q.Defer(end) || q.dropped.Load() != 1 {
			t.Errorf("the 101st: dropped %d", q.dropped.Load())
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { q.run(ctx); close(done) }()
		synctest.Wait()
		if q.Exported() != 100 {
			t.Errorf("exported %d after the wake-up, want 100", q.Exported())
		}
		for range 5 {
			q.Defer(end)
		}
		cancel()
		<-done
		if q.Exported() != 105 || q.Defer(end) {
			t.Errorf("exported %d; a Defer after run accepted", q.Exported())
		}
	})
}
