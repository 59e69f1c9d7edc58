package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kneecap/kneecap/gateway"
	"github.com/kneecap/kneecap/sim"
	"github.com/kneecap/kneecap/testengine"
)

// target is one engine with a gateway in front of it, and the users that
// load it.
type target struct {
	name     string // "sim" or "uvicorn"
	describe string
	gw       *gateway.Gateway
	reg      *prometheus.Registry
	base     string // the gateway's traffic URL, http://127.0.0.1:PORT
	client   *http.Client
	users    int
	// retryMax bounds how long a user honours a Retry-After.
	retryMax time.Duration
	// draw makes one request's job.
	draw func(u *user) job
	// engineBusy returns what the engine is still serving (requests
	// running or waiting in it), and a description.
	engineBusy func() (int, string)

	// uvicorn only: the process, and what the restarter did.
	eng      *testengine.Engine
	restarts atomic.Int64
	downtime atomic.Int64 // nanoseconds without a live engine process
	failed   atomic.Int64 // restarts that failed (tried again)
}

// Gateway settings shared by both gateways: short bounds, so that every
// fault is answered within seconds, as in the fault suite.
var boundsEnv = []string{
	"KNEECAP_FIRST_TOKEN_TIMEOUT=2s",
	"KNEECAP_STREAM_IDLE_TIMEOUT=2s",
	"KNEECAP_RESPONSE_TIMEOUT=5s",
	"KNEECAP_CLIENT_WRITE_TIMEOUT=2s",
	"KNEECAP_DRAIN_TIMEOUT=5s",
}

// startAll starts the uvicorn engine (a process, restarted whenever a kill
// fault ends it), the simulator (in this process) and a gateway in front of
// each. The returned function stops them all, in reverse order, and
// reports what did not stop cleanly; it is non-nil even with an error.
func (s *soak) startAll() (func() []string, error) {
	var stops []func() error
	stopAll := func() []string {
		var problems []string
		for i := len(stops) - 1; i >= 0; i-- {
			if err := stops[i](); err != nil {
				problems = append(problems, err.Error())
			}
		}
		stops = nil
		return problems
	}
	log := slog.New(s.logs)

	if s.cfg.uvicornUsers > 0 {
		eng, err := testengine.Launch(testengine.Uvicorn)
		if err != nil {
			return stopAll, err
		}
		stops = append(stops, func() error { eng.Close(); return nil })
		t := &target{name: "uvicorn", eng: eng, users: s.cfg.uvicornUsers, retryMax: time.Second}
		t.draw = uvicornJob
		t.engineBusy = func() (int, string) {
			if eng.Exited() {
				return 0, "engine process down"
			}
			_, active, err := eng.StatsErr()
			if err != nil {
				return 0, "stats: " + err.Error()
			}
			return active, fmt.Sprintf("%d active in the engine", active)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { t.keepEngineUp(ctx, log) })
		stops = append(stops, func() error { cancel(); wg.Wait(); return nil })
		stop, err := s.startGateway(t, eng.URL().String(), log, "KNEECAP_MAX_CONCURRENCY="+strconv.Itoa(s.cfg.uvicornCap))
		if err != nil {
			return stopAll, err
		}
		stops = append(stops, stop)
		t.describe = fmt.Sprintf("uvicorn: the FastAPI/uvicorn test engine at %s; gateway %s, static cap %d, targets TTFT 1s TPOT 100ms; %d users, %g of requests with a random X-Test-Fault",
			eng.URL(), t.base, s.cfg.uvicornCap, t.users, s.cfg.faultRate)
		s.targets = append(s.targets, t)
	}

	if s.cfg.simUsers > 0 {
		p := sim.GB10BF16
		// The simulator's own faults, drawn per request from the seed: a
		// quarter of the fault rate each for 500s, streams cut mid-way,
		// hangs (headers, then silence until the gateway gives up) and
		// slow starts (held 1 s of engine time before its queue).
		r := s.cfg.faultRate / 4
		faults := sim.Faults{ErrorRate: r, CutRate: r, HangRate: r, HangAfterHeaders: true, SlowStartRate: r, SlowStartDelay: time.Second}
		eng, err := sim.New(sim.Config{Profile: p, TimeScale: s.cfg.timeScale, Seed: s.cfg.seed, Faults: faults, Logger: log.With("component", "sim")})
		if err != nil {
			return stopAll, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return stopAll, err
		}
		srv := &http.Server{Handler: eng.Handler(), ReadHeaderTimeout: 10 * time.Second}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		runErr := make(chan error, 2)
		wg.Go(func() { runErr <- eng.Run(ctx) })
		wg.Go(func() {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				runErr <- err
			}
		})
		stops = append(stops, func() error {
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer scancel()
			err := srv.Shutdown(sctx)
			cancel()
			wg.Wait()
			close(runErr)
			for e := range runErr {
				err = errors.Join(err, e)
			}
			if err != nil {
				return fmt.Errorf("simulator: %w", err)
			}
			return nil
		})
		t := &target{name: "sim", users: s.cfg.simUsers, retryMax: scaled(2*time.Second, s.cfg.timeScale)}
		t.draw = simJob
		t.engineBusy = func() (int, string) {
			st := eng.Stats()
			return st.Running + st.Waiting, fmt.Sprintf("%d running and %d waiting in the engine", st.Running, st.Waiting)
		}
		// The demo's targets (TTFT 1 s, TPOT 100 ms of engine time), in
		// wall time at this time scale; the adaptive controller sets the cap.
		ttft, tpot := scaled(time.Second, s.cfg.timeScale), scaled(100*time.Millisecond, s.cfg.timeScale)
		stop, err := s.startGateway(t, "http://"+ln.Addr().String(), log,
			"KNEECAP_SLO_TTFT="+ttft.String(), "KNEECAP_SLO_TPOT="+tpot.String())
		if err != nil {
			return stopAll, err
		}
		stops = append(stops, stop)
		t.describe = fmt.Sprintf("sim: simulated %s (%s) at http://%s, %gx real time, faults %.4g each of error/cut/hang/slow-start; gateway %s, adaptive cap, targets TTFT %v TPOT %v; %d users",
			p.Name, p.Model, ln.Addr(), s.cfg.timeScale, r, t.base, ttft, tpot, t.users)
		s.targets = append(s.targets, t)
	}
	return stopAll, nil
}

