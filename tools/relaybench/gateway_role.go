package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/kneecap/kneecap/gateway"
)

// runGateway is the "gateway" child role: kneecap's gateway built from
// package gateway exactly as `kneecap serve` builds it (configuration from
// the same KNEECAP_* variables, gateway.New with its own controller, which
// observes every chunk even when KNEECAP_MAX_CONCURRENCY fixes the cap, its
// logger, its listeners), plus net/http/pprof on a third listener of its
// own. `kneecap serve` exposes no pprof, so the harness measures kneecap as the serve binary and takes the
// profiles and the live heap from this twin in a separate pass.
func runGateway(stdout io.Writer) error {
	cfg, err := gateway.ConfigFromEnv(os.Environ())
	if err != nil {
		return usageError{err}
	}
	traffic, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	admin, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		return err
	}
	g, err := gateway.New(cfg, gateway.WithLogger(gateway.NewLogger(cfg, os.Stderr)), gateway.WithListeners(traffic, admin))
	if err != nil {
		return err
	}
	pln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer pln.Close()
	// Lock contention and blocking are where a relay's latency hides
	// when its CPU is not saturated; sample them for the profile pass.
	runtime.SetMutexProfileFraction(20)
	runtime.SetBlockProfileRate(int(100 * time.Microsecond))
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace) // execution traces of a stalled round
	go http.Serve(pln, mux)
	fmt.Fprintf(stdout, "admin %s\n", pln.Addr())
	fmt.Fprintf(stdout, "listening %s\n", traffic.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return g.Run(ctx)
}
