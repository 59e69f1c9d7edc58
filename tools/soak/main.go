package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// config is one soak run, from the flags.
type config struct {
	duration     time.Duration
	simUsers     int
	uvicornUsers int
	uvicornCap   int
	faultRate    float64
	badRate      float64
	seed         uint64
	timeScale    float64
	sample       time.Duration
	warmup       time.Duration
	rssBound     float64
	settle       time.Duration
	logPath      string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C kills the process at once
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c config
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&c.duration, "duration", 10*time.Minute, "how long the load runs (starting, finishing the requests in flight and settling add seconds, at most about 2 minutes)")
	fs.IntVar(&c.simUsers, "sim-users", 24, "closed-loop users against the simulator's gateway (its knee is about 5)")
	fs.IntVar(&c.uvicornUsers, "uvicorn-users", 16, "closed-loop users against the uvicorn engine's gateway")
	fs.IntVar(&c.uvicornCap, "uvicorn-cap", 12, "static cap (KNEECAP_MAX_CONCURRENCY) of the uvicorn engine's gateway")
	fs.Float64Var(&c.faultRate, "fault-rate", 0.03, "share of requests with an engine fault: X-Test-Fault on uvicorn, sim.Faults rates on the simulator")
	fs.Float64Var(&c.badRate, "bad-client-rate", 0.12, "share of requests made by a bad client (leaves mid-stream, leaves early, reads slowly)")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the load and of the simulator")
	fs.Float64Var(&c.timeScale, "time-scale", 10, "the simulator runs this many times faster than the GB10 it models (its targets scale with it)")
	fs.DurationVar(&c.sample, "sample", 10*time.Second, "sampling interval")
	fs.DurationVar(&c.warmup, "warmup", 0, "warm-up before the RSS reference sample (0: 20 % of -duration, at most 2m)")
	fs.Float64Var(&c.rssBound, "rss-growth", 0.20, "largest growth of the median RSS, from the first minute after warm-up to the last minute, that passes")
	fs.DurationVar(&c.settle, "settle", 30*time.Second, "how long the end may wait for slots and goroutines to come back")
	fs.StringVar(&c.logPath, "log", "", "gateway and simulator log file (default: kneecap-soak-PID.log in the temp dir)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "soak: unexpected arguments %q\n", fs.Args())
		return 2
	}
	switch {
	case c.duration <= 0:
		fmt.Fprintln(stderr, "soak: -duration must be positive")
		return 2
	case c.simUsers < 0 || c.uvicornUsers < 0 || c.simUsers+c.uvicornUsers == 0:
		fmt.Fprintln(stderr, "soak: -sim-users and -uvicorn-users must not be negative, and not both 0")
		return 2
	case c.faultRate < 0 || c.faultRate > 1 || c.badRate < 0 || c.badRate > 1:
		fmt.Fprintln(stderr, "soak: -fault-rate and -bad-client-rate must be in [0, 1]")
		return 2
	case c.timeScale <= 0 || c.sample <= 0 || c.uvicornCap < 1:
		fmt.Fprintln(stderr, "soak: -time-scale, -sample and -uvicorn-cap must be positive")
		return 2
	}
	if c.warmup == 0 {
		c.warmup = min(2*time.Minute, c.duration/5)
	}
	if c.logPath == "" {
		c.logPath = filepath.Join(os.TempDir(), fmt.Sprintf("kneecap-soak-%d.log", os.Getpid()))
	}
	s := &soak{cfg: c, out: stdout, errOut: stderr}
	ok, err := s.run(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "soak: %v\n", err)
		return 1
	}
	if !ok {
		return 1
	}
	return 0
}

// soak is one run: its engines, gateways, load and what it recorded.
type soak struct {
	cfg    config
	out    io.Writer
	errOut io.Writer
	logs   *logCounter

	targets []*target
	rec     *recorder
	samples *sampler
	start   time.Time // the load started

	before, after   goroutineCount
	heapBeforeLoad  uint64
	heapEndAfterGC  uint64
	settled         []settleResult
	settleTook      time.Duration
	goroutineWait   time.Duration
	interrupted     bool
	loadRan         time.Duration
	goroutineDumps  [2]string
	shutdownProblem []string
}

