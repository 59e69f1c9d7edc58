package fleet

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kneecap/kneecap/gateway"
	"github.com/kneecap/kneecap/sim"
)

// timeScale runs every engine this many times faster than the GB10 it
// simulates (-fleet-scale, 10 by default, as the issue measured);
// targets and Retry-After bounds are divided by it.
var timeScale = flag.Float64("fleet-scale", 10, "the simulated engines' speed-up over real time")

// Targets in engine time (the issue's), and in wall time at TimeScale.
var (
	TTFT = time.Second
	TPOT = 100 * time.Millisecond
)

func scaled(d time.Duration) time.Duration { return time.Duration(float64(d) / *timeScale) }

// replicaConfig is one pod: a simulated engine and kneecap beside it.
type replicaConfig struct {
	Profile sim.Profile
	Seed    uint64
	// Env adds KNEECAP_* settings (KNEECAP_UPSTREAM, the targets and the
	// listeners are set by startReplica).
	Env []string
	// Agent serves HAProxy's agent-check on a port of its own.
	Agent bool
	// Engine, when set, is served instead of a simulator (Profile and
	// Seed are then unused).
	Engine http.Handler
	// StepFactor, when positive, makes every step of the simulated engine
	// take that many times as long (1.5: a slower GPU).
	StepFactor float64
}

// replica is a simulated engine and a kneecap gateway in front of it, both
// in this process on 127.0.0.1, as `kneecap sim` and `kneecap serve` run.
type replica struct {
	name    string
	traffic string // host:port
	admin   string // host:port
	agent   string // host:port, "" without
	engine  *sim.Sim
	gw      *gateway.Gateway

	cancelGW, cancelEngine context.CancelFunc
	gwDone, engDone        chan error
	stopOnce               sync.Once
}

// startReplica starts a replica and stops it in t.Cleanup.
func startReplica(t testing.TB, name string, rc replicaConfig) *replica {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	engLn := listen(t)
	r := &replica{name: name, gwDone: make(chan error, 1), engDone: make(chan error, 1)}
	engCtx, cancelEngine := context.WithCancel(context.Background())
	r.cancelEngine = cancelEngine
	handler := rc.Engine
	if handler == nil {
		eng, err := sim.New(sim.Config{Profile: rc.Profile, TimeScale: *timeScale, Seed: rc.Seed, Registry: prometheus.NewRegistry(), Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if rc.StepFactor > 0 {
			eng.SetStepFactor(rc.StepFactor)
		}
		r.engine, handler = eng, eng.Handler()
	}
	engSrv := &http.Server{Handler: handler}
	go func() {
		var err error
		if r.engine != nil {
			err = r.engine.Run(engCtx)
		} else {
			<-engCtx.Done()
		}
		_ = engSrv.Close()
		r.engDone <- err
	}()
	go func() { _ = engSrv.Serve(engLn) }()

	tl, al := listen(t), listen(t)
	r.traffic, r.admin = tl.Addr().String(), al.Addr().String()
	env := []string{
		"KNEECAP_UPSTREAM=http://" + engLn.Addr().String(),
		"KNEECAP_SLO_TTFT=" + scaled(TTFT).String(),
		"KNEECAP_SLO_TPOT=" + scaled(TPOT).String(),
		"KNEECAP_DRAIN_TIMEOUT=10s",
	}
	if rc.Agent {
		r.agent = freeAddr(t)
		env = append(env, "KNEECAP_AGENT_LISTEN="+r.agent)
	}
	cfg, err := gateway.ConfigFromEnv(append(env, rc.Env...))
	if err != nil {
		t.Fatal(err)
	}
	if r.gw, err = gateway.New(cfg, gateway.WithListeners(tl, al), gateway.WithLogger(quiet)); err != nil {
		t.Fatal(err)
	}
	gwCtx, cancelGW := context.WithCancel(context.Background())
	r.cancelGW = cancelGW
	go func() { r.gwDone <- r.gw.Run(gwCtx) }()
	if r.agent != "" {
		waitDial(t, r.agent)
	}
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop drains the gateway (running streams finish) and then stops the
// engine, as a pod stops.
func (r *replica) stop(t testing.TB) {
	r.stopOnce.Do(func() {
		r.cancelGW()
		select {
		case err := <-r.gwDone:
			if err != nil {
				t.Errorf("%s: gateway: %v", r.name, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s: the gateway did not stop within 30 s", r.name)
		}
		r.cancelEngine()
		select {
		case <-r.engDone:
		case <-time.After(10 * time.Second):
			t.Errorf("%s: the engine did not stop within 10 s", r.name)
		}
	})
}

// status is the part of /status the tests read.
type status struct {
	Limit   int     `json:"limit"`
	Running int     `json:"running"`
	Queued  int     `json:"queued"`
	Demand  float64 `json:"demand_ratio"`
}

// status reads the replica's cap, running and queued from its limiter.
func (r *replica) state() status {
	st := r.gw.Limiter().State()
	return status{Limit: st.Limit, Running: st.Running, Queued: st.Queued}
}

// get fetches an admin path.
func (r *replica) get(path string) (int, string, error) {
	resp, err := http.Get("http://" + r.admin + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// listen opens a TCP listener on 127.0.0.1.
func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// freeAddr returns a 127.0.0.1 address that was free a moment ago, for a
// server that opens its own listener (nginx, HAProxy, the agent).
func freeAddr(t testing.TB) string {
	t.Helper()
	ln := listen(t)
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// waitDial waits up to 10 s until addr accepts a connection.
func waitDial(t testing.TB, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not accept connections: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// jsonGet decodes a JSON document from url.
func jsonGet(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func dials(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
