package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/kneecap/kneecap/bench"
	"github.com/kneecap/kneecap/sim"
)

// Config is one demo run. Durations and targets are in the simulated
// engine's time; the zero value of each field means the default given.
type Config struct {
	// Profile is the simulator profile; "" means gb10-bf16.
	Profile string
	// TimeScale runs the engine (and so the whole demo) this many times
	// faster than the engine would; 0 means 10.
	TimeScale float64
	// Levels are the closed-loop user counts; nil means 1,2,4,8,16,32.
	Levels []float64
	// Warmup and Window are each level's warm-up and measured window;
	// zero means 20s and 60s (2 s and 6 s of wall time at scale 10).
	Warmup, Window time.Duration
	// PromptTokens and OutputTokens are the workload (prompt words, and
	// max_tokens with ignore_eos); zero means the simulator's documented
	// second calibration workload (sim.SecondWorkload).
	PromptTokens, OutputTokens int
	// Targets judge goodput; zero means TTFT 1s and TPOT 100ms.
	Targets bench.Targets
	// RetryAfterMax bounds how long a user waits on a 429's Retry-After
	// before its next request; zero means 2s.
	RetryAfterMax time.Duration
	// Seed seeds the workload and the engine.
	Seed uint64
	// Plot is the file the picture is written to (.png or .svg); "" means
	// kneecap-demo.png in the system's temporary directory.
	Plot string
	// Stdout receives the tables; Progress, when set, receives progress
	// (Terminal: as a bar).
	Stdout   io.Writer
	Progress io.Writer
	Terminal bool
}

func (c *Config) defaults() error {
	if c.Profile == "" {
		c.Profile = "gb10-bf16"
	}
	if c.TimeScale == 0 {
		c.TimeScale = 10
	}
	if c.TimeScale < 0 {
		return errors.New("demo: time scale must be positive")
	}
	if len(c.Levels) == 0 {
		c.Levels = []float64{1, 2, 4, 8, 16, 32}
	}
	if c.Warmup == 0 {
		c.Warmup = 20 * time.Second
	}
	if c.Window == 0 {
		c.Window = 60 * time.Second
	}
	if c.PromptTokens == 0 {
		c.PromptTokens = sim.SecondWorkload.PromptTokens
	}
	if c.OutputTokens == 0 {
		c.OutputTokens = sim.SecondWorkload.OutputTokens
	}
	if c.Targets.IsZero() {
		c.Targets = bench.Targets{TTFT: time.Second, TPOT: 100 * time.Millisecond}
	}
	if c.RetryAfterMax == 0 {
		c.RetryAfterMax = 2 * time.Second
	}
	if c.Plot == "" {
		c.Plot = filepath.Join(os.TempDir(), "kneecap-demo.png")
	}
	if _, err := bench.PlotFormat(c.Plot); err != nil {
		return err
	}
	if c.Stdout == nil {
		c.Stdout = io.Discard
	}
	return nil
}

// scaled converts an engine-time duration to wall time.
func (c *Config) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.TimeScale)
}

