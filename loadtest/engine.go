package loadtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kneecap/kneecap/bench"
	"github.com/kneecap/kneecap/sim"
	"github.com/kneecap/kneecap/testengine"
)

// Stack is the engine a run fronts.
type Stack string

// The stacks, each a fresh engine per run.
const (
	// HTTPLib is the cpp-httplib test engine (llama.cpp's stack, metric
	// names and closed connections) with EngineLoad and llama.cpp's kept
	// cells (KeepKV).
	HTTPLib Stack = "httplib"
	// Uvicorn is the FastAPI-on-uvicorn test engine (vLLM's stack and
	// names) with EngineLoad; vLLM frees a finished request's blocks, so
	// no cells are kept.
	Uvicorn Stack = "uvicorn"
	// Sim is the simulator in this process with Profile, llama.cpp's
	// flavour (sim.FlavorLlamaCpp).
	Sim Stack = "sim"
)

// Stacks lists every Stack.
var Stacks = []Stack{HTTPLib, Uvicorn, Sim}

// EngineLoad is the test engines' load model, in wall time, chosen so that
// the engine has the shape of the llama.cpp server the issue measured: 4
// slots; an output token takes 4 ms + 5 ms per running request + 1.5 us
// per resident KV token, so with the workload's KV cells (about 250 per
// slot) 4 running requests take about 25.5 ms a token and, with the
// prefills of their neighbours (200 prompt tokens at 250 us: 50 ms during
// which nobody decodes), just over the 25 ms TPOT target, 3 about 22 ms and
// 2 about 16 ms: the knee is 3 requests.
var EngineLoad = testengine.Load{
	Slots:      4,
	Token:      4 * time.Millisecond,
	PerRunning: 5 * time.Millisecond,
	PerKVToken: 1500 * time.Nanosecond,
	Prefill:    250 * time.Microsecond,
}

// Profile is the simulator's engine with EngineLoad's numbers, as the
// simulator's step model writes them: a step decodes one token of every
// running sequence in StepBase + StepPerSeq per sequence + a cost per KV
// token (running or kept), and a prompt prefilled in a step adds its
// tokens' cost to that step, stalling every sequence in it. Its 4 slots
// keep a finished request's cells until reused (llama.cpp's unified cache).
var Profile = sim.Profile{
	Name: "loadtest-llamacpp", Model: "loadtest",
	MaxNumSeqs: 4, KVCacheTokens: 8192, MaxBatchedTokens: 2048, MaxModelLen: 4096,
	StepBase: 4 * time.Millisecond, StepPerSeq: 5 * time.Millisecond,
	StepPerKVToken: 1500 * time.Nanosecond, StepPerPrefillToken: 250 * time.Microsecond,
	UnifiedCache: true, PrefixCacheTokens: 8192, StepPerCachedToken: 1500 * time.Nanosecond,
	MeanOutputTokens: 100,
}

// Workload is what every user sends: prompts of 160-240 words (one token
// a word on every engine here) and 80-120 output tokens, generated in full
// (ignore_eos).
var Workload = bench.Synthetic{
	InputLen:  bench.Dist{Kind: bench.Uniform, Mean: 200, Spread: 0.2},
	OutputLen: bench.Dist{Kind: bench.Uniform, Mean: 100, Spread: 0.2},
}

// engine is one running engine.
type engine struct {
	url   string // http://127.0.0.1:PORT
	model string
	stop  func() // kills or stops it, and waits until it is gone
}

// startEngine starts a fresh engine of stack s on 127.0.0.1.
func startEngine(s Stack) (*engine, error) {
	switch s {
	case HTTPLib, Uvicorn:
		l := EngineLoad
		l.KeepKV = s == HTTPLib
		e, err := testengine.Launch(testengine.Kind(s), testengine.WithLoad(l))
		if err != nil {
			return nil, err
		}
		return &engine{url: e.URL().String(), model: "test", stop: e.Close}, nil
	case Sim:
		return startSim()
	}
	return nil, fmt.Errorf("loadtest: unknown stack %q", s)
}

func startSim() (*engine, error) {
	quiet := slog.New(slog.DiscardHandler)
	s, err := sim.New(sim.Config{Profile: Profile, Flavor: sim.FlavorLlamaCpp, Registry: prometheus.NewRegistry(), Logger: quiet})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served, ran := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			quiet.Error("sim serve", "err", err)
		}
	}()
	go func() {
		defer close(ran)
		_ = s.Run(ctx)
	}()
	stop := func() {
		cancel() // ends every request still in the engine
		<-ran
		_ = srv.Close()
		<-served
	}
	return &engine{url: "http://" + ln.Addr().String(), model: Profile.Model, stop: stop}, nil
}
