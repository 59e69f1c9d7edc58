package testengine

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Kind is an engine's HTTP stack.
type Kind string

// Kinds of engine.
const (
	// Uvicorn is a FastAPI app on uvicorn streaming vLLM-shaped chunks.
	Uvicorn Kind = "uvicorn"
	// HTTPLib is a cpp-httplib server streaming llama.cpp-shaped chunks.
	HTTPLib Kind = "httplib"
)

// Kinds lists every Kind, for table tests.
var Kinds = []Kind{Uvicorn, HTTPLib}

// Request headers that set one request's behaviour.
const (
	// HeaderFault selects a fault mode (the Fault* constants).
	HeaderFault = "X-Test-Fault"
	// HeaderFirstDelay is the delay in milliseconds before the first output.
	HeaderFirstDelay = "X-Test-First-Delay-Ms"
	// HeaderGap is the delay in milliseconds between output chunks.
	HeaderGap = "X-Test-Gap-Ms"
	// HeaderTokens overrides the request's max_tokens: the number of output
	// tokens, one per content chunk.
	HeaderTokens = "X-Test-Tokens"
	// HeaderLogprobs gives every output token logprobs with this many top
	// logprobs, in the engine's shape (vLLM's chat and completion forms;
	// llama.cpp's "content" list), in each chunk and in the answer that is
	// not streamed.
	HeaderLogprobs = "X-Test-Logprobs"
	// HeaderToolCalls makes a chat answer this many tool calls ("tool_0",
	// ...) whose JSON arguments take the output tokens in turn, streamed
	// as the engine streams them (the first delta of a call with its id,
	// type and name), with finish_reason "tool_calls".
	HeaderToolCalls = "X-Test-Tool-Calls"
)

// HeaderTraceparent is the response header in which the uvicorn engine
// echoes the W3C traceparent a generation request came with (absent when
// it came without), as vLLM would continue that trace.
const HeaderTraceparent = "X-Test-Traceparent"

// Fault modes, the values of HeaderFault. "Hang" means silence until the
// client goes away, at most 120 s; "kill" means the engine SIGKILLs itself,
// after which [Engine.Exited] is true and [Engine.Restart] brings it back.
const (
	// FaultKillBeforeHeaders: killed after reading the request, before any
	// byte of the response.
	FaultKillBeforeHeaders = "kill-before-headers"
	// FaultKillAfterHeaders: killed after the response head (200; for a
	// streamed chat request on uvicorn also the role chunk; for a non-streamed
	// request with the Content-Length of a body that never comes).
	FaultKillAfterHeaders = "kill-after-headers"
	// FaultKillMidStream: killed after 3 content chunks.
	FaultKillMidStream = "kill-mid-stream"
	// FaultHangBeforeHeaders: no response at all.
	FaultHangBeforeHeaders = "hang-before-headers"
	// FaultHangAfterHeaders: the response head (non-streamed: with the
	// Content-Length of a body that never comes; streamed: plus the role
	// chunk on uvicorn chat), then silence.
	FaultHangAfterHeaders = "hang-after-headers"
	// FaultHangMidStream: 3 content chunks, then silence.
	FaultHangMidStream = "hang-mid-stream"
	// FaultStatus500, FaultStatus400, FaultStatus503: that status with an
	// OpenAI-shaped JSON error body.
	FaultStatus500 = "status-500"
	FaultStatus400 = "status-400"
	FaultStatus503 = "status-503"
	// FaultNonJSON500: 500, text/plain "Internal Server Error".
	FaultNonJSON500 = "non-json-500"
	// FaultNonJSON200: 200, text/plain "hello", streamed or not.
	FaultNonJSON200 = "non-json-200"
	// FaultBrokenSSE: one content chunk, then "data: {not json", then the
	// stream ends cleanly without finish_reason or [DONE].
	FaultBrokenSSE = "broken-sse"
	// FaultHugeLine: one content chunk, then one data line of 4 MiB of 'x',
	// then [DONE].
	FaultHugeLine = "huge-line"
	// FaultTruncated: 3 content chunks, then the stream ends cleanly without
	// finish_reason or [DONE].
	FaultTruncated = "truncated"
)

// Faults lists every fault mode.
var Faults = []string{
	FaultKillBeforeHeaders, FaultKillAfterHeaders, FaultKillMidStream,
	FaultHangBeforeHeaders, FaultHangAfterHeaders, FaultHangMidStream,
	FaultStatus500, FaultStatus400, FaultStatus503, FaultNonJSON500, FaultNonJSON200,
	FaultBrokenSSE, FaultHugeLine, FaultTruncated,
}

