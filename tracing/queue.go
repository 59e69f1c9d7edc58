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
// spans wait in a bounded buffer, and one goroutine (run) hands them to
// the exporter (stage) as soon as it wakes, and exports them in batches.
// The SDK's BatchSpanProcessor does the same, but it starts its
// goroutine when built and reports the spans it drops only in a log line
// at shutdown; this one starts nothing until run and counts every span it
// loses: dropped when the buffer is full (a collector that is slow, down
// or hangs) and in an export that failed. A span that ends takes a lock
// for an append and wakes the exporter only when a batch is full: the
// request that ended it pays no scheduler wake-up.
//
// The bound counts the spans ended and not yet exported, staged ones
// included. The exporter of kneecap encodes a span when it is staged, so
// that the SDK's objects of the spans that wait for their batch do not
// stay on the heap for the garbage collector to mark and free in waves.
type queue struct {
	mu       sync.Mutex
	buf      []sdktrace.ReadOnlySpan // ended, not yet staged; guarded by mu
	staged   int                     // spans staged in st, not yet exported; guarded by mu
	jobs     []func()                // spans to end (Defer), at most maxQueue; guarded by mu
	closed   bool                    // run has ended or is flushing; guarded by mu
	kick     chan struct{}           // a batch or a run of jobs is full (buffered 1)
	dropped  atomic.Int64
	exported atomic.Int64

	st                            stager // used by run only
	maxQueue, maxBatch            int
	delay, exportTimeout, shutTTL time.Duration
	log                           *slog.Logger
}

// stager is an exporter that takes spans ahead of their export: Stage
// keeps them in the exporter's own form, Flush exports the n oldest of
// those staged and lets them go, whatever its outcome.
type stager interface {
	Stage(spans []sdktrace.ReadOnlySpan)
	Flush(ctx context.Context, n int) error
	Shutdown(ctx context.Context) error
}

var _ sdktrace.SpanProcessor = (*queue)(nil)

func newQueue(exp sdktrace.SpanExporter, maxQueue, maxBatch int, delay, exportTimeout time.Duration, log *slog.Logger) *queue {
	st, ok := exp.(stager)
	if !ok {
		st = &held{exp: exp}
	}
	return &queue{buf: make([]sdktrace.ReadOnlySpan, 0, maxQueue), kick: make(chan struct{}, 1), st: st,
		maxQueue: maxQueue, maxBatch: min(maxBatch, maxQueue), delay: delay, exportTimeout: exportTimeout,
		shutTTL: ShutdownTimeout, log: log}
}

// held stages spans for an exporter that takes them only whole
// (ExportSpans): the official one of http/json, and tests' fakes.
type held struct {
	exp   sdktrace.SpanExporter
	spans []sdktrace.ReadOnlySpan
}

func (h *held) Stage(spans []sdktrace.ReadOnlySpan) { h.spans = append(h.spans, spans...) }

func (h *held) Flush(ctx context.Context, n int) error {
	n = min(n, len(h.spans))
	err := h.exp.ExportSpans(ctx, h.spans[:n])
	m := copy(h.spans, h.spans[n:])
	clear(h.spans[m:])
	h.spans = h.spans[:m]
	return err
}

func (h *held) Shutdown(ctx context.Context) error { return h.exp.Shutdown(ctx) }

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

// endedStager is a stager that also encodes spans the SDK has not ended
// (kneecap's exporter): Tracer.End writes spans itself only to one.
type endedStager interface {
	StageEnded(s endedSpan)
}

// stageEnded stages s, a span Tracer.End writes without the SDK ending
// it, as OnEnd and stage would have: dropped and counted when the queue is
// full. It runs on run's goroutine only (an end given to Defer), which
// owns the exporter, and only when the exporter is an endedStager.
func (q *queue) stageEnded(s endedSpan) {
	q.mu.Lock()
	if q.closed || len(q.buf)+q.staged >= q.maxQueue {
		q.mu.Unlock()
		q.dropped.Add(1)
		return
	}
	q.staged++
	q.mu.Unlock()
	q.st.(endedStager).StageEnded(s)
}

// OnStart implements sdktrace.SpanProcessor.
func (q *queue) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd implements sdktrace.SpanProcessor: it never blocks the request
// that ended the span. A span that finds the queue full is dropped.
func (q *queue) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	q.mu.Lock()
	if q.closed || len(q.buf)+q.staged >= q.maxQueue {
		q.mu.Unlock()
		q.dropped.Add(1)
		return
	}
	q.buf = append(q.buf, s)
	full := len(q.buf)+q.staged >= q.maxBatch
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

// run ends the deferred spans (Defer), stages the ended ones and exports
// batches of maxBatch spans as they fill, and what is left every delay,
// until ctx ends; then it exports what is left and shuts the exporter
// down. Everything after ctx ends gets shutTTL in all: an export still in
// flight then (a collector that hangs) is cut, and the spans left are
// counted as dropped. Each export is bounded by exportTimeout.
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
	var batch []sdktrace.ReadOnlySpan
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
			batch = q.stage(batch)
			for n := q.take(true); n > 0; n = q.take(true) {
				if base.Err() != nil {
					q.drop(n)
					continue
				}
				q.export(base, n, &failing)
			}
			_ = q.st.Shutdown(base)
			return
		}
		jobs = q.endSpans(jobs)
		batch = q.stage(batch)
		for n := q.take(all); n > 0; n = q.take(all) {
			q.export(base, n, &failing)
		}
	}
}

// stage hands the ended spans to the exporter; batch is scratch space.
func (q *queue) stage(batch []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	q.mu.Lock()
	batch = append(batch, q.buf...)
	clear(q.buf)
	q.buf = q.buf[:0]
	q.staged += len(batch)
	q.mu.Unlock()
	q.st.Stage(batch)
	clear(batch)
	return batch[:0]
}

// take returns how many staged spans to export next: maxBatch, or fewer
// if partial is set; 0 for none.
func (q *queue) take(partial bool) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(q.staged, q.maxBatch)
	if n < q.maxBatch && !partial {
		return 0
	}
	return n
}

// drop lets the n oldest staged spans go unexported, counted as dropped.
func (q *queue) drop(n int) {
	_ = q.st.Flush(canceled, n)
	q.unstage(n)
	q.dropped.Add(int64(n))
}

// canceled is a context that has ended: a Flush with it sends nothing.
var canceled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func (q *queue) unstage(n int) {
	q.mu.Lock()
	q.staged -= n
	q.mu.Unlock()
}

// export sends the n oldest staged spans and counts them as exported or
// dropped; it logs when exports start failing and when they recover
// (failing is the state), not once per failure.
func (q *queue) export(base context.Context, n int, failing *bool) {
	ctx, cancel := context.WithTimeout(base, q.exportTimeout)
	err := q.st.Flush(ctx, n)
	cancel()
	q.unstage(n)
	switch {
	case err != nil:
		q.dropped.Add(int64(n))
		if !*failing {
			q.log.Warn("tracing: export failed; spans are dropped and counted (kneecap_tracing_spans_dropped_total) until it recovers", "spans", n, "err", err)
		}
	case *failing:
		q.log.Info("tracing: export recovered", "spans", n)
	}
	if err == nil {
		q.exported.Add(int64(n))
	}
	*failing = err != nil
}
