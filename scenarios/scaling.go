package scenarios

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/kneecap/kneecap/bench"
	"github.com/kneecap/kneecap/sim"
)

// Scaling is scenario 22 (issue 23): a fleet of replicas (each a simulated
// engine with kneecap beside it, adaptive) behind a least-request balancer
// that retries a refusal on a replica not tried yet, scaled by the HPA's
// rule on kneecap_demand_ratio as deploy/kubernetes/components/hpa sets it,
// in virtual time. Open-loop demand at Rate, doubled over the second phase,
// back to Rate over the third. Each new replica starts with a cold engine
// and a cold gateway after LoadDelay (its model loading; it reports a
// demand ratio of 0 meanwhile, as a loading pod does).
type Scaling struct {
	Profile  sim.Profile
	Workload sim.Workload
	// Rate is the open-loop rate of the first and third phases (req/s);
	// the second doubles it.
	Rate float64
	// Phases are the lengths of the three phases.
	Phases [3]time.Duration
	// Initial replicas (ready at the start, cold), and the fleet's bounds.
	Initial, Min, Max int
	LoadDelay         time.Duration
	HPA               HPA
	// Fixed, when positive, runs a fleet of that size with no autoscaler
	// (the right-sized fleet the autoscaled one is judged against).
	Fixed int
	// StepFactors, when set, slow the engine of the i-th replica started
	// by StepFactors[i] (1.25: every step a quarter longer).
	StepFactors []float64
	// Weighted makes the balancer weigh each replica by its cap, as HAProxy
	// does with kneecap's agent-check (leastconn: the fewest requests in
	// flight per unit of weight), the weights read once a second.
	Weighted bool
	// Tries bounds the replicas the balancer tries per request (0: 3);
	// 1 is a balancer that cannot retry a refusal.
	Tries int
	// TTFT and TPOT are the targets of the clients and of every replica's
	// gateway; zero means TTFTTarget and TPOTTarget.
	TTFT, TPOT time.Duration
	// JoinAt, with Fixed, has one replica more join the fleet then, a cold
	// engine and a cold gateway, ready at once (scenario 29).
	JoinAt time.Duration
	// SharedState, with JoinAt, runs every adaptive replica as the deploy
	// kit's fleet does with a shared state file: the same upstream on
	// every replica (http://127.0.0.1:8000, the sidecar's engine) and one
	// KNEECAP_STATE_FILE on a volume they all write (last writer wins);
	// the joining replica starts from the state replica-1 saved at the
	// join (a deterministic writer: in a cluster it is whichever wrote
	// last, at most 30 s before).
	SharedState bool
	// StaticCap, when positive, is every replica's static count cap
	// (KNEECAP_MAX_CONCURRENCY, without the token budget, as the suite's
	// static caps): the oracle's fleet.
	StaticCap int
}

// targets are the scenario's targets (see Scaling.TTFT).
func (s Scaling) targets() bench.Targets {
	return bench.Targets{TTFT: cmp.Or(s.TTFT, TTFTTarget), TPOT: cmp.Or(s.TPOT, TPOTTarget)}
}

// HPA is the Kubernetes HorizontalPodAutoscaler's rule (autoscaling/v2)
// on an AverageValue Pods metric, with the behaviour of
// deploy/kubernetes/components/hpa: desired = ceil(replicas x average /
// target), skipped within Tolerance of the target; a scale-up takes the
// lowest recommendation of UpWindow, a scale-down the highest of
// DownWindow; at most UpPods added and DownPods removed per period.
type HPA struct {
	Target               float64
	Tolerance            float64
	Sync                 time.Duration
	UpWindow, DownWindow time.Duration
	UpPods, DownPods     int
	UpPeriod, DownPeriod time.Duration
	Scrape, MetricWindow time.Duration // Prometheus scrape interval; prometheus-adapter's avg_over_time
	DrainGrace           time.Duration // KNEECAP_DRAIN_TIMEOUT of the manifests
}

// DefaultHPA is deploy/kubernetes/components/hpa with the Kubernetes
// defaults it leaves: target 0.9, tolerance 10 %, sync 15 s, scale up
// over 60 s by at most 2 pods per 5 minutes, down over 15 minutes by one
// per 5 minutes; the metric is avg_over_time over 2 minutes of scrapes
// every 15 s (the prometheus-adapter rule of docs/fleet.md).
var DefaultHPA = HPA{
	Target: 0.9, Tolerance: 0.1, Sync: 15 * time.Second,
	UpWindow: time.Minute, DownWindow: 15 * time.Minute,
	UpPods: 2, DownPods: 1, UpPeriod: 5 * time.Minute, DownPeriod: 5 * time.Minute,
	Scrape: 15 * time.Second, MetricWindow: 2 * time.Minute,
	DrainGrace: 120 * time.Second,
}

// Scenario22 is the case on scenario 1's engine and workload:
// 1 req/s (about two replicas' worth at the target ratio), doubled for 15
// minutes, then back for 22 minutes (the scale-down window is 15); two
// replicas at the start; a model load of two minutes.
var Scenario22 = Scaling{
	Profile: sim.GB10BF16, Workload: sim.SecondWorkload,
	Rate: 1, Phases: [3]time.Duration{8 * time.Minute, 15 * time.Minute, 22 * time.Minute},
	Initial: 2, Min: 1, Max: 8, LoadDelay: 2 * time.Minute, HPA: DefaultHPA,
}

