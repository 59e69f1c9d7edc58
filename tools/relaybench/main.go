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

	settings      []setting // the loads, in the order they run
	targets       []string
	rounds        int
	chunks        int
	unpacedChunks int // chunks per unpaced stream; 0: unpacedTotal/streams, one stream per worker
	unpacedTotal  int
	nginx         string
	kneecap       string
	kneecapAlt    string
	kneecapEnv    []string
	rawProcs      int
	timeout       time.Duration
	settle        time.Duration
	profileDir    string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("relaybench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	var loads, streams, modes, targets, kenv, intervals string
	var edge, rawServer bool
	var procs int
	fs.StringVar(&c.role, "role", "harness", "harness | engine | revproxy | rawproxy | gateway (all but harness are started by the harness)")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:0", "listen address of a child role")
	fs.StringVar(&c.upstream, "upstream", "", "engine base URL of the revproxy and rawproxy roles")
	fs.BoolVar(&edge, "edge", false, "rawproxy role: one read(2) per arrival, as nginx reads (targets rawedge, rawconn)")
	fs.IntVar(&procs, "procs", 0, "rawproxy role: GOMAXPROCS (0: the default)")
	fs.IntVar(&c.rawProcs, "raw-procs", 0, "GOMAXPROCS of the rawproxy, rawedge and rawconn targets (0: the default)")
	fs.BoolVar(&rawServer, "raw-server", false, "rawproxy role: a hand-written HTTP/1.1 server instead of net/http's (target rawconn)")
	fs.StringVar(&loads, "loads", defaultLoads, "the loads to measure, in order: STREAMSxINTERVAL (paced: -chunks per stream, one every INTERVAL), STREAMSxunpaced (back to back) or STREAMSxINTERVAL:whole (requests not streamed, the engine generating -chunks tokens at INTERVAL; kneecap reassembles them from a stream); -streams, -modes or -interval given instead measure every streams x modes pair")
	fs.StringVar(&streams, "streams", "", "concurrent streams, comma-separated (with -modes and -interval: the loads are every streams x modes pair, in place of -loads)")
	fs.StringVar(&modes, "modes", "paced,unpaced", "chunk pacing, paced (-chunks at -interval) and/or unpaced (back to back); whole: requests not streamed, paced as paced")
	fs.StringVar(&targets, "targets", "direct,revproxy,nginx,kneecap", "what to measure: direct, revproxy, rawproxy, rawedge (the floor of a Go relay, rawproxy.go), nginx, kneecap; nginx and kneecap are skipped when their binary is missing")
	fs.IntVar(&c.rounds, "rounds", 3, "measured rounds per target and setting, interleaved across targets")
	fs.IntVar(&c.chunks, "chunks", 64, "output chunks per paced stream")
	fs.StringVar(&intervals, "interval", "", "with -streams: gap between paced chunks, one per -streams entry or one for all (default 20ms up to 100 streams, 50ms above)")
	fs.IntVar(&c.unpacedChunks, "unpaced-chunks", 256, "output chunks per unpaced stream, each worker running streams back to back until the round has -unpaced-total chunks; 0: one stream per worker of -unpaced-total/streams chunks (at least 100)")
	fs.IntVar(&c.unpacedTotal, "unpaced-total", 500000, "chunks per unpaced round over all streams")
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
	crossed := false
	fs.Visit(func(f *flag.Flag) {
		crossed = crossed || f.Name == "streams" || f.Name == "interval" || (f.Name == "modes" && streams != "")
	})
	var err error
	if crossed {
		c.settings, err = crossSettings(streams, modes, intervals)
	} else {
		c.settings, err = parseLoads(loads)
	}
	if err != nil {
		return usageError{err}
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
	if c.rounds < 1 || c.chunks < 1 || c.unpacedChunks < 0 || len(c.settings) == 0 || len(c.targets) == 0 {
		return usageError{errors.New("-rounds, -chunks, -loads (or -streams) and -targets must be non-empty and positive")}
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

// defaultLoads are issue 24's three loads: 100 streams with a chunk every
// 5 ms (20000 chunks/s), 1000 streams with one every 20 ms (50000 chunks/s
// asked, more than the engine, a relay and the client together serve on 2
// cores: a saturated machine) and 50 unpaced streams back to back (as fast
// as the machine goes, request setup included every 256 chunks).
const defaultLoads = "100x5ms,1000x20ms,50xunpaced"

// parseLoads parses -loads: STREAMSxINTERVAL or STREAMSxunpaced, comma-separated.
func parseLoads(s string) ([]setting, error) {
	var out []setting
	for _, l := range splitList(s) {
		n, pace, ok := strings.Cut(l, "x")
		streams, err := strconv.Atoi(n)
		if !ok || err != nil || streams <= 0 {
			return nil, fmt.Errorf("-loads: bad load %q: want STREAMSxINTERVAL or STREAMSxunpaced", l)
		}
		if pace == "unpaced" {
			out = append(out, setting{streams: streams, mode: "unpaced", interval: defaultInterval(streams)})
			continue
		}
		mode := "paced"
		if p, ok := strings.CutSuffix(pace, ":whole"); ok {
			pace, mode = p, "whole"
		}
		d, err := time.ParseDuration(pace)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("-loads: bad interval in %q", l)
		}
		out = append(out, setting{streams: streams, mode: mode, interval: d})
	}
	return out, nil
}

// crossSettings is every -streams x -modes pair, each count paced at its
// -interval (or the default for its count).
func crossSettings(streams, modes, intervals string) ([]setting, error) {
	var ns []int
	for _, s := range splitList(streams) {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-streams: bad count %q", s)
		}
		ns = append(ns, n)
	}
	if len(ns) == 0 {
		ns = []int{100, 1000}
	}
	var ds []time.Duration
	for _, s := range splitList(intervals) {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("-interval: bad duration %q", s)
		}
		ds = append(ds, d)
	}
	switch {
	case len(ds) == 0:
		for _, n := range ns {
			ds = append(ds, defaultInterval(n))
		}
	case len(ds) == 1:
		for len(ds) < len(ns) {
			ds = append(ds, ds[0])
		}
	case len(ds) != len(ns):
		return nil, fmt.Errorf("-interval: want one duration or one per -streams entry (%d)", len(ns))
	}
	var out []setting
	for i, n := range ns {
		for _, m := range splitList(modes) {
			if m != "paced" && m != "unpaced" && m != "whole" {
				return nil, fmt.Errorf("-modes: %q is not paced, unpaced or whole", m)
			}
			out = append(out, setting{streams: n, mode: m, interval: ds[i]})
		}
	}
	return out, nil
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
