package epp

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kneecap/kneecap/gateway"
	"github.com/kneecap/kneecap/sim"
)

// pod is one pod of the pool: a simulated vLLM engine and kneecap in front
// of it, on loopback listeners.
type pod struct {
	name           string
	g              *gateway.Gateway
	traffic, admin string // host:port of kneecap's listeners
	ctx            context.Context
	load           sync.WaitGroup // requests sent by send
}

// startPod starts a pod whose kneecap reads environ (KNEECAP_UPSTREAM is
// the engine's), in front of a simulated vLLM engine; the test's end stops
// it.
func startPod(t *testing.T, name string, environ ...string) *pod {
	t.Helper()
	profile, err := sim.LookupProfile("gb10-fp8")
	if err != nil {
		t.Fatal(err)
	}
	engine, err := sim.New(sim.Config{Profile: profile, Flavor: sim.FlavorVLLM, Seed: 1, Registry: prometheus.NewRegistry(),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Go(func() { _ = engine.Run(ctx) })
	t.Cleanup(func() { cancel(); bg.Wait() }) // after the gateway's cleanup below
	return startKneecap(t, name, engine.Handler(), environ...)
}

// startKneecap starts kneecap, built from environ by gateway.ConfigFromEnv
// and gateway.New as `kneecap serve` builds it, in front of an engine
// served by engine; the test's end stops both.
func startKneecap(t *testing.T, name string, engine http.Handler, environ ...string) *pod {
	t.Helper()
	engineSrv := httptest.NewServer(engine)
	cfg, err := gateway.ConfigFromEnv(append([]string{"KNEECAP_UPSTREAM=" + engineSrv.URL}, environ...))
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(cfg, gateway.WithListeners(tl, al), gateway.WithLogger(slog.New(slog.DiscardHandler)),
		gateway.WithRegistry(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- g.Run(ctx) }()
	p := &pod{name: name, g: g, traffic: tl.Addr().String(), admin: al.Addr().String(), ctx: ctx}
	t.Cleanup(func() {
		cancel()
		p.load.Wait()
		if err := <-runErr; err != nil {
			t.Errorf("%s: gateway: %v", name, err)
		}
		engineSrv.Close()
	})
	waitReady(t, "http://"+p.admin+"/readyz")
	return p
}

// waitReady polls url until it answers 200, for at most 30 s.
func waitReady(t *testing.T, url string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		resp, err := http.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within 30 s (last error %v)", url, err)
		}
	}
}

// send starts n long streamed requests to the pod, each with a body of its
// own, which run until the pod stops; status receives each answer's status
// (nil: not reported).
func (p *pod) send(n int, tag string, status chan<- int) {
	for i := range n {
		p.load.Go(func() {
			body := fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":4000,"ignore_eos":true,"messages":[{"role":"user","content":"%s %d"}]}`, tag, i)
			req, _ := http.NewRequestWithContext(p.ctx, http.MethodPost, "http://"+p.traffic+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return // the pod stopped
			}
			if status != nil {
				status <- resp.StatusCode
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		})
	}
}

// waitQueued waits until the pod's kneecap queues n requests.
func (p *pod) waitQueued(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); p.g.Limiter().State().Queued < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d queued after 30 s, want %d", p.name, p.g.Limiter().State().Queued, n)
		}
	}
}

// waitEngine waits until the engine's own metrics, as the pod's kneecap
// last read them, show running requests and none waiting: a request just
// forwarded waits in the engine until its next step, and the pod's numbers
// count it there until the next reading.
func (p *pod) waitEngine(t *testing.T, running int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r, ok := p.g.EngineMetrics().Latest()
		if ok && r.Running == float64(running) && r.Waiting == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the engine's metrics read running %v, waiting %v (fresh %v) after 30 s; want %d, 0", p.name, r.Running, r.Waiting, ok, running)
		}
	}
}