// ScalingResult is one run.
type ScalingResult struct {
	// Good are the end times of good requests, from the run's start.
	Good []time.Duration
	// Replicas is the fleet's size (ready or loading) over time; Events the
	// autoscaler's changes.
	Replicas []CapPoint
	Events   []string
	// Completed, Rejected and Failed count every request of the run; a
	// request whose stream was cut is Failed.
	Completed, Rejected, Failed int
	FailedSamples               []string
	// ByReplica are the end times of the good requests by the replica
	// that served them; Unattributed counts the good requests the
	// balancer could not tell apart (two arriving at one instant).
	ByReplica    map[string][]time.Duration
	Unattributed int
	// Arrived are the arrival times of the good requests, Lost those of
	// the refused and failed ones.
	Arrived, Lost []time.Duration
}

// GoodputBetween is the good requests that ended in [from, to), per second.
func (r ScalingResult) GoodputBetween(from, to time.Duration) float64 {
	n := 0
	for _, g := range r.Good {
		if g >= from && g < to {
			n++
		}
	}
	return float64(n) / (to - from).Seconds()
}

// SizeAt is the fleet's size at t.
func (r ScalingResult) SizeAt(t time.Duration) int {
	n := 0
	for _, p := range r.Replicas {
		if p.At <= t {
			n = p.Cap
		}
	}
	return n
}

// Run runs the scenario in the calling goroutine's time: inside a synctest
// bubble, virtual time.
func (s Scaling) Run(ctx context.Context, seed uint64) (ScalingResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := &ScalingResult{}
	f := &fleet{s: s, start: time.Now(), res: res, ctx: ctx, seed: seed, servedBy: map[int64]string{}}
	if s.SharedState && s.StaticCap == 0 {
		dir, err := os.MkdirTemp("", "kneecap-fleet-state-")
		if err != nil {
			return *res, err
		}
		defer os.RemoveAll(dir)
		f.stateFile = filepath.Join(dir, "state.json")
	}
	// On every return: the autoscaler and the scrapes stop, every replica
	// drains and stops, and nothing started here outlives Run.
	var lbSrv *http.Server
	defer func() {
		cancel()
		if lbSrv != nil {
			lbSrv.Close()
		}
		f.stopAll()
		f.wg.Wait()
	}()
	initial := s.Initial
	if s.Fixed > 0 {
		initial = s.Fixed
	}
	for range initial {
		if err := f.add(0); err != nil {
			return *res, err
		}
	}
	if s.Fixed > 0 && s.JoinAt > 0 {
		if err := f.add(s.JoinAt); err != nil {
			return *res, err
		}
	}
	f.record()
	lbE := newPipeListener("fleet")
	lbSrv = &http.Server{Handler: &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "fleet" },
		Transport:     f,
		FlushInterval: -1,
		ErrorLog:      nil,
	}}
	f.wg.Go(func() { _ = lbSrv.Serve(lbE) })
	if s.Fixed == 0 {
		f.wg.Go(func() { f.autoscale(ctx) })
	}
	f.wg.Go(func() { f.scrape(ctx) })
	if s.Weighted {
		f.wg.Go(func() { f.agent(ctx) })
	}

	total := s.Phases[0] + s.Phases[1] + s.Phases[2]
	rateAt := func(elapsed time.Duration) float64 {
		if elapsed >= s.Phases[0] && elapsed < s.Phases[0]+s.Phases[1] {
			return 2 * s.Rate
		}
		return s.Rate
	}
	tr := lbE.transport()
	defer tr.CloseIdleConnections()
	cfg := bench.Config{
		BaseURL: "http://fleet", Model: s.Profile.Model, Client: &http.Client{Transport: tr},
		Mode: bench.Open, Levels: []float64{s.Rate}, Duration: total,
		Interarrival: func(r *rand.Rand, _ float64, elapsed time.Duration) time.Duration {
			return time.Duration(r.ExpFloat64() / rateAt(elapsed) * float64(time.Second))
		},
		Workload: Scenario{Profile: s.Profile, Workload: s.Workload}.workload(Timing{}),
		Seed:     seed, IgnoreEOS: true, Targets: s.targets(),
	}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		return *res, err
	}
	res.ByReplica = map[string][]time.Duration{}
	for _, rec := range rep.Levels[0].Records {
		switch rec.Outcome {
		case bench.Completed:
			res.Completed++
			if rec.Good {
				res.Good = append(res.Good, rec.End.Sub(f.start))
				res.Arrived = append(res.Arrived, rec.Due.Sub(f.start))
				f.mu.Lock()
				name := f.servedBy[rec.Due.UnixNano()]
				f.mu.Unlock()
				if name == "" {
					res.Unattributed++
				} else {
					res.ByReplica[name] = append(res.ByReplica[name], rec.End.Sub(f.start))
				}
			}
		case bench.Rejected:
			res.Rejected++
			res.Lost = append(res.Lost, rec.Due.Sub(f.start))
		case bench.Failed:
			res.Failed++
			res.Lost = append(res.Lost, rec.Due.Sub(f.start))
			if len(res.FailedSamples) < 5 {
				res.FailedSamples = append(res.FailedSamples, fmt.Sprintf("status %d reason %q: %s", rec.Status, rec.Reason, rec.Err))
			}
		}
	}
	slices.Sort(res.Good)
	slices.Sort(res.Lost)
	slices.Sort(res.Arrived)
	for _, g := range res.ByReplica {
		slices.Sort(g)
	}
	cancel()
	lbSrv.Close()
	f.stopAll()
	f.wg.Wait() // the autoscaler's last writes to res happen before this
	return *res, nil
}
