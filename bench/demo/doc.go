// Package demo is `kneecap demo`: a simulated engine and the kneecap gateway
// in one process, under the same closed-loop load twice (the engine alone,
// then through the gateway), with both results side by side.
//
// # Overview
//
//   - demo.go: [Config] and [Run]: start the simulator ([sim], profile
//     gb10-bf16 by default, time-scaled) and the gateway on 127.0.0.1
//     ephemeral ports, run [bench.Run] against each, print the comparison
//     and write the plot. Numbers are shown in the engine's time: the run is
//     TimeScale times faster, so durations are multiplied back and rates
//     divided ([bench.Report.Scaled]).
//   - gateway.go: how the gateway is built for the demo, and the one place
//     where its admission controller is chosen. Its admin listener is on
//     127.0.0.1 too; Run prints the URL of its live page when the gateway
//     starts, and the page is served until the run through it ends.
//
// # Concurrency model
//
// Run starts the engine's scheduler loop and two HTTP servers under one
// errgroup, runs the two benchmarks one after the other on its own
// goroutine, then shuts the servers down (with a timeout) and waits for all
// of them: nothing outlives Run.
//
// # Ownership
//
// Run owns the listeners, servers, engine and gateway it creates. Output
// goes to the writers in Config, which stay the caller's.
package demo
