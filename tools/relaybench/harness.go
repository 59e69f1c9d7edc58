package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Target names, in the order the report lists them.
var allTargets = []string{"direct", "revproxy", "rawproxy", "rawedge", "rawconn", "nginx", "kneecap", "kneecap-alt"}

func knownTarget(t string) bool { return slices.Contains(allTargets, t) }

// target is one thing the load client streams through.
type target struct {
	name     string
	base     string // http://127.0.0.1:PORT
	proc     *child // the process whose CPU and memory are the relay's (the engine for direct)
	client   *http.Client
	adminURL string // kneecap's admin listener, for /metrics and /debug/pprof
}

// setting is one cell of the matrix: a concurrency and a pacing.
type setting struct {
	streams  int
	mode     string
	interval time.Duration // paced gap between chunks; the unpaced streams' start spread
}

func (s setting) String() string {
	switch s.mode {
	case "paced":
		return fmt.Sprintf("%d streams, paced (a chunk every %s)", s.streams, s.interval)
	case "whole":
		return fmt.Sprintf("%d not streamed (a token every %s)", s.streams, s.interval)
	}
	return fmt.Sprintf("%d streams, unpaced", s.streams)
}

func (c config) workload(s setting) workload {
	if s.mode == "unpaced" {
		// As fast as the machine goes: every worker starts within one
		// paced interval and the streams compete for the CPU until the end.
		// With -unpaced-chunks each worker runs streams of that length back
		// to back, so that every request's setup counts as it does in
		// service; without, one long stream each.
		if c.unpacedChunks > 0 {
			return workload{
				streams: s.streams, perWorker: max(1, c.unpacedTotal/(s.streams*c.unpacedChunks)),
				chunks: c.unpacedChunks, stagger: s.interval, timeout: 2 * time.Minute,
			}
		}
		return workload{
			streams: s.streams, perWorker: 1, chunks: max(100, c.unpacedTotal/s.streams),
			stagger: s.interval, timeout: 2 * time.Minute,
		}
	}
	// Paced: a closed loop in steady state. Starts are spread over one
	// stream's duration and each worker runs two streams back to back, so
	// the second streams start one at a time while the other streams-1 run.
	// Whole: the same, with requests that are not streamed.
	d := time.Duration(c.chunks) * s.interval
	return workload{
		streams: s.streams, perWorker: 2, steadyFrom: 1, chunks: c.chunks, interval: s.interval,
		stagger: d, timeout: 3*(2*d+d) + 30*time.Second, whole: s.mode == "whole",
	}
}

