// Package gateway wires kneecap's gateway together: configuration from
// KNEECAP_* environment variables, the traffic handler chain, the admin
// server, Prometheus metrics, and Run, which serves and drains.
//
// # Overview
//
//   - config.go: [Config] (env tags, defaults) and [ConfigFromEnv], whose
//     errors name the variable ([SettingError]).
//   - gateway.go: [New] builds everything passively: the admission
//     limiter, the sliding window, the metrics, the proxy and, through
//     [WithController], an optional controller of the cap. [Gateway.Handler]
//     is the traffic handler (chi router: in-flight tracking, then POST
//     /v1/chat/completions and /v1/completions admitted and measured, every
//     other path passed through); [Gateway.AdminHandler] serves /metrics,
//     /healthz, /readyz and /status. [Gateway.Run] listens, serves, runs the
//     controller and drains on shutdown, all under one errgroup.
//   - metrics.go: the Prometheus metrics, fed as a proxy.Observer (counters,
//     histograms) and read at scrape time (gauges of limiter and window);
//     [DemandRatio], the autoscaling signal.
//   - admin.go: the admin endpoints and the /status document ([Status]).
//   - log.go: [NewLogger] from LOG_LEVEL and LOG_FORMAT.
//
// Measurements flow one way: the proxy reports each observation to a fan-out
// (proxy.Observers) of the window, the metrics, the controller when it is
// an observer, and any observer added with [WithObserver].
//
// # Concurrency model
//
// New starts nothing. Run starts the two HTTP servers, the controller's Run
// and a shutdown goroutine under errgroup.WithContext; when the context
// ends (SIGTERM in `kneecap serve`) it marks the gateway draining (/readyz
// 503), drains the limiter (queued requests get 503), shuts the traffic
// server down within DrainTimeout (cutting streams still running after
// it), waits for every traffic handler to return, shuts the admin server
// down and closes idle engine connections. Nothing outlives Run, so a whole
// system can run inside a testing/synctest bubble over net.Pipe
// connections (WithListeners, WithTransport).
//
// # Ownership
//
// The gateway owns the limiter, the window, the registry contents it
// registered and its transport (unless injected). The controller owns the
// cap and changes it only through the limiter; per-request state belongs to
// the proxy goroutine serving the request.
package gateway
