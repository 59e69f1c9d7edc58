// Package proxy relays OpenAI-compatible traffic to one inference engine,
// measuring, admitting and judging every generation request on the way.
//
// # Overview
//
//   - proxy.go: [Config] (hook fields; each says what nil means), the
//     [Admitter] interface the limiter is used through (*admission.Limiter
//     is one), [New], and the handlers: [Proxy.ServeHTTP], which routes by
//     the policy in routes.go without a router; the passthrough relay for
//     read-only and operator-opened paths (an httputil.ReverseProxy,
//     flushed at once); and the admitted relay for engine-time routes
//     without tokens (embeddings, rerank, ...), which hold a slot.
//   - generation.go: a generation request. It is read whole (bounded, 413
//     beyond; within the body budget of budget.go), parsed (400 without
//     contacting the engine), given its targets (x-slo-*-ms headers),
//     rewritten to ask for the usage report when a streamed request did
//     not, admitted, forwarded under the first-token or response timeout,
//     relayed and judged (finish). A request that is not streamed is
//     admitted by the targets its verdict uses (slo.Targets.Verdict: its
//     E2E target alone when it has one) and, on a route that reassembles
//     (Route.Reassemble: the OpenAI chat and completion routes), rewritten
//     to ask for a stream with usage (wire.AsStream) unless a field keeps
//     it whole (wire.WholeOnly). With Config.PrefixBlockTokens set (the
//     request log's), the record gets the prompt's prefix fingerprint
//     (wire.PromptBlocks); the engine's cached prompt tokens come with its
//     usage report (wire.Usage.CachedTokens).
//   - estimate.go: the prompt estimate before the engine answers, learnt
//     per route and model from the usage reports (bounded by
//     maxEstimateModels), behind its mutex.
//   - prefixcache.go: the part of a prompt the engine's prefix cache is
//     predicted to serve, from a bounded table of the fingerprints of the
//     prompts it recently served, corrected by the cached tokens it
//     reports; admission is charged the estimate less it
//     (slo.Record.PromptCharged) unless Config.NoCachedCost.
//   - classify.go: [Class] and [Classifier], the hook that gives a request
//     its priority class, tenant and class targets from its headers (the
//     gateway's); what the limiter is asked (admission.Request) is built
//     there for both admitted routes. A generation request tells its
//     ticket the tokens it was served (Ticket.Served) before releasing it,
//     for its tenant's fair share.
//   - relay.go: the relays. A stream is read event by event with
//     wire.EventReader; each event gets one wire.Inspect and is written as
//     the engine sent it, except the usage-only chunk the gateway itself
//     asked for; it is flushed as soon as no further event that already
//     arrived is buffered. The first output chunk gives TTFT (client and
//     engine), every later one an ITL gap (meter.go, shared by both
//     relays). A non-streamed answer is read whole (up to 8 MiB) for its
//     usage report and relayed.
//   - assembled.go: the relay of a reassembled request: the engine's
//     stream measured as relayStream measures it (observations delivered
//     at once), merged by a wire.Assembler (up to 8 MiB, else 400
//     response_too_large), and answered with one JSON body and the
//     engine's headers but those of its stream; every failure, the
//     engine's error event included, is answered with a status, as
//     nothing was sent before the end.
//   - edge.go: the one place where failures become HTTP. Call sites return
//     sentinel errors (wrapped with %w, or in a *failed that adds the
//     client's message, the engine's status and the cause for the log);
//     one table maps each sentinel, admission's refusals among them, to its
//     status, OpenAI error type, reason (X-Kneecap-Reason, the error code
//     and slo.Record.Reason), outcome and messages. answer writes it before
//     the headers (an OpenAI error; 429/503 refusals with Retry-After in
//     whole seconds, rounded up, and X-Kneecap-Reason), breakOff after them
//     (an SSE error event).
//   - upstream.go: the transport to the engine (one retry on a fresh
//     connection when a reused one failed before any response byte), the
//     stream-idle watch, and the outbound request and hop-by-hop headers.
//   - routes.go: the routing policy ([Routes]) and [CanonicalPath].
//   - budget.go: the budget of request body bytes held across requests.
//   - trace.go: the span of a generation request when Config.Tracer is
//     set: server kind, named and attributed as OpenTelemetry's GenAI
//     conventions say ("chat m", gen_ai.*), with kneecap's own under
//     kneecap.* (admission decision and reason, the cap and running count
//     at the grant, queue wait, predicted and measured TTFT and TPOT, the
//     verdict, Retry-After) and events for the grant and the first token.
//     It continues the client's W3C traceparent (a malformed one starts a
//     new trace) and its context replaces the client's in the engine
//     request. Everything is set at the end from the record and the
//     ticket (Ticket.Grant), on Config.Spans's goroutine when it is set
//     (the tracer's), from a snapshot of the request; without a tracer it
//     costs one nil check per request. [GenAI] names a route's operation and provider, for the
//     gateway's GenAI metrics too.
//   - observer.go: [Observer], the live feed of measurements (first chunk,
//     later chunks, finished record), each tagged with the number of
//     requests running on the engine; [Observers] fans out. An observer
//     takes later chunks one at a time once each is flushed, or the
//     chunks of a flush in one call ([ChunksObserver]), or, for an
//     aggregate, in batches by the end of the stream ([GapObserver]). The
//     chunks wait in the exchange's queue (meter.go); the ticket hears of
//     the output once per flush, before the observers.
//   - proxytest/: a fake engine speaking vLLM, SGLang and llama.cpp chunk
//     shapes, and an in-memory listener for testing/synctest bubbles.
//
// Reading the request body whole before forwarding also keeps the relay
// out of golang/go#40747, where a plain ReverseProxy breaks streams when
// the engine answers before it read the body.
//
// # Concurrency model
//
// A Proxy is safe for concurrent use and starts no goroutines of its own
// (net/http's transport runs its connection goroutines). Each request is
// served on its server goroutine; its state (an exchange and its
// slo.Record) has that single owner and needs no lock. The only shared
// state is the count of running requests (an atomic) and what the limiter
// and observers guard themselves. The engine request's context derives
// from the client's, so a client that leaves cancels it at once; the
// first-token timeout cancels it with its own cause (time.AfterFunc,
// stopped at the first output).
//
// # Ownership
//
// The proxy owns nothing long-lived but its configuration. Per request it
// owns the admission ticket, released from a defer exactly once when the
// response has ended (also on panic) and told of the first output chunk
// (at once for a request relayed whole) so that the limiter's
// prefill pacing can admit the next request, and the record, handed to the
// observers by value when the request ends. The transport belongs to
// whoever passed it in Config.
package proxy
