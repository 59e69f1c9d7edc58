package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/kneecap/kneecap/bench"
	"github.com/kneecap/kneecap/bench/trace"
)

// traceFlags are bench's flags for replaying a trace (--trace).
type traceFlags struct {
	file, format    string
	start, duration time.Duration
	speed, lengths  float64
	maxModelLen     int
	timeline        time.Duration
	capURL          string
}

func (t *traceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.file, "trace", "", "replay this trace open loop, each request at its own arrival with its own lengths: kneecap's request log (KNEECAP_REQUEST_LOG), Azure's LLM inference trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens) or Mooncake's JSONL (timestamp ms, input_length, output_length, hash_ids); replaces --concurrency, --rate and --prompts")
	fs.StringVar(&t.format, "trace-format", "auto", "the trace's format: auto, kneecap, azure or mooncake")
	fs.DurationVar(&t.start, "trace-start", 0, "replay the trace's requests from this long after its first arrival")
	fs.DurationVar(&t.duration, "trace-duration", 0, "replay this long of the trace (default: to its end)")
	fs.Float64Var(&t.speed, "trace-speed", 1, "replay arrivals this many times faster (0.5: twice as slow); --trace-start and --trace-duration are in the trace's time")
	fs.Float64Var(&t.lengths, "length-scale", 1, "--trace: multiply every prompt and output length (and a prefix block's 512 tokens) by this, for smaller engines")
	fs.IntVar(&t.maxModelLen, "max-model-len", 0, "--trace: the engine's context in tokens, to refuse a trace whose requests do not fit (default: max_model_len from GET /v1/models, when given)")
	fs.DurationVar(&t.timeline, "timeline", 0, "--trace: the width of a row of the report over time (default: a sixtieth of the run, at least 1s)")
	fs.StringVar(&t.capURL, "cap-url", "", "the gateway's /status on its admin port (e.g. http://127.0.0.1:9090/status), read every second for its cap, shown over time with --trace")
}

// checkTrace refuses flags that --trace replaces; call it before
// benchFlags.config fills in their defaults.
func (f *benchFlags) checkTrace() error {
	if f.tr.file == "" {
		return nil
	}
	switch {
	case f.concurrency != "" || f.rate != "":
		return usagef("--trace replays the trace's own arrivals: give no --concurrency or --rate")
	case f.prompts != "":
		return usagef("--trace makes each request's prompt from the trace: give no --prompts")
	case !(f.tr.speed > 0):
		return usagef("--trace-speed must be positive")
	case !(f.tr.lengths > 0):
		return usagef("--length-scale must be positive")
	case f.tr.start < 0 || f.tr.duration < 0:
		return usagef("--trace-start and --trace-duration must not be negative")
	}
	return nil
}

// applyTrace reads the trace and makes cfg its replay: one open-loop
// level whose arrivals and lengths are the trace's (its window, speed
// and length scale applied), ended when its last request has.
func (f *benchFlags) applyTrace(ctx context.Context, cfg *bench.Config) (*trace.Trace, error) {
	format, err := trace.ParseFormat(f.tr.format)
	if err != nil {
		return nil, usagef("--trace-format: %v", err)
	}
	tr, err := trace.ReadFile(f.tr.file, format)
	if err != nil {
		return nil, err
	}
	if f.tr.start > 0 || f.tr.duration > 0 {
		if tr, err = tr.Window(f.tr.start, f.tr.duration); err != nil {
			return nil, err
		}
	}
	tr = tr.Scale(f.tr.speed*f.timeScale, f.tr.lengths)
	n := f.tr.maxModelLen
	if n == 0 {
		client := cfg.Client
		if client == nil {
			client = &http.Client{Transport: &http.Transport{Proxy: nil}}
		}
		n = bench.DiscoverContext(ctx, client, cfg.BaseURL)
	}
	if err := tr.CheckContext(n); err != nil {
		return nil, err
	}
	rp := &trace.Replay{Trace: tr, Block: max(int(float64(trace.BlockTokens)*f.tr.lengths+0.5), 1)}
	cfg.Mode, cfg.Levels = bench.Open, []float64{roundRate(rp.Rate())}
	cfg.Interarrival, cfg.Workload, cfg.EndWithArrivals = rp.Interarrival(), rp.Workload(), true
	cfg.Warmup, cfg.Requests = 0, 0
	cfg.Duration = tr.Span() + 10*time.Minute // a bound: the level ends when its last request has
	cfg.Timeout = 2*cfg.Duration + time.Minute
	return tr, nil
}

// describeTrace is the workload line of a replay.
func (f *benchFlags) describeTrace(tr *trace.Trace, clients bench.Clients) string {
	s := fmt.Sprintf("trace %s (%s): %d requests over %s", tr.File, tr.Format, len(tr.Requests),
		time.Duration(float64(tr.Span())*f.timeScale).Round(time.Millisecond))
	if f.tr.start > 0 || f.tr.duration > 0 {
		s += fmt.Sprintf(", window from %s for %s", f.tr.start, f.tr.duration)
	}
	if f.tr.speed != 1 {
		s += fmt.Sprintf(", arrivals %gx as fast", f.tr.speed)
	}
	if f.tr.lengths != 1 {
		s += fmt.Sprintf(", lengths x%g", f.tr.lengths)
	}
	return s + ", clients " + clients.String()
}

// writeTimeline writes the replay's report over time, and its plot when
// --plot asked for one.
func (f *benchFlags) writeTimeline(rep *bench.Report, wall bench.Report, stdout io.Writer) error {
	if len(wall.Levels) == 0 {
		return nil
	}
	width := time.Duration(float64(f.tr.timeline) / f.timeScale)
	bs := bench.ScaleTimeline(wall.Levels[0].Timeline(width), f.timeScale)
	fmt.Fprintln(stdout, "over time (requests a second; offered by arrival, the rest by their end):")
	if err := bench.WriteTimeline(stdout, bs); err != nil {
		return err
	}
	if f.plotFile == "" {
		return nil
	}
	return writeFile(f.plotFile, func(w io.Writer) error {
		format, _ := bench.PlotFormat(f.plotFile)
		return bench.WriteTimelinePlot(w, format, rep.Targets, bs)
	})
}

// roundRate keeps three significant digits of a trace's mean rate, the
// label of its level (the arrivals are the trace's own).
func roundRate(r float64) float64 {
	if r <= 0 {
		return r
	}
	p := math.Pow(10, 2-math.Floor(math.Log10(r)))
	return math.Round(r*p) / p
}