// Metrics faults: how GET /metrics misbehaves, for the whole life of an
// engine started WithMetricsFault (a Restart keeps it). Without one, GET
// /metrics answers a realistic exposition: vLLM's names on the uvicorn
// engine, llama.cpp's (before its PR #13660) on the httplib engine.
const (
	// MetricsMissing: uvicorn 404 (FastAPI's {"detail":"Not Found"}),
	// httplib 501 (llama.cpp without --metrics).
	MetricsMissing = "missing"
	// MetricsHang: nothing at all for 30 s, or until the client leaves.
	MetricsHang = "hang"
	// MetricsHuge: 200 and 50 MiB of random bytes, as fast as the client
	// reads (a client that stops reading stops it).
	MetricsHuge = "huge"
	// MetricsNaN: the engine's exposition with every value NaN.
	MetricsNaN = "nan"
)

// MetricsFaults lists the metrics faults.
var MetricsFaults = []string{MetricsMissing, MetricsHang, MetricsHuge, MetricsNaN}

// Option configures Start and Launch.
type Option func(*options)

type options struct {
	metricsFault string
	load         Load
}

// WithMetricsFault makes GET /metrics fail in that mode (a Metrics*
// constant) for the engine's whole life.
func WithMetricsFault(mode string) Option { return func(o *options) { o.metricsFault = mode } }

const (
	readyTimeout   = 20 * time.Second
	restartTimeout = 5 * time.Second
	stderrKeep     = 64 << 10
)

// Engine is one running test engine process, restartable on its port.
type Engine struct {
	kind   Kind
	argv   []string
	port   int
	url    *url.URL
	stderr *tailBuffer // every process's stderr, the last 64 KiB

	restartMu sync.Mutex // serializes Restart and Close; guards closed
	closed    bool       // Close was called: no more restarts
	mu        sync.Mutex // guards proc
	proc      *process
}

// process is one OS process of an Engine.
type process struct {
	cmd        *exec.Cmd
	done       chan struct{} // closed when cmd.Wait returned
	err        error         // cmd.Wait's error; read after done
	stdoutDone chan struct{} // closed when the stdout reader ended
}

// Start builds the engine if needed and starts it on 127.0.0.1 with a free
// port, waiting (at most 20 s) until it listens; opts set faults and
// timing for its whole life (WithMetricsFault, WithLoad). The engine is
// killed when the test ends. A missing stack (Debian packages
// python3-fastapi, python3-uvicorn, libcpp-httplib-dev, g++) fails the
// test.
func Start(t testing.TB, k Kind, opts ...Option) *Engine {
	t.Helper()
	e, err := Launch(k, opts...)
	if err != nil {
		t.Fatalf("testengine: %v", err)
	}
	t.Cleanup(func() {
		e.Kill()
		if t.Failed() {
			t.Logf("testengine: %s engine stderr:\n%s", k, e.stderr.String())
		}
	})
	return e
}

// Launch is Start outside a test (for a program such as tools/soak): it
// builds the engine if needed, starts it on 127.0.0.1 with a free port and
// waits (at most 20 s) until it listens. The caller owns the engine and
// must Close it. A missing stack is an error naming the packages.
func Launch(k Kind, opts ...Option) (*Engine, error) {
	argv, err := command(k)
	if err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.metricsFault != "" {
		if !slices.Contains(MetricsFaults, o.metricsFault) {
			return nil, fmt.Errorf("unknown metrics fault %q (have %v)", o.metricsFault, MetricsFaults)
		}
		argv = append(slices.Clip(argv), "--metrics-fault", o.metricsFault)
	}
	if err := o.load.validate(); err != nil {
		return nil, err
	}
	argv = append(slices.Clip(argv), o.load.args()...)
	e := &Engine{kind: k, argv: argv, stderr: &tailBuffer{max: stderrKeep}}
	p, port, err := e.spawn(0)
	if err != nil {
		return nil, fmt.Errorf("starting %s engine: %v\nstderr:\n%s", k, err, e.stderr.String())
	}
	e.port, e.proc = port, p
	e.url = &url.URL{Scheme: "http", Host: e.Addr()}
	return e, nil
}

// Close kills the engine and waits until its process and goroutines are
// gone; a later RestartErr fails. Closing twice does nothing more.
func (e *Engine) Close() {
	e.restartMu.Lock()
	defer e.restartMu.Unlock()
	e.closed = true
	e.Kill()
}

// URL returns the engine's base URL, http://127.0.0.1:PORT. It stays the same
// across Restart.
func (e *Engine) URL() *url.URL {
	u := *e.url
	return &u
}

// Addr returns the engine's address, 127.0.0.1:PORT.
func (e *Engine) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(e.port)) }

// Kind returns the engine's kind.
func (e *Engine) Kind() Kind { return e.kind }

func (e *Engine) current() *process {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.proc
}

