package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kneecap/kneecap/proxy/proxytest"
	"github.com/kneecap/kneecap/sim"
)

// behindSim runs a gateway built from environ (KNEECAP_UPSTREAM is set to
// the engine) in front of a simulator of scfg, over pipe listeners; call
// it inside a synctest bubble. It returns a client of the gateway and a
// stop function that ends the gateway, checks its Run, and waits for the
// engine to stop.
func behindSim(t *testing.T, scfg sim.Config, environ []string, opts ...Option) (*http.Client, func()) {
	t.Helper()
	h := startBehindSim(t, scfg, environ, opts...)
	return h.client, h.stop
}

// simHarness is what startBehindSim runs: the gateway, the simulator, a
// client of each of the gateway's listeners (http://gateway and
// http://admin), and stop (see behindSim).
type simHarness struct {
	g             *Gateway
	engine        *sim.Sim
	client, admin *http.Client
	stop          func()
}

func startBehindSim(t *testing.T, scfg sim.Config, environ []string, opts ...Option) *simHarness {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	scfg.Logger, scfg.Registry = quiet, prometheus.NewRegistry()
	engine, err := sim.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Go(func() { _ = engine.Run(ctx) })
	engL := proxytest.NewPipeListener()
	engSrv := &http.Server{Handler: engine.Handler()}
	bg.Go(func() { _ = engSrv.Serve(engL) })
	cfg, err := ConfigFromEnv(append([]string{"KNEECAP_UPSTREAM=http://engine"}, environ...))
	if err != nil {
		t.Fatal(err)
	}
	engT := engL.Transport()
	gwL, adminL := proxytest.NewPipeListener(), proxytest.NewPipeListener()
	opts = append([]Option{WithTransport(engT), WithListeners(gwL, adminL), WithRegistry(prometheus.NewRegistry()), WithLogger(quiet)}, opts...)
	g, err := New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error, 1)
	go func() { runErr <- g.Run(ctx) }()
	clientT, adminT := gwL.Transport(), adminL.Transport()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-runErr; err != nil {
				t.Error(err)
			}
			clientT.CloseIdleConnections()
			adminT.CloseIdleConnections()
			_ = engSrv.Close()
			engT.CloseIdleConnections()
			bg.Wait()
		})
	}
	t.Cleanup(stop) // in the bubble, after a test that failed before its stop
	return &simHarness{g: g, engine: engine, client: &http.Client{Transport: clientT}, admin: &http.Client{Transport: adminT}, stop: stop}
}
