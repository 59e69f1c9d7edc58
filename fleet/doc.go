// Package fleet is the fleet suite (issue 23): N replicas, each a
// simulated engine (sim, 10x speed) with kneecap beside it (gateway.New
// with the settings `kneecap serve` parses), in this process on 127.0.0.1,
// behind real nginx and real HAProxy from Debian's packages running as
// child processes with the configurations docs/fleet.md shows
// (deploy/fleet). It holds only tests.
//
// # Overview
//
//   - replica_test.go: a replica (engine and gateway; a slower engine with
//     a step factor; HAProxy's agent-check on a port of its own).
//   - balancer_test.go: nginx and HAProxy from the documented files, with
//     only the listen port, the servers' addresses and HAProxy's per-server
//     check and agent ports changed (every replica shares 127.0.0.1).
//   - load_test.go: closed-loop users (bench) honouring Retry-After, and
//     what a load measured: goodput, and the requests lost (neither a 200
//     nor a 429 with Retry-After).
//   - protocol_test.go: what kneecap tells a balancer, checked through each
//     balancer with 20 KiB prompts: a refusal retried on another replica, a
//     429 for the client only when every replica refused, a draining
//     replica's 503 retried.
//   - fleet_test.go: TestFleet, three replicas behind each balancer against
//     replicas alone in the same run (a slower third replica in the
//     hetero-* cases); its flags set the windows, rounds, cases and the
//     engines' speed-up (scripts/fleet-bench).
//   - docs_test.go: docs/fleet.md shows deploy/fleet as it is.
//
// The load tests run in real time and skip under -race and in -short; CI
// runs them in a step of their own.
//
// # Ownership
//
// Each test owns its replicas, balancers and loads, and stops them in
// t.Cleanup; the balancers' process groups are killed if the test binary
// dies (Pdeathsig).
package fleet
