package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/kneecap/kneecap/sim"
)

func init() {
	register("sim", "run a simulated inference engine (continuous batching, vLLM-like)", runSim)
}

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	profile := fs.String("profile", "gb10-bf16", "engine profile: "+strings.Join(sim.ProfileNames(), ", "))
	flavor := fs.String("flavor", "vllm", "chunk shapes to emit: vllm, sglang, llamacpp")
	listen := fs.String("listen", "127.0.0.1:8000", "address to listen on")
	scale := fs.Float64("time-scale", 1, "run all time this many times as fast")
	seed := fs.Uint64("seed", 1, "seed of output lengths and faults")
	// Profile overrides; only the flags given change the profile.
	model := fs.String("served-model-name", "", "override: the model name reported")
	maxSeqs := fs.Int("max-num-seqs", 0, "override: most sequences running at once")
	kvTokens := fs.Int("kv-cache-tokens", 0, "override: KV-cache capacity in tokens")
	batched := fs.Int("max-num-batched-tokens", 0, "override: token budget per step")
	maxLen := fs.Int("max-model-len", 0, "override: prompt + output limit")
	base := fs.Duration("step-base", 0, "override: fixed cost of a step")
	perSeq := fs.Duration("step-per-seq", 0, "override: cost per sequence in a step")
	perKV := fs.Duration("step-per-kv-token", 0, "override: cost per KV-cache token attended in a step")
	perPrefill := fs.Duration("step-per-prefill-token", 0, "override: cost per prompt token prefilled in a step")
	meanOut := fs.Int("mean-output-tokens", 0, "override: mean output length without ignore_eos")
	prefixCaching := fs.Bool("prefix-caching", false, "keep prompts' blocks and skip the prefill of a cached prefix (vLLM's automatic prefix caching, SGLang's radix cache)")
	prefixBlock := fs.Int("prefix-block-tokens", 0, "override: the prefix cache's block size (0: the flavour's, 16 or 4 for sglang)")
	var f sim.Faults
	fs.Float64Var(&f.ErrorRate, "fault-error-rate", 0, "share of requests answered with HTTP 500")
	fs.Float64Var(&f.CutRate, "fault-cut-rate", 0, "share of streams cut mid-way")
	fs.Float64Var(&f.HangRate, "fault-hang-rate", 0, "share of requests that hang before the first token")
	fs.DurationVar(&f.HangFor, "fault-hang-for", 0, "how long a hang lasts (0: until the client leaves)")
	fs.BoolVar(&f.HangAfterHeaders, "fault-hang-after-headers", false, "a hanging stream sends its headers first")
	fs.Float64Var(&f.SlowStartRate, "fault-slow-start-rate", 0, "share of requests held before they are queued")
	fs.DurationVar(&f.SlowStartDelay, "fault-slow-start-delay", time.Second, "how long a slow start holds a request")
	fs.DurationVar(&f.StartupDelay, "fault-startup-delay", 0, "answer 503 (loading) for this long after start")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	p, err := sim.LookupProfile(*profile)
	if err != nil {
		return usagef("--profile: %v", err)
	}
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "served-model-name":
			p.Model = *model
		case "max-num-seqs":
			p.MaxNumSeqs = *maxSeqs
		case "kv-cache-tokens":
			p.KVCacheTokens = *kvTokens
		case "max-num-batched-tokens":
			p.MaxBatchedTokens = *batched
		case "max-model-len":
			p.MaxModelLen = *maxLen
		case "step-base":
			p.StepBase = *base
		case "step-per-seq":
			p.StepPerSeq = *perSeq
		case "step-per-kv-token":
			p.StepPerKVToken = *perKV
		case "step-per-prefill-token":
			p.StepPerPrefillToken = *perPrefill
		case "mean-output-tokens":
			p.MeanOutputTokens = *meanOut
		case "prefix-caching":
			p.PrefixCaching = *prefixCaching
		case "prefix-block-tokens":
			p.PrefixBlockTokens = *prefixBlock
		}
	})
	if *scale <= 0 {
		return usagef("--time-scale must be positive")
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	s, err := sim.New(sim.Config{Profile: p, Flavor: sim.Flavor(*flavor), TimeScale: *scale, Seed: *seed, Faults: f, Logger: log})
	if err != nil {
		return usagef("%v", err)
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "kneecap sim: %s (%s flavour, time scale %g) on http://%s\n", p.Name, *flavor, *scale, l.Addr())
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.Run(gctx) })
	g.Go(func() error {
		if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	return g.Wait()
}
