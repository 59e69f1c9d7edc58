// Package tracing is the gateway's OpenTelemetry tracing: the official Go
// SDK's TracerProvider, configured by the standard OTEL_* variables, whose
// spans are exported over OTLP/HTTP without ever slowing or failing a
// request. The spans themselves (one per generation request, in
// OpenTelemetry's GenAI conventions) are started and ended by package
// proxy through the trace.Tracer that [Tracer.Tracer] returns.
//
// # Overview
//
//   - config.go: [Config] and [FromEnv], which reads the OTEL_* variables
//     from the environment the gateway is given (not the process's, so that
//     tests and the demo pass their own) and refuses a malformed value with
//     a [VarError] naming the variable. Tracing is off unless an OTLP
//     endpoint is set; the protocol is http/protobuf or http/json (grpc is
//     refused at startup: no gRPC client is linked).
//   - tracing.go: [Tracer]: [New] builds the provider (sampler, resource)
//     and the OTLP/HTTP exporter on an HTTP client of its own; [Tracer.Run]
//     exports until its context ends, then for [ShutdownTimeout] at most.
//   - export.go, otlp.go and otlp_values.go: the OTLP/HTTP exporter of http/protobuf. It
//     sends what the official exporter (otlptracehttp) sends, with its
//     headers, gzip and retries, but writes the request's protobuf
//     straight from the SDK's ended spans into buffers it reuses, where
//     the official one builds the generated messages first (allocations
//     per attribute, most of a span's cost on the exporter's goroutine).
//     A span is encoded when it is staged, as soon as the exporter's
//     goroutine has ended it, not when its batch leaves, so that the SDK's
//     objects of the spans waiting for their batch are not kept on the
//     heap. http/json is sent by the official exporter.
//   - ended.go: [Ended], how the proxy ends a span, and [Tracer.End],
//     which writes it into the exporter's batch at once, the SDK's span
//     giving its identity, parent, kind, start, resource and scope, without
//     the SDK's end (its copy and deduplication of the attributes, events
//     and snapshot: half of a span's cost); with http/json, or span limits
//     (OTEL_SPAN_*_LIMIT) that would cut a span, or for a span that holds
//     attributes or links of its own, the SDK's span is ended with it
//     instead ([Ended.EndSDK]).
//   - queue.go: the span processor, a bounded queue in front of the
//     exporter. A sampled span that ends is appended to the queue under a
//     lock, without waiting; a full queue drops it (the bound counts the
//     spans staged in the exporter too). One goroutine stages the ended
//     spans whenever it wakes and exports
//     batches: each OTEL_BSP_MAX_EXPORT_BATCH_SIZE spans as they fill (the
//     span that fills one wakes it), and what is left every
//     OTEL_BSP_SCHEDULE_DELAY, each export bounded by
//     OTEL_BSP_EXPORT_TIMEOUT.
//     The same goroutine ends the requests' spans that the proxy hands it
//     ([Tracer.Defer], then [Tracer.End]: their attributes and encoding,
//     off the request's goroutine), at most
//     OTEL_BSP_MAX_QUEUE_SIZE waiting, woken by every 64.
//     Every span lost, to a full queue, a failed export or the shutdown
//     bound, is counted ([Tracer.Dropped]; the gateway's
//     kneecap_tracing_spans_dropped_total). The SDK's BatchSpanProcessor is
//     not used: it starts its goroutine when built and reports its drops
//     only in a log line at shutdown.
//
// # Concurrency model
//
// New starts nothing. The queue's OnEnd and Defer run on a request's
// goroutine and never block. Run is the one goroutine that
// exports; a collector that is slow or hangs holds only it, while spans
// that end meanwhile fill the queue and are then dropped.
//
// # Ownership
//
// The gateway owns its Tracer: it builds it in New (when the
// configuration is enabled), runs it in Run, and ends Run's context only
// once its traffic handlers have returned, so that every request's span
// has ended. Run owns the exporter and its HTTP client, and closes both
// before it returns.
package tracing