func runHarness(ctx context.Context, c config, stdout, stderr io.Writer) error {
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, "relaybench: "+format+"\n", args...) }
	if lim, err := raiseFileLimit(); err != nil {
		logf("raising the open-file limit: %v", err)
	} else if need := uint64(c.maxStreams())*6 + 1000; lim < need {
		logf("open-file limit %d may be too low for %d streams (want %d)", lim, c.maxStreams(), need)
	}
	dir, err := os.MkdirTemp("", "relaybench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	self, err := os.Executable()
	if err != nil {
		return err
	}

	var children []*child
	defer func() {
		for _, ch := range slices.Backward(children) {
			ch.stop(3 * time.Second)
			if l := ch.log.String(); l != "" {
				logf("%s's stderr (first 64 KiB, last 10 lines):\n%s", ch.name, lastLinesN(l, 10))
			}
		}
	}()
	engine, engineAddr, _, err := startSelf(ctx, self, "engine", nil, "-role", "engine")
	if err != nil {
		return err
	}
	children = append(children, engine)

	var targets []*target
	var twin *target
	for _, name := range c.targets {
		t := &target{name: name, client: &http.Client{Transport: newClientTransport()}}
		switch name {
		case "direct":
			t.base, t.proc = "http://"+engineAddr, engine
		case "revproxy":
			ch, addr, admin, err := startSelf(ctx, self, "revproxy", nil, "-role", "revproxy", "-upstream", "http://"+engineAddr)
			if err != nil {
				return err
			}
			children = append(children, ch)
			t.base, t.proc, t.adminURL = "http://"+addr, ch, "http://"+admin
		case "rawproxy", "rawedge", "rawconn":
			args := []string{"-role", "rawproxy", "-upstream", "http://" + engineAddr}
			if name != "rawproxy" {
				args = append(args, "-edge")
			}
			if name == "rawconn" {
				args = append(args, "-raw-server")
			}
			if c.rawProcs > 0 {
				args = append(args, "-procs", strconv.Itoa(c.rawProcs))
			}
			ch, addr, admin, err := startSelf(ctx, self, name, nil, args...)
			if err != nil {
				return err
			}
			children = append(children, ch)
			t.base, t.proc, t.adminURL = "http://"+addr, ch, "http://"+admin
		case "nginx":
			bin, err := exec.LookPath(c.nginx)
			if err != nil {
				logf("skipping nginx: %v (scripts/relay-bench installs it)", err)
				continue
			}
			addr, err := freePort()
			if err != nil {
				return err
			}
			ndir := filepath.Join(dir, "nginx")
			if err := os.MkdirAll(ndir, 0o755); err != nil {
				return err
			}
			ch, err := startNginx(bin, ndir, addr, engineAddr)
			if err != nil {
				return err
			}
			children = append(children, ch)
			if err := waitListening(ctx, ch, addr); err != nil {
				return err
			}
			t.base, t.proc = "http://"+addr, ch
		case "kneecap", "kneecap-alt":
			bin := c.kneecap
			if name == "kneecap-alt" {
				bin = c.kneecapAlt
			}
			if bin == "" {
				logf("skipping %s: no -%s binary", name, name)
				continue
			}
			addr, err := freePort()
			if err != nil {
				return err
			}
			admin, err := freePort()
			if err != nil {
				return err
			}
			ch, err := startKneecap(name, mustAbs(bin), addr, admin, engineAddr, c.kneecapEnv)
			if err != nil {
				return err
			}
			children = append(children, ch)
			if err := waitListening(ctx, ch, addr); err != nil {
				return err
			}
			t.base, t.proc, t.adminURL = "http://"+addr, ch, "http://"+admin
			if name == "kneecap-alt" {
				break
			}
			// The twin: the same gateway code with pprof (and, as in serve,
			// the adaptive controller), for the live heap and the profiles
			// (serve has no pprof); measured in rounds of its own, never in
			// the rotation.
			taddr, err := freePort()
			if err != nil {
				return err
			}
			tadmin, err := freePort()
			if err != nil {
				return err
			}
			tch, paddr, pprofAddr, err := startSelf(ctx, self, "kneecap-twin",
				kneecapEnv(taddr, tadmin, engineAddr, c.kneecapEnv), "-role", "gateway")
			if err != nil {
				return err
			}
			children = append(children, tch)
			twin = &target{name: "kneecap-twin", base: "http://" + paddr, proc: tch,
				client: &http.Client{Transport: newClientTransport()}, adminURL: "http://" + pprofAddr}
		}
		targets = append(targets, t)
	}
	if twin != nil {
		defer twin.client.CloseIdleConnections()
	}
	defer func() {
		for _, t := range targets {
			t.client.CloseIdleConnections()
		}
	}()

	res := newResults(c, targets)
	startAll := time.Now()
	for _, s := range c.settings {
		n := s.streams
		w := c.workload(s)
		// Warm-up, not counted: open every keep-alive connection from the
		// client through the relay to the engine.
		warm := w
		warm.chunks, warm.perWorker, warm.stagger, warm.timeout = 3, 1, s.interval, 30*time.Second
		for _, t := range targets {
			if err := ctx.Err(); err != nil {
				return err
			}
			runRound(ctx, t.client, t.base, warm)
		}
		for r := range c.rounds {
			// Rotate the order every round, so no target always runs
			// first or right after the heaviest one.
			for i := range targets {
				t := targets[(i+r)%len(targets)]
				if err := ctx.Err(); err != nil {
					return err
				}
				sleepCtx(ctx, c.settle)
				rs, err := measureRound(ctx, t, engine, w)
				if err != nil {
					return err
				}
				res.add(s, t.name, rs)
				logf("%-22s round %d %-8s p50 TTFC %6.2f ms  CPU/chunk %5.1f us  broken %d  (%.0fs)",
					s, r+1, t.name, ms(percentile(rs.ttfc, 0.5)), us(perChunk(rs.cpu, rs.events)), rs.broken, time.Since(startAll).Seconds())
			}
		}
		if twin != nil {
			runRound(ctx, twin.client, twin.base, warm)
			sleepCtx(ctx, c.settle)
			rs, err := measureRound(ctx, twin, engine, w)
			if err != nil {
				return err
			}
			res.addTwin(s, rs)
			logf("%-22s twin round kneecap-twin p50 TTFC %6.2f ms  CPU/chunk %5.1f us  broken %d",
				s, ms(percentile(rs.ttfc, 0.5)), us(perChunk(rs.cpu, rs.events)), rs.broken)
		}
		if c.profileDir != "" && (n == c.maxStreams() || s.mode == "unpaced") {
			for _, t := range append(slices.Clone(targets), twin) {
				if t != nil && t.adminURL != "" && !strings.HasPrefix(t.name, "kneecap") || t == twin {
					if err := profileRound(ctx, t, w, c.profileDir, s); err != nil {
						logf("profiling %s: %v", t.name, err)
					}
				}
			}
		}
	}
	res.elapsed = time.Since(startAll)
	res.write(stdout)
	return nil
}

