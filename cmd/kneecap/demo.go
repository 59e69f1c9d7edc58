package main

import (
	"context"
	"flag"
	"io"
	"time"

	"github.com/kneecap/kneecap/bench"
	"github.com/kneecap/kneecap/bench/demo"
)

func init() {
	register("demo", "see the knee: a simulated engine alone and behind kneecap, under the same load (about 2 minutes)", runDemo)
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c demo.Config
	levels := fs.String("concurrency", "1,2,4,8,16,32", "closed-loop user counts")
	fs.StringVar(&c.Profile, "profile", "gb10-bf16", "simulator profile")
	fs.Float64Var(&c.TimeScale, "time-scale", 10, "run the simulated engine this many times faster than real time")
	fs.DurationVar(&c.Warmup, "warmup", 20*time.Second, "warm-up per level, in the engine's time")
	fs.DurationVar(&c.Window, "duration", 60*time.Second, "measured window per level, in the engine's time")
	fs.StringVar(&c.Plot, "plot", "", "write the picture here (.png or .svg; default kneecap-demo.png in the temp dir)")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the workload and the engine")
	quiet := fs.Bool("quiet", false, "no progress output")
	if err := fs.Parse(args); err != nil {
		return usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %v", fs.Args())
	}
	var err error
	if c.Levels, err = bench.ParseLevels(*levels); err != nil {
		return usagef("--concurrency: %v", err)
	}
	if c.Plot != "" {
		if _, err := bench.PlotFormat(c.Plot); err != nil {
			return usagef("--plot: %v", err)
		}
	}
	c.Stdout = stdout
	if !*quiet {
		c.Progress, c.Terminal = stderr, isTerminal(stderr)
	}
	return demo.Run(ctx, c)
}