// Kill SIGKILLs the engine and waits until it is gone: its port then
// refuses connections. Killing an engine that has exited does nothing.
func (e *Engine) Kill() { e.current().kill() }

// Wait waits until the engine process exits and returns cmd.Wait's error
// (an engine that killed itself returns "signal: killed").
func (e *Engine) Wait() error {
	p := e.current()
	<-p.done
	<-p.stdoutDone
	return p.err
}

// Exited reports whether the engine process has exited, e.g. after a kill
// fault. Safe for concurrent use.
func (e *Engine) Exited() bool {
	select {
	case <-e.current().done:
		return true
	default:
		return false
	}
}

// Restart kills the engine if it is running and starts it again on the same
// port, retrying for up to 5 s while the port cannot be bound, and waits
// until it listens.
func (e *Engine) Restart(t testing.TB) {
	t.Helper()
	if err := e.RestartErr(); err != nil {
		t.Fatalf("testengine: %v", err)
	}
}

// RestartErr is Restart outside a test: it returns what Restart would fail
// the test with, and an error after Close.
func (e *Engine) RestartErr() error {
	e.restartMu.Lock()
	defer e.restartMu.Unlock()
	if e.closed {
		return fmt.Errorf("restarting %s engine: closed", e.kind)
	}
	e.Kill()
	deadline := time.Now().Add(restartTimeout)
	for {
		p, _, err := e.spawn(e.port)
		if err == nil {
			e.mu.Lock()
			e.proc = p
			e.mu.Unlock()
			return nil
		}
		var exited *exitedEarly
		if !errors.As(err, &exited) || time.Now().After(deadline) {
			return fmt.Errorf("restarting %s engine on port %d: %v\nstderr:\n%s", e.kind, e.port, err, e.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stats returns the number of generation requests the running engine process
// received, and of those it is still serving.
func (e *Engine) Stats(t testing.TB) (requests, active int) {
	t.Helper()
	requests, active, err := e.StatsErr()
	if err != nil {
		t.Fatalf("testengine: %v", err)
	}
	return requests, active
}

// StatsErr is Stats outside a test.
func (e *Engine) StatsErr() (requests, active int, err error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(e.url.String() + "/test/stats")
	if err != nil {
		return 0, 0, fmt.Errorf("%s stats: %v", e.kind, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var s struct{ Requests, Active int }
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("%s stats: status %d, %v", e.kind, resp.StatusCode, err)
	}
	return s.Requests, s.Active, nil
}

// Stderr returns the last 64 KiB the engine's processes wrote to stderr.
func (e *Engine) Stderr() string { return e.stderr.String() }

// exitedEarly is spawn's error when the process exited before READY (a
// failed bind, say): Restart tries again.
type exitedEarly struct{ err error }

func (x *exitedEarly) Error() string { return fmt.Sprintf("exited before READY: %v", x.err) }

// spawn starts one process on port (0: any) and waits for its READY line.
func (e *Engine) spawn(port int) (*process, int, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, 0, err
	}
	cmd := exec.Command(e.argv[0], append(e.argv[1:], "--port", strconv.Itoa(port))...)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	cmd.Stdout = w // an *os.File: no copying goroutine
	cmd.Stderr = e.stderr
	// Linux: the engine dies with the test binary even if Cleanup never runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = r.Close()
		_ = w.Close()
		return nil, 0, err
	}
	_ = w.Close()
	p := &process{cmd: cmd, done: make(chan struct{}), stdoutDone: make(chan struct{})}
	ready := make(chan int, 1)
	go func() { // ends at EOF: when the process is gone
		defer close(p.stdoutDone)
		defer func() { _ = r.Close() }()
		br := bufio.NewReader(r)
		for {
			line, err := br.ReadString('\n')
			if n, ok := strings.CutPrefix(strings.TrimSpace(line), "READY "); ok {
				if port, err := strconv.Atoi(n); err == nil && port > 0 {
					select {
					case ready <- port:
					default:
					}
				}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { // the only caller of cmd.Wait: reaps the process however it ends
		p.err = cmd.Wait()
		close(p.done)
	}()
	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	select {
	case got := <-ready:
		return p, got, nil
	case <-p.done:
		<-p.stdoutDone
		return nil, 0, &exitedEarly{p.err}
	case <-timer.C:
		p.kill()
		return nil, 0, fmt.Errorf("no READY line within %v", readyTimeout)
	}
}

// kill SIGKILLs the process and waits until it is reaped and its output read.
func (p *process) kill() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Kill() // fails harmlessly if it has just exited
		<-p.done
	}
	<-p.stdoutDone
}

// tailBuffer keeps the last max bytes written to it. Safe for concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

var _ io.Writer = (*tailBuffer)(nil)