// Run runs the demo and returns when both benchmarks are done (or ctx ends).
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	profile, err := sim.LookupProfile(cfg.Profile)
	if err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	engine, err := sim.New(sim.Config{Profile: profile, TimeScale: cfg.TimeScale, Seed: cfg.Seed, Logger: quiet})
	if err != nil {
		return err
	}
	engLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	engURL := "http://" + engLn.Addr().String()

	g, gctx := errgroup.WithContext(ctx)
	runCtx, stop := context.WithCancel(gctx)
	var servers []*http.Server
	serve := func(h http.Handler, ln net.Listener) {
		srv := &http.Server{Handler: h}
		servers = append(servers, srv)
		g.Go(func() error {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	g.Go(func() error { return engine.Run(runCtx) })
	serve(engine.Handler(), engLn)
	var reps []bench.Report
	g.Go(func() error {
		defer func() {
			stop()
			for _, srv := range servers {
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = srv.Shutdown(sctx)
				cancel()
			}
		}()
		fmt.Fprintf(cfg.Stdout, "kneecap demo: a simulated %s engine (%s) at %s, %gx faster than real time; all numbers are in its time.\n",
			profile.Name, profile.Model, engURL, cfg.TimeScale)
		fmt.Fprintf(cfg.Stdout, "Closed loop, %s users, prompts of %d tokens, %d output tokens; targets %s; %s warm-up and %s measured per level.\n",
			levelList(cfg.Levels), cfg.PromptTokens, cfg.OutputTokens, cfg.Targets, cfg.Warmup, cfg.Window)
		alone, err := cfg.bench(runCtx, "engine alone", engURL)
		if err != nil {
			return err
		}
		reps = append(reps, alone)

		gwLn, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		ctl, err := chooseController(alone)
		if err != nil {
			gwLn.Close()
			return err
		}
		gw, err := newGateway(engURL, gwLn, cfg.scaledTargets(), ctl, quiet)
		if err != nil {
			gwLn.Close()
			return err
		}
		g.Go(func() error { return gw.run(runCtx) })
		gwURL := "http://" + gwLn.Addr().String()
		fmt.Fprintf(cfg.Stdout, "kneecap gateway at %s in front of it: %s.\n", gwURL, gw.describe)
		fmt.Fprintf(cfg.Stdout, "Its live page, served while the demo runs: %s (in wall time: latencies %gx shorter, rates %gx higher than the engine's).\n\n",
			gw.page, cfg.TimeScale, cfg.TimeScale)
		through, err := cfg.bench(runCtx, "through kneecap", gwURL)
		if err != nil {
			return err
		}
		reps = append(reps, through)
		return nil
	})
	if err := g.Wait(); err != nil {
		return err
	}
	return cfg.report(reps)
}

// bench runs the load against url and returns the report in engine time.
func (c *Config) bench(ctx context.Context, name, url string) (bench.Report, error) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "%s:\n", name)
	}
	rep, err := bench.Run(ctx, c.benchConfig(url))
	if err != nil {
		return rep, fmt.Errorf("%s: %w", name, err)
	}
	return rep.Scaled(c.TimeScale), nil
}

func (c *Config) scaledTargets() bench.Targets {
	return bench.Targets{TTFT: c.scaled(c.Targets.TTFT), TPOT: c.scaled(c.Targets.TPOT), E2E: c.scaled(c.Targets.E2E)}
}

func levelList(l []float64) string {
	var s []string
	for _, v := range l {
		s = append(s, strconv.FormatFloat(v, 'g', -1, 64))
	}
	return strings.Join(s, ",")
}

// benchConfig is the load both runs get, in wall time.
func (c *Config) benchConfig(url string) bench.Config {
	bc := bench.Config{
		BaseURL:       url,
		Levels:        c.Levels,
		Warmup:        c.scaled(c.Warmup),
		Duration:      c.scaled(c.Window),
		Timeout:       2*time.Duration(len(c.Levels))*c.scaled(c.Warmup+c.Window) + time.Minute,
		Workload:      bench.Synthetic{InputLen: bench.Dist{Mean: c.PromptTokens}, OutputLen: bench.Dist{Mean: c.OutputTokens}},
		IgnoreEOS:     true,
		Seed:          c.Seed,
		Targets:       c.scaledTargets(),
		RetryAfterMax: c.scaled(c.RetryAfterMax),
	}
	if c.Progress != nil {
		bc.Progress = bench.ProgressPrinter(c.Progress, c.Terminal, bench.Closed)
	}
	return bc
}

// report prints both tables side by side, the knee of each, and the plot.
func (c *Config) report(reps []bench.Report) error {
	names := []string{"engine alone", "through kneecap"}
	if err := bench.WriteComparison(c.Stdout, names, reps); err != nil {
		return err
	}
	fmt.Fprintln(c.Stdout, "goodput in req/s, latencies in ms;", reps[0].Definitions())
	for i, rep := range reps {
		for _, l := range rep.KneeLines() {
			fmt.Fprintf(c.Stdout, "%s: %s\n", names[i], l)
		}
	}
	format, _ := bench.PlotFormat(c.Plot)
	f, err := os.Create(c.Plot)
	if err != nil {
		return err
	}
	if err := bench.WriteComparisonPlot(f, format, names, reps); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintln(c.Stdout, "plot written to", c.Plot)
	return nil
}
