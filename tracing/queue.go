package tracing

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// queue is the span processor between the SDK and the exporter: ended
// spans wait in a bounded channel, and one goroutine (run) exports them in
// batches. The SDK's BatchSpanProcessor does the same, but it starts its
// goroutine when built and reports the spans it drops only in a log line
// at shutdown; this one starts nothing until run and counts every span it
// loses: dropped when the queue is full (a collector that is slow, down or
// hangs) and in an export that failed.
type queue struct {
	spans    chan sdktrace.ReadOnlySpan
	closed   atomic.Bool // run has ended or is flushing: no more spans
	dropped  atomic.Int64
	exported atomic.Int64

	exp                           sdktrace.SpanExporter
	maxBatch                      int
	delay, exportTimeout, shutTTL time.Duration
	log                           *slog.Logger
}

var _ sdktrace.SpanProcessor = (*queue)(nil)

// OnStart implements sdktrace.SpanProcessor.
func (q *queue) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd implements sdktrace.SpanProcessor: it never blocks the request
// that ended the span. A span that finds the queue full is dropped.
func (q *queue) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	if q.closed.Load() {
		q.dropped.Add(1)
		return
	}
	select {
	case q.spans <- s:
	default:
		q.dropped.Add(1)
	}
}

// Shutdown implements sdktrace.SpanProcessor: spans ended later are
// dropped. run does the flushing.
func (q *queue) Shutdown(context.Context) error {
	q.closed.Store(true)
	return nil
}

// ForceFlush implements sdktrace.SpanProcessor; run exports on its own
// schedule.
func (q *queue) ForceFlush(context.Context) error { return nil }

// run exports batches of maxBatch spans, or what came within delay of a
// batch's first span, until ctx ends; then it exports what is left and
// shuts the exporter down. Everything after ctx ends gets shutTTL in all:
// an export still in flight then (a collector that hangs) is cut, and the
// spans left are counted as dropped. Each export is bounded by
// exportTimeout.
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
	tick := time.NewTimer(time.Hour)
	tick.Stop()
	defer tick.Stop()
	failing := false
	for {
		select {
		case s := <-q.spans:
			if len(batch) == 0 {
				tick.Reset(q.delay)
			}
			if batch = append(batch, s); len(batch) < q.maxBatch {
				continue
			}
			tick.Stop()
		case <-tick.C:
		case <-ctx.Done():
			q.closed.Store(true)
			for {
				batch = q.fill(batch)
				if len(batch) == 0 || base.Err() != nil {
					q.dropped.Add(int64(len(batch) + len(q.spans)))
					break
				}
				batch = q.export(base, batch, &failing)
			}
			_ = q.exp.Shutdown(base)
			return
		}
		batch = q.export(base, batch, &failing)
	}
}

// fill takes queued spans into batch, up to maxBatch, without waiting.
func (q *queue) fill(batch []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	for len(batch) < q.maxBatch {
		select {
		case s := <-q.spans:
			batch = append(batch, s)
		default:
			return batch
		}
	}
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