// goroutineCount is the number of goroutines at one moment.
type goroutineCount struct {
	n  int
	at time.Time
}

func (s *soak) run(ctx context.Context) (bool, error) {
	logFile, err := os.Create(s.cfg.logPath)
	if err != nil {
		return false, err
	}
	defer logFile.Close()
	s.logs = newLogCounter(logFile)
	s.rec = newRecorder()
	fmt.Fprintf(s.out, "soak: %v of load, seed %d, %d CPUs (GOMAXPROCS %d), engine fault rate %g, bad-client rate %g\n",
		s.cfg.duration, s.cfg.seed, runtime.NumCPU(), runtime.GOMAXPROCS(0), s.cfg.faultRate, s.cfg.badRate)
	fmt.Fprintf(s.out, "soak: gateway and simulator log: %s\n", s.cfg.logPath)

	// Engines and gateways. Everything started is stopped by stopAll,
	// whatever happens after this point.
	stopAll, err := s.startAll()
	defer func() {
		if stopAll != nil {
			s.shutdownProblem = append(s.shutdownProblem, stopAll()...)
		}
	}()
	if err != nil {
		return false, err
	}
	for _, t := range s.targets {
		fmt.Fprintf(s.out, "soak: %s\n", t.describe)
	}
	if ctx.Err() != nil {
		return false, errors.New("interrupted while starting")
	}

	// The reference point: nothing has been sent yet.
	s.heapBeforeLoad = heapAfterGC()
	time.Sleep(200 * time.Millisecond)
	s.before = goroutineCount{runtime.NumGoroutine(), time.Now()}
	s.goroutineDumps[0] = s.dumpGoroutines("before")

	// The load, sampled every cfg.sample.
	loadCtx, stopLoad := context.WithTimeout(ctx, s.cfg.duration)
	defer stopLoad()
	s.start = time.Now()
	s.samples = newSampler(s, s.start)
	sampCtx, stopSampling := context.WithCancel(context.Background())
	var sampWG sync.WaitGroup
	sampWG.Go(func() { s.samples.loop(sampCtx, s.cfg.sample) })
	s.samples.printHeader(s.out)
	var users sync.WaitGroup
	for _, t := range s.targets {
		for i := range t.users {
			u := newUser(t, i, s.cfg, s.rec)
			users.Go(func() { u.loop(loadCtx) })
		}
	}
	<-loadCtx.Done()
	s.loadRan = time.Since(s.start)
	s.interrupted = ctx.Err() != nil
	if s.interrupted {
		fmt.Fprintf(s.out, "soak: interrupted after %v; finishing the requests in flight\n", s.loadRan.Round(time.Second))
	} else {
		fmt.Fprintf(s.out, "soak: load done after %v; finishing the requests in flight\n", s.loadRan.Round(time.Second))
	}
	stopSampling() // the samples are of the process under load
	sampWG.Wait()
	users.Wait() // every request is bounded (the longest by its 60 s client timeout)

	// Settle: no slot held, nothing queued, nothing running in the engines;
	// then every goroutine the load started must be gone.
	settleStart := time.Now()
	s.settled = s.settleAll(s.cfg.settle)
	s.settleTook = time.Since(settleStart)
	for _, t := range s.targets {
		t.client.CloseIdleConnections()
	}
	gStart := time.Now()
	deadline := gStart.Add(s.cfg.settle)
	for runtime.NumGoroutine() > s.before.n && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	s.goroutineWait = time.Since(gStart)
	s.after = goroutineCount{runtime.NumGoroutine(), time.Now()}
	if s.after.n > s.before.n {
		s.goroutineDumps[1] = s.dumpGoroutines("after")
	}
	s.samples.final(time.Now())
	s.heapEndAfterGC = heapAfterGC()

	// Stop everything (a gateway that does not stop cleanly fails the
	// soak), then report: the figures are all taken.
	s.shutdownProblem = append(s.shutdownProblem, stopAll()...)
	stopAll = nil
	return s.report(s.out), nil
}

// heapAfterGC returns the Go heap in use after a forced collection.
func heapAfterGC() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