// startGateway runs a gateway in front of upstream, configured as `kneecap
// serve` is: settings parsed from KNEECAP_* variables by
// gateway.ConfigFromEnv, and gateway.New's own controller (it sets the cap
// when KNEECAP_MAX_CONCURRENCY is unset, and otherwise still answers the
// deadline check and Retry-After). It listens on 127.0.0.1 only.
func (s *soak) startGateway(t *target, upstream string, log *slog.Logger, env ...string) (func() error, error) {
	environ := append([]string{"KNEECAP_UPSTREAM=" + upstream, "KNEECAP_LISTEN=127.0.0.1:0", "KNEECAP_ADMIN_LISTEN=127.0.0.1:0"}, boundsEnv...)
	cfg, err := gateway.ConfigFromEnv(append(environ, env...))
	if err != nil {
		return nil, err
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tl.Close()
		return nil, err
	}
	t.reg = prometheus.NewRegistry()
	t.gw, err = gateway.New(cfg, gateway.WithListeners(tl, al), gateway.WithRegistry(t.reg),
		gateway.WithLogger(log.With("gateway", t.name)))
	if err != nil {
		tl.Close()
		al.Close()
		return nil, err
	}
	t.base = "http://" + tl.Addr().String()
	t.client = &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		MaxIdleConnsPerHost: t.users + 8,
		DisableCompression:  true,
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- t.gw.Run(ctx) }()
	return func() error {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("%s gateway: Run: %w", t.name, err)
			}
			return nil
		case <-time.After(30 * time.Second):
			return fmt.Errorf("%s gateway: Run did not return within 30 s of its context ending", t.name)
		}
	}, nil
}

// keepEngineUp restarts the uvicorn engine whenever it is gone (a kill
// fault ends the process), until ctx ends.
func (t *target) keepEngineUp(ctx context.Context, log *slog.Logger) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var downSince time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !t.eng.Exited() {
			continue
		}
		if downSince.IsZero() {
			downSince = time.Now()
		}
		if err := t.eng.RestartErr(); err != nil {
			t.failed.Add(1)
			log.Error("soak: restarting the uvicorn engine failed; trying again", "err", err)
			continue
		}
		t.restarts.Add(1)
		t.downtime.Add(int64(time.Since(downSince)))
		downSince = time.Time{}
	}
}

// settleResult is what one gateway and its engine held once the load
// stopped and the end waited for them.
type settleResult struct {
	name            string
	running, queued int
	engineBusy      int
	engineNote      string
}

// settleAll waits (up to limit) until every gateway holds no slot and
// queues nothing, and every engine serves nothing.
func (s *soak) settleAll(limit time.Duration) []settleResult {
	deadline := time.Now().Add(limit)
	for {
		var res []settleResult
		clear := true
		for _, t := range s.targets {
			st := t.gw.Limiter().State()
			busy, note := t.engineBusy()
			res = append(res, settleResult{name: t.name, running: st.Running, queued: st.Queued, engineBusy: busy, engineNote: note})
			clear = clear && st.Running == 0 && st.Queued == 0 && busy == 0
		}
		if clear || time.Now().After(deadline) {
			return res
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dumpGoroutines writes every goroutine's stack (grouped) next to the log
// and returns the file's name.
func (s *soak) dumpGoroutines(when string) string {
	name := strings.TrimSuffix(s.cfg.logPath, ".log") + "-goroutines-" + when + ".txt"
	f, err := os.Create(name)
	if err != nil {
		return ""
	}
	defer f.Close()
	if err := pprof.Lookup("goroutine").WriteTo(f, 1); err != nil {
		return ""
	}
	return name
}

func scaled(d time.Duration, scale float64) time.Duration {
	return time.Duration(float64(d) / scale)
}
