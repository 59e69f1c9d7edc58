package fleet

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/kneecap/kneecap/bench"
	"github.com/kneecap/kneecap/sim"
)

// load is one closed loop of users against one address.
type load struct {
	Name   string
	URL    string // http://host:port
	Users  int
	Seed   uint64
	Warmup time.Duration // wall time
	Window time.Duration // wall time
	// Workload in tokens; zero means sim.SecondWorkload (4,000-token
	// prompts, 128 output tokens, +-20 %).
	Workload sim.Workload
}

// result is what one load measured in its window.
type result struct {
	Name                       string
	Users                      int
	Good, Completed, Rejected  int
	Failed                     int
	Goodput                    float64 // good requests per second of wall time
	Statuses                   map[int]int
	FailedSamples, BadRejected []string
	Window                     time.Duration
	Records                    []bench.Record // every record of the run, warm-up included
	Start                      time.Time
}

// lost reports the requests that ended in neither a 200 nor a 429 that
// the client saw (a 429 that came through the balancer after every try
// was refused).
func (r result) lost() int { return r.Failed + len(r.BadRejected) }

func (r result) String() string {
	return fmt.Sprintf("%-22s %3d users: %6.3f good req/s (engine time %6.3f), %d good of %d completed, %d rejected, %d lost",
		r.Name, r.Users, r.Goodput, r.Goodput / *timeScale, r.Good, r.Completed, r.Rejected, r.lost())
}

// run drives the load and returns its result. Users honour Retry-After up
// to 30 s of engine time, as in the scenario suite.
func (l load) run(ctx context.Context) (result, error) {
	w := l.Workload
	if w.PromptTokens == 0 {
		w = sim.SecondWorkload
	}
	cfg := bench.Config{
		BaseURL: l.URL,
		Model:   sim.GB10BF16.Model,
		Client: &http.Client{Transport: &http.Transport{
			Proxy: nil, MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: time.Minute, DisableCompression: true,
		}},
		Levels: []float64{float64(l.Users)},
		Warmup: l.Warmup, Duration: l.Window,
		Timeout:   l.Warmup + l.Window + time.Minute,
		RampUp:    scaled(10 * time.Second),
		Workload:  workload(w),
		Seed:      l.Seed,
		IgnoreEOS: true,
		Targets:   bench.Targets{TTFT: scaled(TTFT), TPOT: scaled(TPOT)},
		// 30 s of engine time, as in the scenario suite.
		RetryAfterMax: scaled(30 * time.Second),
	}
	defer cfg.Client.CloseIdleConnections()
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		return result{}, fmt.Errorf("%s: %w", l.Name, err)
	}
	lv := rep.Levels[0]
	res := result{Name: l.Name, Users: l.Users, Statuses: map[int]int{}, Window: lv.WindowEnd.Sub(lv.WindowStart), Records: lv.Records, Start: lv.Start}
	for _, rec := range bench.Slice(lv.Records, lv.WindowStart, lv.WindowEnd) {
		res.Statuses[rec.Status]++
		switch rec.Outcome {
		case bench.Completed:
			res.Completed++
			if rec.Good {
				res.Good++
			}
		case bench.Rejected:
			res.Rejected++
			if rec.Status != http.StatusTooManyRequests || rec.RetryAfter <= 0 {
				res.BadRejected = appendSample(res.BadRejected, fmt.Sprintf("status %d reason %q retry-after %v", rec.Status, rec.Reason, rec.RetryAfter))
			}
		default:
			res.Failed++
			res.FailedSamples = appendSample(res.FailedSamples, fmt.Sprintf("status %d: %s", rec.Status, strings.TrimSpace(rec.Err)))
		}
	}
	if s := res.Window.Seconds(); s > 0 {
		res.Goodput = float64(res.Good) / s
	}
	return res, nil
}

func appendSample(s []string, v string) []string {
	if len(s) < 5 {
		s = append(s, v)
	}
	return s
}

// workload draws lengths from w (the simulator's rule: one token a word).
func workload(w sim.Workload) bench.Workload {
	return bench.WorkloadFunc(func(sl bench.Slot) bench.Request {
		n, out := w.Lengths(sl.Rand)
		return bench.Request{Prompt: bench.Words(sl.Rand, n), MaxTokens: out}
	})
}

// runAll runs loads at once and returns their results in order.
func runAll(ctx context.Context, loads ...load) ([]result, error) {
	res := make([]result, len(loads))
	errs := make([]error, len(loads))
	done := make(chan int)
	for i, l := range loads {
		go func() {
			res[i], errs[i] = l.run(ctx)
			done <- i
		}()
	}
	for range loads {
		<-done
	}
	for _, err := range errs {
		if err != nil {
			return res, err
		}
	}
	return res, nil
}
