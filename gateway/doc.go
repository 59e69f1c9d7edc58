// Package gateway wires kneecap's gateway together: configuration from
// KNEECAP_* environment variables, the traffic handler chain, the adaptive
// controller, the admin server, Prometheus metrics, and Run, which serves
// and drains. [New] is the one constructor: `kneecap serve` (settings from
// the environment), the demo, the scenario suite and the relay benchmark
// (settings as a struct) all build their gateway with it, so a new setting
// is added to [Config] once and every caller gets it.
//
// # Overview
//
//   - config.go: [Config] (env tags, defaults) and [ConfigFromEnv], whose
//     errors name the variable ([SettingError]); config_validate.go:
//     [Config.Validate], the checks of values that parse but make no
//     sense.
//   - gateway.go: [New] builds everything passively: the admission
//     limiter, the sliding window, the metrics, the proxy and the
//     controller of the cap: its own (adaptive.go) unless [WithCapControl]
//     gives another (a peer algorithm) or [WithStaticCap] none. It installs
//     the controller's limiter hooks (admission.Gate, admission.Refuser),
//     in this one place. [Gateway.Handler]
//     is the traffic handler (chi router: in-flight tracking, then POST
//     /v1/chat/completions and /v1/completions admitted and measured, every
//     other path passed through); [Gateway.AdminHandler] serves /metrics,
//     /metrics/epp, /healthz, /readyz, /status and the live page (/, /live/...). [Gateway.Run] listens, serves, runs the
//     controller and drains on shutdown, all under one errgroup.
//   - metrics.go: the Prometheus metrics, fed as a proxy.Observer (counters,
//     histograms) and read at scrape time (gauges of limiter and window);
//     [DemandRatio], the autoscaling signal. itl.go: kneecap_itl_seconds, a
//     histogram of its own that takes a stream's gaps in batches and
//     exposes what prometheus's histogram would.
//   - adaptive.go: the gateway's own controller, an admission/control.Loop
//     fed with the proxy's observations: adaptive with MaxConcurrency
//     unset, fixed at it when set (it still answers the deadline check,
//     paces prefills and computes Retry-After; a request's queue bound, its
//     class's wait or MaxQueueWait, set longer than its TTFT target wins
//     over the deadline check). Its
//     settings (SLOPercentile, MinCap, MaxCap, InitialCap, PrefillPacing)
//     are read and checked with the rest of Config, once. With StateFile
//     (KNEECAP_STATE_FILE) it starts from the state a previous gateway
//     learnt on the same engine and targets (package learnt: its cap and
//     the engine's token costs) and writes its own every 30 s, at the end
//     and on [Gateway.SaveState].
//   - classes.go: priority classes and tenants from KNEECAP_CLASSES,
//     KNEECAP_TENANTS and the header settings ([ParseClasses],
//     [ParseTenants]); the proxy's Classifier, which names a request's
//     class (header, tenant's class, default: never the highest by
//     accident) and tenant (a bounded header, or [KeyTenant], the hash of
//     the API key: the key itself is never kept). classes_state.go: the
//     per-class and top-N-tenant metrics and /status rows, read from the
//     limiter at scrape time, and the per-class request counter.
//   - admin.go: the admin endpoints and the /status document ([Status];
//     "adaptive" is true only when the cap moves at run time;
//     "not_streamed" names the routes that reassemble a request that is
//     not streamed and those that relay it whole, with their counts;
//     "engine_metrics" the engine's own KV reading).
//   - livepage.go: the live page on the admin port, GET / with its
//     script, style and icon (gateway/page, embedded with go:embed): one
//     page that polls /status and /live/history from the browser and
//     draws the controller's curve, the cap and why it moved, the last ten
//     minutes, the token budget, classes and tenants. Read-only, files of
//     its own only (a strict Content-Security-Policy), GET and HEAD only.
//     livehistory.go: the samples behind /live/history, the numbers
//     /status shows of the limiter and the window and the refusals by
//     reason, one every 2 s for ten minutes in a fixed ring, read off
//     the data path.
//   - The engine's own metrics (KNEECAP_ENGINE_METRICS, package
//     enginemetrics): New builds the scraper of the engine's Prometheus
//     endpoint (over the injected transport if there is one, else its
//     own), registers its kneecap_engine_* metrics and hands it to the
//     controller in [Host].EngineMetrics; [Gateway.EngineMetrics] returns
//     it (nil when off).
//   - epp.go and package eppmetrics: the pod as an InferencePool's
//     endpoint picker reads it. New builds the view from the limiter and
//     the engine-metrics scraper and registers its kneecap_epp_* series;
//     with KNEECAP_EPP_METRICS set, the traffic chain answers GET /metrics
//     with it in an engine's names before the proxy (otherwise nothing is
//     added in front of the proxy). All of it is computed at scrape time.
//   - transport.go: the transport to the engine, tuned for many long
//     streams to one host. firstbyte.go: the traffic port's listener, whose
//     connections wait for their first request as kept-alive ones wait for
//     their next (the idle timeout; the header timeout from the first byte).
//   - log.go: [NewLogger] from LOG_LEVEL and LOG_FORMAT.
//   - reqlog.go: the request log (KNEECAP_REQUEST_LOG, package reqlog):
//     New builds it when a file is named, adds it to the observers, asks
//     the proxy for each prompt's prefix fingerprint (blocks of 512
//     tokens; without the log the proxy computes none) and registers
//     kneecap_request_log_lines_total; Run runs its writer until every
//     traffic handler has returned; [Gateway.RequestLog] returns it.
//   - tracing.go: OpenTelemetry tracing (package tracing): Config.Tracing
//     is read from the standard OTEL_* variables by ConfigFromEnv (a bad
//     one a [SettingError] naming it); New builds the tracer when an
//     endpoint is set, hands its trace.Tracer to the proxy (a span per
//     generation request) and registers kneecap_tracing_spans_dropped_total
//     and _exported_total; [Gateway.Tracing] returns it (nil when off).
//   - genai.go: OpenTelemetry's GenAI server histograms
//     (gen_ai_server_time_to_first_token_seconds, _time_per_output_token_
//     seconds, _request_duration_seconds), an observer of the records
//     beside the metrics, with the conventions' buckets and a bounded set
//     of model label values.
//
// Measurements flow one way: the proxy reports each observation to a fan-out
// (proxy.Observers) of the window, the metrics, the GenAI metrics, the
// controller when it is an observer, and any observer added with
// [WithObserver]. Each takes a stream's later chunks its own way: the
// controller the chunks of each flush (proxy.ChunksObserver: every gap, at
// its moment), the window and the ITL histogram batches of them
// (proxy.GapObserver: every gap, by the end of the stream), an observer
// added with WithObserver one at a time.
//
// # Concurrency model
//
// New starts nothing. Run starts the two HTTP servers, the controller's Run,
// the engine-metrics scraper's Run and the tracer's Run (when on; their
// failures are logged and never end the gateway), the live page's sampler
// (until the admin server has shut down, so that it records the drain) and
// a shutdown goroutine under errgroup.WithContext; when the context ends
// (SIGTERM in `kneecap serve`) it marks the gateway draining (/readyz 503),
// drains the limiter (queued requests get 503), shuts the traffic server
// down within DrainTimeout (cutting streams still running after it), waits
// for every traffic handler to return, shuts the admin server down and,
// once the scraper has returned, closes idle engine connections; last, the
// tracer's exports (when on) end, once no span can end any more, within
// tracing.ShutdownTimeout. Nothing outlives Run, so a whole system can run
// inside a testing/synctest bubble over net.Pipe connections
// (WithListeners, WithTransport).
//
// # Ownership
//
// The gateway owns the limiter, the window, the registry contents it
// registered, its transport (unless injected) and its tracer. The
// controller owns the cap and changes it only through the limiter;
// per-request state belongs to the proxy goroutine serving the request.
package gateway
