// Package proxy relays OpenAI-compatible traffic to one inference engine,
// measuring, admitting and judging every generation request on the way.
//
// # Overview
//
//   - proxy.go: [Config] (hook fields; each says what nil means), [New],
//     and the handlers: [Proxy.Generation] for POST /v1/chat/completions
//     and /v1/completions, [Proxy.Passthrough] for every other path (an
//     httputil.ReverseProxy, flushed at once), and [Proxy.ServeHTTP], which
//     routes between them without a router. A generation request is read
//     whole (bounded, 413 beyond), parsed (400 without contacting the
//     engine), given its targets (x-slo-*-ms headers), rewritten to ask for
//     the usage report when a streamed request did not, admitted by the
//     limiter, forwarded, relayed and judged.
//   - relay.go: the relays. A stream is read event by event with
//     wire.EventReader; each event gets one wire.Inspect and is written as
//     the engine sent it, except the usage-only chunk the gateway itself
//     asked for; it is flushed as soon as no further event that already
//     arrived is buffered. The first output chunk gives TTFT (client and
//     engine), every later one an ITL gap. A non-streamed answer is read
//     whole (up to 8 MiB) for its usage report and relayed.
//   - edge.go: the one place where admission refusals and failures become
//     HTTP: 429/503 with Retry-After (whole seconds, rounded up) and
//     X-Kneecap-Reason; 400, 413, 502, 504; an SSE error event once a
//     stream's headers are out.
//   - observer.go: [Observer], the live feed of measurements (first chunk,
//     later chunks, finished record), each tagged with the number of
//     requests running on the engine; [Observers] fans out.
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
// (at once for a request that is not streamed) so that the limiter's
// prefill pacing can admit the next request, and the record, handed to the
// observers by value when the request ends. The transport belongs to
// whoever passed it in Config.
package proxy
