package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/kneecap/kneecap/bench"
)

func init() {
	register("bench", "load an OpenAI-compatible endpoint level by level and report goodput and the knee", runBench)
}

// headerFlags collects repeated --header "Name: value" flags.
type headerFlags http.Header

func (h headerFlags) String() string { return "" }
func (h headerFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("header %q: want Name: value", v)
	}
	http.Header(h).Add(strings.TrimSpace(k), strings.TrimSpace(val))
	return nil
}

// benchFlags are the flags of bench.
type benchFlags struct {
	timeScale           float64
	cfg                 bench.Config
	concurrency, rate   string
	arrivals, endpoint  string
	inputLen, outputLen string
	prompts, goodput    string
	jsonFile, plotFile  string
	header              headerFlags
	clients             string
	quiet               bool
	tr                  traceFlags
}

func (f *benchFlags) register(fs *flag.FlagSet) {
	c := &f.cfg
	fs.StringVar(&c.BaseURL, "base-url", "", "server base URL without /v1, e.g. http://127.0.0.1:8000 (required)")
	fs.StringVar(&f.endpoint, "endpoint", "chat", "chat (/v1/chat/completions) or completions (/v1/completions)")
	fs.StringVar(&c.Model, "model", "", "model name (default: the first of GET /v1/models)")
	fs.StringVar(&f.concurrency, "concurrency", "", "closed loop: comma-separated user counts, e.g. 1,2,4,8,16,32,64")
	fs.StringVar(&f.rate, "rate", "", "open loop: comma-separated arrival rates in req/s, e.g. 0.25,0.5,1,2")
	fs.StringVar(&f.arrivals, "arrivals", "poisson", "open loop arrivals: poisson (gamma, see --burstiness) or constant")
	fs.Float64Var(&c.Burstiness, "burstiness", 1, "open loop: gamma shape of inter-arrival times (1 = Poisson, <1 burstier)")
	fs.IntVar(&c.MaxInFlight, "max-inflight", 0, "open loop: bound on requests in flight (default 10000)")
	fs.DurationVar(&c.Duration, "duration", 0, "measured window per level (default 60s unless --requests)")
	fs.IntVar(&c.Requests, "requests", 0, "end each level's window after this many requests ended in it")
	fs.DurationVar(&c.RampUp, "ramp-up", 0, "closed loop: start users evenly over this long instead of all at once")
	fs.DurationVar(&c.Think, "think", 0, "closed loop: a user waits this long after a completed request before its next")
	fs.DurationVar(&c.Warmup, "warmup", 10*time.Second, "load before each level's window, not counted")
	fs.DurationVar(&c.Timeout, "timeout", 0, "hard bound on the whole run (default: 2 x the planned time + 1m, or 30m with --requests)")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", 0, "bound on one request (default none)")
	fs.StringVar(&f.inputLen, "input-len", "1000", "prompt words (1 token per word on the simulator): N, N:ratio, A-B, normal:N,ratio, exp:N, lognormal:N,sigma")
	fs.StringVar(&f.outputLen, "output-len", "120", "output tokens (max_tokens): same forms as --input-len")
	fs.StringVar(&f.prompts, "prompts", "", "JSONL file of prompts ({\"prompt\": ..., \"max_tokens\": N}) instead of synthetic ones")
	fs.BoolVar(&c.IgnoreEOS, "ignore-eos", true, "send ignore_eos so that the engine generates exactly max_tokens")
	fs.BoolVar(&c.NoStream, "no-stream", false, "send \"stream\": false, as the OpenAI SDKs do by default, and measure E2E to the end of each answer (no TTFT, TPOT or ITL); judged by e2e in --goodput, else by ttft + tpot x (output tokens - 1)")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of prompts, lengths and arrivals")
	fs.StringVar(&f.goodput, "goodput", "ttft=1s,tpot=100ms", "targets: ttft=DUR,tpot=DUR[,e2e=DUR], or none")
	fs.Float64Var(&c.MinAttainment, "min-attainment", 0.9, "share of good requests for a level to have met the targets")
	fs.StringVar(&f.clients, "clients", "next", "what a client does with a refused request: next (drop it, wait --retry-after-max at most, send the next), sdk (retry it as the OpenAI SDKs do: 2 retries, Retry-After up to 60 s, else backoff), none (give up at once, as vLLM's benchmark); open loop and --trace: sdk retries, next and none send once")
	fs.DurationVar(&c.RetryAfterMax, "retry-after-max", 0, "closed loop, --clients next: wait the server's Retry-After, at most this long, after a 429 (0: don't)")
	fs.Var(f.header, "header", "extra request header \"Name: value\" (repeatable)")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress output")
	f.tr.register(fs)
	fs.Float64Var(&f.timeScale, "time-scale", 1, "the server runs this many times faster than the time it models (kneecap sim --time-scale): --goodput targets, --rate and the report are in its time; --duration and --warmup stay wall time")
}