// maxStreams is the largest stream count of the loads.
func (c config) maxStreams() int {
	n := 0
	for _, s := range c.settings {
		n = max(n, s.streams)
	}
	return n
}

// roundStats is what one measured round of one target yielded.
type roundStats struct {
	ttfc      []time.Duration // per steady-state stream that sent at least one chunk
	e2e       []time.Duration // per steady-state stream that was not broken
	events    int             // SSE data events the client received
	streams   int
	broken    int
	reasons   map[string]int
	cpu       time.Duration // user+sys CPU of the relay's processes during the round
	engineCPU time.Duration // the engine's, for reference
	idleRSS   int64         // relay RSS just before the round
	peakRSS   int64         // relay peak RSS during the round
	heapIdle  heapSample    // Go relays: live heap before the round; zero if unknown
	heapMid   heapSample    // Go relays: live heap with every stream running
	allocs0   allocCounters // Go relays: allocation counters before the round
	allocs1   allocCounters // and after
	running   int           // concurrent streams (the heap's divisor)
	sysR      int64         // read-like system calls of the relay during the round
	sysW      int64         // write-like system calls
	wall      time.Duration
}

func measureRound(ctx context.Context, t *target, engine *child, w workload) (roundStats, error) {
	rs := roundStats{reasons: map[string]int{}}
	if err := t.proc.alive(); err != nil {
		return rs, err
	}
	if err := t.proc.resetPeakRSS(); err != nil {
		return rs, fmt.Errorf("resetting peak RSS of %s: %w", t.name, err)
	}
	// With paced chunks every stream is running from the end of the
	// stagger on: sample the heap half a stream later.
	midc := make(chan heapSample, 1)
	if t.adminURL != "" && w.interval > 0 {
		rs.heapIdle = scrapeHeap(ctx, t.adminURL)
		go func() {
			sleepCtx(ctx, w.stagger+w.stagger/2)
			midc <- scrapeHeap(ctx, t.adminURL)
		}()
	} else {
		midc <- heapSample{}
	}
	rs.running = w.streams
	if t.adminURL != "" {
		rs.allocs0 = scrapeAllocs(ctx, t.adminURL)
	}
	rs.idleRSS = t.proc.rss()
	cpu0, ecpu0 := t.proc.cpu(), engine.cpu()
	r0, w0 := t.proc.syscalls()
	t0 := time.Now()
	results := runRound(ctx, t.client, t.base, w)
	rs.wall = time.Since(t0)
	rs.heapMid = <-midc
	rs.cpu, rs.engineCPU = t.proc.cpu()-cpu0, engine.cpu()-ecpu0
	r1, w1 := t.proc.syscalls()
	rs.sysR, rs.sysW = r1-r0, w1-w0
	rs.peakRSS = t.proc.peakRSS()
	if t.adminURL != "" {
		rs.allocs1 = scrapeAllocs(ctx, t.adminURL)
	}
	rs.streams = len(results)
	for _, r := range results {
		rs.events += r.events
		if r.events > 0 && r.steady {
			rs.ttfc = append(rs.ttfc, r.ttfc)
		}
		if !r.broken && r.steady {
			rs.e2e = append(rs.e2e, r.e2e)
		}
		if r.broken {
			rs.broken++
			rs.reasons[r.reason]++
		}
	}
	if err := t.proc.alive(); err != nil {
		return rs, err
	}
	return rs, ctx.Err()
}

// startSelf runs this binary in a child role and waits for the address it
// reports on stdout ("listening ADDR"), and its admin address ("admin ADDR",
// printed before it) if it has one.
func startSelf(ctx context.Context, self, name string, env []string, args ...string) (c *child, addr, admin string, err error) {
	cmd := exec.Command(self, args...)
	cmd.Env = env
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", "", err
	}
	ch, err := startChild(name, cmd)
	if err != nil {
		return nil, "", "", err
	}
	type addrs struct{ addr, admin string }
	addrc := make(chan addrs, 1)
	go func() {
		var admin string
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "admin "); ok {
				admin = a
			}
			if a, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
				addrc <- addrs{a, admin}
			}
		}
	}()
	select {
	case a := <-addrc:
		return ch, a.addr, a.admin, nil
	case <-ch.done:
		return nil, "", "", ch.alive()
	case <-time.After(15 * time.Second):
		ch.stop(time.Second)
		return nil, "", "", errors.New(name + " did not report its address within 15s")
	case <-ctx.Done():
		ch.stop(time.Second)
		return nil, "", "", ctx.Err()
	}
}
