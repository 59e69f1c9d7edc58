package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "relaybench:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError struct{ error }

// config is the harness's settings, one field per flag.
type config struct {
	role     string
	listen   string
	upstream string

	streams      []int
	modes        []string
	targets      []string
	rounds       int
	chunks       int
	intervals    []time.Duration // paced gap, one per streams entry
	unpacedTotal int
	nginx        string
	kneecap      string
	kneecapAlt   string
	kneecapEnv   []string
	rawProcs     int
	timeout      time.Duration
	settle       time.Duration
	profileDir   string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("relaybench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	var streams, modes, targets, kenv, intervals string
	var edge, rawServer bool
	var procs int
	fs.StringVar(&c.role, "role", "harness", "harness | engine | revproxy | rawproxy | gateway (all but harness are started by the harness)")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:0", "listen address of a child role")
	fs.StringVar(&c.upstream, "upstream", "", "engine base URL of the revproxy and rawproxy roles")
	fs.BoolVar(&edge, "edge", false, "rawproxy role: one read(2) per arrival, as nginx reads (targets rawedge, rawconn)")
	fs.IntVar(&procs, "procs", 0, "rawproxy role: GOMAXPROCS (0: the default)")
	fs.IntVar(&c.rawProcs, "raw-procs", 0, "GOMAXPROCS of the rawproxy, rawedge and rawconn targets (0: the default)")
	fs.BoolVar(&rawServer, "raw-server", false, "rawproxy role: a hand-written HTTP/1.1 server instead of net/http's (target rawconn)")
	fs.StringVar(&streams, "streams", "100,1000", "concurrent streams, comma-separated")
	fs.StringVar(&modes, "modes", "paced,unpaced", "chunk pacing: paced (-chunks at -interval) and/or unpaced (back to back); whole: requests not streamed, the engine generating -chunks tokens at -interval (kneecap reassembles them from a stream)")
	fs.StringVar(&targets, "targets", "direct,revproxy,nginx,kneecap", "what to measure: direct, revproxy, rawproxy, rawedge (the floor of a Go relay, rawproxy.go), nginx, kneecap; nginx and kneecap are skipped when their binary is missing")
	fs.IntVar(&c.rounds, "rounds", 3, "measured rounds per target and setting, interleaved across targets")
	fs.IntVar(&c.chunks, "chunks", 100, "output chunks per paced stream")
	fs.StringVar(&intervals, "interval", "", "gap between paced chunks, one per -streams entry or one for all (default 20ms up to 100 streams, 50ms above: about 5000 and 20000 chunks/s, below what 2 cores can relay)")
	fs.IntVar(&c.unpacedTotal, "unpaced-total", 500000, "chunks per unpaced round over all streams (at least 100 per stream)")
	fs.StringVar(&c.nginx, "nginx", "nginx", "nginx binary (looked up in PATH)")
	fs.StringVar(&c.kneecap, "kneecap", "", "kneecap binary; empty skips kneecap")
	fs.StringVar(&c.kneecapAlt, "kneecap-alt", "", "a second kneecap binary (a candidate change), measured as target kneecap-alt in the same rotation")
	fs.StringVar(&kenv, "kneecap-env", "", "extra KEY=VALUE settings for kneecap serve, comma-separated")
	fs.DurationVar(&c.timeout, "timeout", 20*time.Minute, "hard bound on the whole run")
	fs.DurationVar(&c.settle, "settle", 300*time.Millisecond, "pause between rounds")
	fs.StringVar(&c.profileDir, "profile-dir", "", "if set, take a CPU and a heap profile of kneecap (admin /debug/pprof) during its rounds at the largest -streams, into this directory")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	switch c.role {
	case "engine":
		return runEngine(c.listen, stdout)
	case "revproxy":
		return runReverseProxy(c.listen, c.upstream, stdout)
	case "rawproxy":
		if procs > 0 {
			runtime.GOMAXPROCS(procs)
		}
		return runRawProxy(c.listen, c.upstream, edge, rawServer, stdout)
	case "gateway":
		return runGateway(stdout)
	case "harness":
	default:
		return usageError{fmt.Errorf("-role %q: want harness, engine, revproxy, rawproxy or gateway", c.role)}
	}
	for _, s := range splitList(streams) {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return usageError{fmt.Errorf("-streams: bad count %q", s)}
		}
		c.streams = append(c.streams, n)
	}
	for _, s := range splitList(intervals) {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return usageError{fmt.Errorf("-interval: bad duration %q", s)}
		}
		c.intervals = append(c.intervals, d)
	}
	if len(c.intervals) == 0 {
		for _, n := range c.streams {
			c.intervals = append(c.intervals, defaultInterval(n))
		}
	}
	if len(c.intervals) == 1 {
		for len(c.intervals) < len(c.streams) {
			c.intervals = append(c.intervals, c.intervals[0])
		}
	}
	if len(c.intervals) != len(c.streams) {
		return usageError{fmt.Errorf("-interval: want one duration or one per -streams entry (%d)", len(c.streams))}
	}
	c.modes = splitList(modes)
	for _, m := range c.modes {
		if m != "paced" && m != "unpaced" && m != "whole" {
			return usageError{fmt.Errorf("-modes: %q is not paced, unpaced or whole", m)}
		}
	}
	c.targets = splitList(targets)
	if c.kneecapAlt != "" && !slices.Contains(c.targets, "kneecap-alt") {
		c.targets = append(c.targets, "kneecap-alt")
	}
	for _, t := range c.targets {
		if !knownTarget(t) {
			return usageError{fmt.Errorf("-targets: unknown target %q", t)}
		}
	}
	c.kneecapEnv = splitList(kenv)
	if c.rounds < 1 || c.chunks < 1 || len(c.streams) == 0 || len(c.modes) == 0 || len(c.targets) == 0 {
		return usageError{errors.New("-rounds, -chunks, -streams, -modes and -targets must be non-empty and positive")}
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return runHarness(ctx, c, stdout, stderr)
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// defaultInterval paces n streams: 20 ms per chunk (50 tokens/s, a fast
// engine's TPOT) up to 100 streams; 50 ms above, so that 1000 streams ask
// for 20000 chunks/s, which the engine, a relay and the client together can
// still serve on 2 cores, and the time to first chunk measures the relay
// rather than a saturated machine.
func defaultInterval(n int) time.Duration {
	if n <= 100 {
		return 20 * time.Millisecond
	}
	return 50 * time.Millisecond
}
