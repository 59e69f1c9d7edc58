package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/http/pprof"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// The child roles: the same binary, started by the harness with -role.
// Each listens on -listen (port 0 picks one), prints "listening ADDR" on
// stdout, and serves until SIGTERM.

// runEngine serves engineHandler.
func runEngine(listen string, stdout io.Writer) error {
	return serveUntilSignal(listen, engineHandler(), stdout)
}

// runReverseProxy serves a plain httputil.ReverseProxy to upstream: the
// standard library's relay as most Go services would write it. The only
// change from the defaults is a keep-alive pool large enough for the
// benchmark's concurrency (the default keeps 2 idle connections per host, so
// 1000 streams would open and close a connection per request and run out of
// ephemeral ports: a configuration fault, not a relay cost). Streams of type
// text/event-stream are flushed per write by ReverseProxy itself.
//
// It also serves net/http/pprof on an admin listener of its own (as kneecap
// does on its admin port), so the harness reads both heaps the same way.
func runReverseProxy(listen, upstream string, stdout io.Writer) error {
	u, err := url.Parse(upstream)
	if err != nil {
		return fmt.Errorf("-upstream: %w", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = 4096
	tr.IdleConnTimeout = 5 * time.Minute
	rp := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(u) },
		Transport: tr,
	}
	return serveWithPprof(listen, rp, stdout)
}

// runRawProxy serves rawProxy (rawproxy.go), the floor of a Go relay, to
// upstream, with pprof as runReverseProxy has it.
// With rawServer it serves clients with rawProxy's own HTTP/1.1 server
// instead of net/http's (target rawconn).
func runRawProxy(listen, upstream string, edge, rawServer bool, stdout io.Writer) error {
	u, err := url.Parse(upstream)
	if err != nil || u.Host == "" {
		return fmt.Errorf("-upstream: want http://HOST:PORT, got %q", upstream)
	}
	p := &rawProxy{addr: u.Host, edge: edge}
	if !rawServer {
		return serveWithPprof(listen, p, stdout)
	}
	aln, err := servePprof(stdout)
	if err != nil {
		return err
	}
	defer aln.Close()
	ln, err := listenAnnounced(listen, stdout)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	err = p.serveConns(ln)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// serveWithPprof serves h on listen and net/http/pprof on an admin listener
// of its own, whose address it prints first ("admin ADDR").
func serveWithPprof(listen string, h http.Handler, stdout io.Writer) error {
	aln, err := servePprof(stdout)
	if err != nil {
		return err
	}
	defer aln.Close()
	return serveUntilSignal(listen, h, stdout)
}

// servePprof serves net/http/pprof on an admin listener of its own on
// 127.0.0.1 and prints its address ("admin ADDR"); closing the listener
// stops it.
func servePprof(stdout io.Writer) (net.Listener, error) {
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	amux := http.NewServeMux()
	amux.HandleFunc("/debug/pprof/", pprof.Index)
	amux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	go http.Serve(aln, amux)
	fmt.Fprintf(stdout, "admin %s\n", aln.Addr())
	return aln, nil
}

// listenAnnounced listens on listen and prints its address ("listening
// ADDR") at once, for the harness that waits for that line.
func listenAnnounced(listen string, stdout io.Writer) (net.Listener, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "listening %s\n", ln.Addr())
	if f, ok := stdout.(*os.File); ok {
		f.Sync()
	}
	return ln, nil
}

func serveUntilSignal(listen string, h http.Handler, stdout io.Writer) error {
	ln, err := listenAnnounced(listen, stdout)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

func dialTimeout(addr string, d time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", addr, d)
}

// freePort returns a 127.0.0.1 address with a port that was free a moment
// ago, for children that cannot report the port they picked (nginx, kneecap).
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
