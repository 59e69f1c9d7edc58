// Package scenarios is the acceptance suite of adaptive admission: the full
// path (benchmark client -> gateway -> simulated engine) run in virtual
// time, in fifteen situations, in every way a user could front the engine.
//
// # Overview
//
//   - scenario.go: the eight [Scenario]s of issue 5 (closed loop on
//     gb10-bf16 and gb10-fp8, open loop at twice the knee, a workload shift,
//     an engine slowdown, light load, bursts, mixed targets) over the
//     simulator's second calibration workload; 9-13 of issue 14 (targets at
//     the engine's edge, set from sim.Profile.Solo; open loop at 1.5x the
//     knee, whose clients never retry; an engine whose prefix cache slows it
//     over the run; heavy-tailed lengths; a cold start), which sweep the
//     static caps only up to MaxSweptCap; 19-20 of issue 21 (32 users
//     that never stream, judged by E2E 13 s; half of them streaming,
//     judged by TTFT and TPOT, half not, by E2E), measured over 6 minutes
//     with no peers and their goodput split into "stream" and "whole";
//     and the [Timing] of a run.
//   - run.go, frontend.go, net.go: one [Run]: a sim.Sim, a gateway built by
//     gateway.New exactly as `kneecap serve` builds it, and bench.Run, all
//     over net.Pipe connections (pipeListener). Modes: the engine alone;
//     a static cap (KNEECAP_MAX_CONCURRENCY set, the token budget off: a
//     count cap); in 23-26 a static cap of the users' count with the
//     token budget on ("budget", printed beside the oracle); the adaptive
//     controller with its defaults; a peer algorithm (package admission/peers)
//     driving the same limiter with whole-request latency, with no queue
//     (over its limit a request is refused at once, as at home).
//   - suite.go: [RunSuite] runs every mode of every scenario, each in its
//     own testing/synctest bubble, in parallel up to -test.parallel; the
//     open-loop scenarios take their rates from scenario 1's oracle.
//     [RunRealTime] runs a scenario over TCP in real time instead.
//   - result.go, report.go: goodput from the bench's records over the
//     measured window (and its halves), convergence of a cap's trajectory,
//     the table, the JSON rows with the field names, and the
//     threshold checks (every one enforced but for a mix's check marked
//     Reported, printed with its reason).
//   - baseline.go: what those checks are judged against beyond one run:
//     the gateway before, the further seeds a check takes its mean or
//     median over, and the misses still listed, with their reasons.
//   - mix.go, mix_report.go: the [Mix]es of issue 16, scenarios 14
//     (priority-mix: chat and batch classes) and 15 (tenant-fairness), each
//     run three ways with the adaptive gateway (classes configured; the
//     Alone groups only; today's FIFO) and reported in rows with the
//     issue's fields ([MixRow]), results split by the bench's
//     Request.Class (RunResult.Classes). They sweep no caps.
//   - idle.go: scenario 21 of issue 23 ([IdleBurst]): steady closed-loop
//     load, an idle minute, then the same users at once; judged by the
//     goodput of the requests sent in the burst's first 30 s against the
//     steady load's (TestIdleBurst).
//   - scaling.go: scenario 22 of issue 23 ([Scaling]): a fleet of gateways
//     behind a least-request balancer that retries refusals, scaled by the
//     HPA's rule on kneecap_demand_ratio ([HPA]), cold replicas after a
//     model load, open-loop demand doubled then halved, against the
//     right-sized fleet (TestScaling). A fixed fleet with a slower replica
//     and a balancer weighing replicas by their caps (kneecap's
//     agent-check) against replicas alone: TestFleetComposes.
//     scaling_fleet.go: the fleet itself (its replicas, the balancer, the
//     agent-check, the scrape and the autoscaler).
//   - traces.go: scenarios 30-31, windows of Mooncake's production traces
//     (testdata/) replayed open loop through bench/trace with the engine's
//     prefix cache on ([TraceWindow]), and their checks; 31 also runs the
//     adaptive gateway without cached-token cost (Mode.Env).
//   - scenarios_test.go, flags_test.go: TestScenarios, the way to run the
//     suite (synctest needs a test): the full sweep checked against the
//     issue's thresholds, or what its flags choose (scenarios, caps, seed,
//     timing, a JSON file, real time), stopping on Ctrl-C.
//
// The serving binary (cmd/kneecap) links no testing package, so the suite
// has no subcommand there; it runs as a test (-args -h lists its flags):
//
//	go test -v -count=1 -timeout 0 -run TestScenarios ./scenarios/ -args -h
//
// Definitions (vLLM's, as in the brief): TTFT from the moment the client
// sent the request (closed loop) or it was due (open loop) to the first
// chunk carrying output; TPOT = (E2E - TTFT)/(output_tokens - 1); goodput =
// completed requests that met TTFT <= 1s and TPOT <= 100ms (or their own
// x-slo-tpot-ms) at once, per second of the measured window (scenario 9
// sets its own TTFT target); a request that is not streamed (19, 20), whose
// client feels only the end, met E2E <= 13 s. Rejected and failed requests
// are never good.
// The oracle is the best static cap; the convergence time is when the cap
// last entered, for good, the band of max(1, 10 %) around its final value,
// except for the cold start (13): there it is the start of the first 30 s
// from the run's start whose goodput reaches 0.9 x the oracle.
//
// # Concurrency model
//
// A run owns everything it starts: the engine's scheduler, the gateway and
// its controller, the benchmark's users and every connection, all inside
// one synctest bubble whose clock moves only when all of them wait, so a
// run of minutes of simulated time takes a second or so of CPU. Runs share
// nothing; the suite runs them as parallel subtests and collects results
// under a mutex. A run is exactly repeatable: goroutines woken at one
// instant run in no fixed order, so no two events that could race share an
// instant (the simulator delivers one step's outputs a microsecond apart,
// users start and follow a completion a fraction of that apart; see
// eventSpacing in run.go), and the controller sums its classes in a fixed
// order. TestRunsRepeat holds it to that.
//
// # Ownership
//
// Owned by the adaptive-admission work stream. It only uses the public API
// of sim, bench, gateway, admission and admission/peers.
package scenarios
