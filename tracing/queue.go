package tracing

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// queue is the span processor between the SDK and the exporter: ended
// spans wait in a bounded buffer, and one goroutine (run) exports them in
// batches. The SDK's BatchSpanProcessor does the same, but it starts its
// goroutine when built and reports the spans it drops only in a log line
// at shutdown; this one starts nothing until run and counts every span it
// loses: dropped when the buffer is full (a collector that is slow, down
// or hangs) and in an export that failed. A span that ends takes a lock
// for an append and wakes the exporter only when a batch is full: the
// request that ended it pays no scheduler wake-up.
type queue struct {
	mu       sync.Mutex
	buf      []sdktrace.ReadOnlySpan // at most maxQueue; guarded by mu
	jobs     []func()                // spans to end (Defer), at most maxQueue; guarded by mu
	closed   bool                    // run has ended or is flushing; guarded by mu
	kick     chan struct{}           // a batch or a run of jobs is full (buffered 1)
	dropped  atomic.Int64
	exported atomic.Int64

	exp                           sdktrace.SpanExporter
	maxQueue, maxBatch            int
	delay, exportTimeout, shutTTL time.Duration
	log                           *slog.Logger
}

var _ sdktrace.SpanProcessor = (*queue)(nil)

func newQueue(exp sdktrace.SpanExporter, maxQueue, maxBatch int, delay, exportTimeout time.Duration, log *slog.Logger) *queue {
	return &queue{buf: make([]sdktrace.ReadOnlySpan, 0, maxQueue), kick: make(chan struct{}, 1), exp: exp,
		maxQueue: maxQueue, maxBatch: min(maxBatch, maxQueue), delay: delay, exportTimeout: exportTimeout,
		shutTTL: ShutdownTimeout, log: log}
}

// jobRun is how many deferred span ends wake run.
const jobRun = 64

// Defer has run call end, which ends a span, on its own goroutine: the
// request that ended need not pay for the SDK's share of a span (its
// attributes and snapshot). It never blocks; it reports false, and counts
// the span as dropped, when maxQueue ends already wait.
func (q *queue) Defer(end func()) bool {
	q.mu.Lock()
	if q.closed || len(q.jobs) == q.maxQueue {
		q.mu.Unlock()
		q.dropped.Add(1)
		return false
	}
	q.jobs = append(q.jobs, end)
	full := len(q.jobs) == jobRun
	q.mu.Unlock()
	if full {
		select {
		case q.kick <- struct{}{}:
		default:
		}
	}
	return true
}

// endSpans runs the deferred span ends, which put their spans in buf.
func (q *queue) endSpans(jobs []func()) []func() {
	q.mu.Lock()
	jobs = append(jobs, q.jobs...)
	clear(q.jobs)
	q.jobs = q.jobs[:0]
	q.mu.Unlock()
	for _, end := range jobs {
		end()
	}
	clear(jobs)
	return jobs[:0]
}

// OnStart implements sdktrace.SpanProcessor.
func (q *queue) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd implements sdktrace.SpanProcessor: it never blocks the request
// that ended the span. A span that finds the buffer full is dropped.
func (q *queue) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	q.mu.Lock()
	if q.closed || len(q.buf) == q.maxQueue {
		q.mu.Unlock()
		q.dropped.Add(1)
		return
	}
	q.buf = append(q.buf, s)
	full := len(q.buf) == q.maxBatch
	q.mu.Unlock()
	if full {
		select {
		case q.kick <- struct{}{}:
		default:
		}
	}
}

// Shutdown implements sdktrace.SpanProcessor: spans ended later are
// dropped. run does the flushing.
func (q *queue) Shutdown(context.Context) error {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	return nil
}

// ForceFlush implements sdktrace.SpanProcessor; run exports on its own
// schedule.
func (q *queue) ForceFlush(context.Context) error { return nil }

// run ends the deferred spans (Defer) and exports batches of maxBatch
// spans as they fill, and what is buffered every delay, until ctx ends; then it exports what is left and shuts the
// exporter down. Everything after ctx ends gets shutTTL in all: an export
// still in flight then (a collector that hangs) is cut, and the spans left
// are counted as dropped. Each export is bounded by exportTimeout.
func (q *queue) run(ctx context.Context) {
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(q.shutTTL)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-base.Done():
		}
	})
	defer stop()
	batch := make([]sdktrace.ReadOnlySpan, 0, q.maxBatch)
	tick := time.NewTicker(q.delay)
	defer tick.Stop()
	failing := false
	var jobs []func()
	for {
		all := false // the tick takes a partial batch too
		select {
		case <-q.kick:
		case <-tick.C:
			all = true
		case <-ctx.Done():
			jobs = q.endSpans(jobs)
			q.mu.Lock()
			q.closed = true
			q.mu.Unlock()
			for {
				if batch = q.take(batch, true); len(batch) == 0 {
					break
				}
				if base.Err() != nil {
					q.dropped.Add(int64(len(batch)))
					clear(batch)
					batch = batch[:0]
					continue
				}
				batch = q.export(base, batch, &failing)
			}
			_ = q.exp.Shutdown(base)
			return
		}
		jobs = q.endSpans(jobs)
		for batch = q.take(batch, all); len(batch) > 0; batch = q.take(batch, all) {
			batch = q.export(base, batch, &failing)
		}
	}
}

// take moves up to maxBatch buffered spans, the oldest, into batch; with
// fewer buffered, it takes them only if partial is set.
func (q *queue) take(batch []sdktrace.ReadOnlySpan, partial bool) []sdktrace.ReadOnlySpan {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(len(q.buf), q.maxBatch)
	if n < q.maxBatch && !partial {
		return batch
	}
	batch = append(batch, q.buf[:n]...)
	m := copy(q.buf, q.buf[n:])
	clear(q.buf[m:])
	q.buf = q.buf[:m]
	return batch
}

// export sends batch and counts its spans as exported or dropped; it logs
// when exports start failing and when they recover (failing is the state),
// not once per failure. It returns batch emptied.
func (q *queue) export(base context.Context, batch []sdktrace.ReadOnlySpan, failing *bool) []sdktrace.ReadOnlySpan {
	if len(batch) == 0 {
		return batch
	}
	ctx, cancel := context.WithTimeout(base, q.exportTimeout)
	err := q.exp.ExportSpans(ctx, batch)
	cancel()
	n := int64(len(batch))
	switch {
	case err != nil:
		q.dropped.Add(n)
		if !*failing {
			q.log.Warn("tracing: export failed; spans are dropped and counted (kneecap_tracing_spans_dropped_total) until it recovers", "spans", n, "err", err)
		}
	case *failing:
		q.log.Info("tracing: export recovered", "spans", n)
	}
	if err == nil {
		q.exported.Add(n)
	}
	*failing = err != nil
	clear(batch)
	return batch[:0]
}
