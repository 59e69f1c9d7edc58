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
	clientT := gwL.Transport()
	return &http.Client{Transport: clientT}, func() {
		cancel()
		if err := <-runErr; err != nil {
			t.Fatal(err)
		}
		clientT.CloseIdleConnections()
		_ = engSrv.Close()
		engT.CloseIdleConnections()
		bg.Wait()
	}
}
