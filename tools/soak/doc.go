// Command soak runs kneecap for a long time under mixed load at the knee,
// with engine faults and bad clients at random, and checks that nothing
// accumulates: no broken response, no leaked slot or goroutine, RSS flat
// after warm-up. scripts/soak runs it; docs/soak.md holds a run's figures.
//
// One process holds it all but the uvicorn engine, on 127.0.0.1 only.
// engines.go starts the uvicorn test engine as a process (testengine.Launch,
// restarted by keepEngineUp after each kill fault) and the simulator
// in-process with its own faults, and a real gateway in front of each,
// configured as `kneecap serve` is (gateway.ConfigFromEnv, then gateway.New with its own
// controller). load.go runs one goroutine per closed-loop user: mixed
// requests, random X-Test-Fault headers, bad clients. classify.go judges
// each answer from its client's view (complete, an OpenAI-shaped error, the
// bad client's own doing, or broken) and counts it. sample.go prints RSS,
// heap, goroutines and each gateway's running/queued/cap every 10 s;
// report.go prints the summary and the verdict. main.go runs the phases in
// order: start, baseline, load, settle (bounded waits for slots, engines and
// goroutines to come back), report, stop; the soak stops all it started.
package main