// config checks the flags and completes the Config.
func (f *benchFlags) config(stderr io.Writer) (bench.Config, error) {
	c := f.cfg
	if c.BaseURL == "" {
		return c, usagef("--base-url is required")
	}
	switch f.endpoint {
	case "chat":
		c.Endpoint = bench.Chat
	case "completions":
		c.Endpoint = bench.Completions
	default:
		return c, usagef("--endpoint %q: want chat or completions", f.endpoint)
	}
	var err error
	switch {
	case f.concurrency != "" && f.rate != "":
		return c, usagef("give --concurrency or --rate, not both")
	case f.rate != "":
		c.Mode = bench.Open
		c.Levels, err = bench.ParseLevels(f.rate)
	default:
		if f.concurrency == "" {
			f.concurrency = "1,2,4,8,16,32,64"
		}
		c.Levels, err = bench.ParseLevels(f.concurrency)
	}
	if err != nil {
		return c, usagef("%v", err)
	}
	switch f.arrivals {
	case "poisson":
	case "constant":
		c.Constant = true
	default:
		return c, usagef("--arrivals %q: want poisson or constant", f.arrivals)
	}
	if c.Duration == 0 && c.Requests == 0 {
		c.Duration = 60 * time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Minute
		if c.Requests == 0 {
			c.Timeout = 2*time.Duration(len(c.Levels))*(c.Warmup+c.Duration) + time.Minute
		}
	}
	if c.Targets, err = bench.ParseTargets(f.goodput); err != nil {
		return c, usagef("--goodput: %v", err)
	}
	if f.timeScale <= 0 {
		return c, usagef("--time-scale must be positive")
	}
	// Targets and rates are given in the engine's time, as the report reads.
	c.Targets = bench.Report{Targets: c.Targets}.Scaled(1 / f.timeScale).Targets
	if c.Mode == bench.Open {
		for i := range c.Levels {
			c.Levels[i] *= f.timeScale
		}
	}
	cl, err := bench.ParseClients(f.clients)
	if err != nil {
		return c, usagef("--clients: %v", err)
	}
	c.Clients = cl
	if len(f.header) > 0 {
		c.Header = http.Header(f.header)
	}
	if f.prompts != "" {
		file, err := os.Open(f.prompts)
		if err != nil {
			return c, usagef("--prompts: %v", err)
		}
		defer file.Close()
		pf, err := bench.ReadPromptFile(file)
		if err != nil {
			return c, usagef("--prompts: %v", err)
		}
		out, err := bench.ParseDist(f.outputLen)
		if err != nil {
			return c, usagef("--output-len: %v", err)
		}
		pf.MaxTokens = out.Mean
		c.Workload = pf
	} else {
		in, err := bench.ParseDist(f.inputLen)
		if err != nil {
			return c, usagef("--input-len: %v", err)
		}
		out, err := bench.ParseDist(f.outputLen)
		if err != nil {
			return c, usagef("--output-len: %v", err)
		}
		c.Workload = bench.Synthetic{InputLen: in, OutputLen: out}
	}
	if !f.quiet {
		c.Progress = bench.ProgressPrinter(stderr, isTerminal(stderr), c.Mode)
	}
	return c, nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// checkOutputs validates --json and --plot before any load is sent.
func (f *benchFlags) checkOutputs() error {
	if f.plotFile != "" {
		if _, err := bench.PlotFormat(f.plotFile); err != nil {
			return usagef("--plot: %v", err)
		}
	}
	return nil
}

// writeOutputs writes the JSON and plot files that were asked for.
func writeOutputs(rep *bench.Report, jsonFile, plotFile string, stdout io.Writer) error {
	write := writeFile
	if jsonFile != "" {
		if err := write(jsonFile, rep.WriteJSON); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
		fmt.Fprintln(stdout, "JSON written to", jsonFile)
	}
	if plotFile != "" {
		format, _ := bench.PlotFormat(plotFile)
		if err := write(plotFile, func(w io.Writer) error { return rep.WritePlot(w, format) }); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
		fmt.Fprintln(stdout, "plot written to", plotFile)
	}
	return nil
}

// writeFile creates name and writes it with fn.
func writeFile(name string, fn func(io.Writer) error) error {
	file, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := fn(file); err != nil {
		file.Close()
		return err
	}
	return file.Close()
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &benchFlags{header: headerFlags{}}
	f.register(fs)
	fs.StringVar(&f.jsonFile, "json", "", "also write the report as JSON (vLLM's field names) to FILE")
	fs.StringVar(&f.plotFile, "plot", "", "also draw the report to FILE.png or FILE.svg")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := f.checkTrace(); err != nil {
		return err
	}
	cfg, err := f.config(stderr)
	if err != nil {
		return err
	}
	if err := f.checkOutputs(); err != nil {
		return err
	}
	cfg.CapURL = f.tr.capURL
	desc := describeWorkload(cfg)
	if f.tr.file != "" {
		tr, err := f.applyTrace(ctx, &cfg)
		if err != nil {
			return err
		}
		desc = f.describeTrace(tr, cfg.Clients)
		if !f.quiet {
			cfg.Progress = bench.ProgressPrinter(stderr, isTerminal(stderr), cfg.Mode)
		}
	}
	fmt.Fprintf(stdout, "kneecap bench: %s, %s loop, %s\n", cfg.BaseURL,
		map[bench.Mode]string{bench.Closed: "closed", bench.Open: "open"}[cfg.Mode], desc)
	wall, runErr := bench.Run(ctx, cfg)
	rep := wall.Scaled(f.timeScale)
	if f.tr.file != "" {
		rep.Workload = desc
	}
	if len(rep.Levels) > 0 {
		fmt.Fprintf(stdout, "model %q, %s", rep.Model, rep.Workload)
		if f.timeScale != 1 {
			fmt.Fprintf(stdout, "; in the engine's time (it runs %gx faster)", f.timeScale)
		}
		fmt.Fprintln(stdout)
		if err := rep.WriteTable(stdout); err != nil {
			return err
		}
		plotFile := f.plotFile
		if f.tr.file != "" {
			if err := f.writeTimeline(&rep, wall, stdout); err != nil {
				return fmt.Errorf("--plot: %w", err)
			}
			if plotFile != "" {
				fmt.Fprintln(stdout, "plot written to", plotFile)
			}
			plotFile = "" // drawn over time above
		}
		if err := writeOutputs(&rep, f.jsonFile, plotFile, stdout); err != nil {
			return err
		}
	}
	if errors.Is(runErr, bench.ErrTimeout) {
		return fmt.Errorf("%w (the table shows the levels that ran; the last one was cut short)", runErr)
	}
	return runErr
}

func describeWorkload(c bench.Config) string {
	w := "window "
	if c.Duration > 0 {
		w += c.Duration.String()
	}
	if c.Requests > 0 {
		if c.Duration > 0 {
			w += " or "
		}
		w += fmt.Sprintf("%d requests", c.Requests)
	}
	return fmt.Sprintf("%s per level after %s warm-up", w, c.Warmup)
}
