// Command relaybench measures what a relay costs a streamed LLM response:
// the engine directly, a plain httputil.ReverseProxy, nginx and kneecap's
// gateway. scripts/relay-bench installs nginx, builds kneecap and runs it;
// docs/relay-speed.md explains the numbers.
//
// # Overview
//
// relaybench answers one question: what does a relay in front of a streaming
// engine cost each response? It runs four targets side by side, in one run,
// with their rounds interleaved (the order rotates each round) so that the
// noise of a shared machine falls on all of them alike:
//
//   - direct: the engine itself (engine.go), a minimal OpenAI-compatible
//     server that streams fixed ~200-byte chat chunks, paced (-chunks at
//     -interval) or back to back, so that the relays dominate the cost;
//   - revproxy: a plain httputil.ReverseProxy (roles.go);
//   - rawproxy and rawedge, on request (-targets): the floor of a Go relay
//     (rawproxy.go), net/http's server in front of a hand-written engine
//     client; rawedge reads each arrival with one read(2), as nginx does;
//     rawconn puts a hand-written HTTP/1.1 server in front of it as well
//     (rawconn.go);
//   - nginx: from Debian's packages, with a generated configuration
//     (nginx.go: proxy_buffering off, HTTP/1.1 keep-alive to the engine);
//   - kneecap: the `kneecap serve` binary given by -kneecap.
//
// Each runs as its own process, so the CPU (utime+stime from /proc/PID/stat)
// and peak RSS (VmHWM, reset through /proc/PID/clear_refs before each round)
// of a relay are its own. The load client (load.go) runs in the harness
// process: closed-loop streams over warm keep-alive connections, measuring
// time to the first chunk, stream duration and broken streams (an error, a
// non-200 status, or a stream that ends before [DONE]). report.go turns the
// rounds into a Markdown table; docs/relay-speed.md holds a run's numbers.
//
// # Concurrency model
//
// The harness is one goroutine that runs rounds one after another; a round
// starts one goroutine per concurrent stream and waits for all of them. Each
// child process is watched by one goroutine that waits for its exit. Every
// round has a timeout and the whole run is bounded by -timeout; children are
// stopped (SIGTERM, then SIGKILL to their process group) when the run ends,
// and the kernel kills them if the harness dies (Pdeathsig).
//
// # Ownership
//
// The harness owns its children and their temporary directory (nginx's
// configuration and logs) and removes them at the end. A round's results
// slice is written by its stream goroutines, one index each, and read after
// they have all finished.
package main
