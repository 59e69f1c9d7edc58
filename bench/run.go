package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Report is the result of a run: one Level per Config.Levels entry that ran.
type Report struct {
	Mode       Mode
	Endpoint   Endpoint
	Model      string
	BaseURL    string
	Targets    Targets
	Burstiness float64 // open loop; 1 is Poisson
	Constant   bool
	Workload   string // a description of the workload, for the report
	// MinAttainment is the share of good requests a level needs to have met
	// the targets (the knee line).
	MinAttainment float64
	Levels        []Level
}

// Level is one load level's result.
type Level struct {
	Index int
	Value float64 // concurrency or rate
	// Start is when the level's load started; WindowStart and WindowEnd
	// bound its measured window (after warm-up).
	Start, WindowStart, WindowEnd time.Time
	// Records holds every request of the level in the order they ended,
	// warm-up and unfinished ones included (Measured false).
	Records []Record
	// Caps are the gateway's cap, read from Config.CapURL about once a
	// second while the level ran (nil without it).
	Caps    []CapSample
	Summary Summary
}

// Run runs every level of cfg in order and returns their results. It
// returns early, with the levels done so far and the cut level, when ctx
// ends or Config.Timeout passes (the error then wraps ErrTimeout).
func Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.validate(); err != nil {
		return Report{}, err
	}
	if cfg.Workload == nil {
		cfg.Workload = Synthetic{InputLen: Dist{Mean: 128}, OutputLen: Dist{Mean: 128}}
	}
	if cfg.MinAttainment <= 0 {
		cfg.MinAttainment = 0.9
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 10000
	}
	client := cfg.Client
	if client == nil {
		tr := defaultTransport(&cfg)
		defer tr.CloseIdleConnections()
		client = &http.Client{Transport: tr}
	}
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, cfg.Timeout, ErrTimeout)
		defer cancel()
	}
	if cfg.Model == "" {
		cfg.Model = DiscoverModel(ctx, client, cfg.BaseURL)
	}
	rep := Report{
		Mode: cfg.Mode, Endpoint: cfg.Endpoint, Model: cfg.Model, BaseURL: cfg.BaseURL,
		Targets: cfg.Targets, Burstiness: cfg.Burstiness, Constant: cfg.Constant,
		Workload: describe(cfg.Workload), MinAttainment: cfg.MinAttainment,
	}
	if rep.Burstiness == 0 {
		rep.Burstiness = 1
	}
	url := strings.TrimRight(cfg.BaseURL, "/") + cfg.Endpoint.path()
	for i, v := range cfg.Levels {
		r := &levelRun{cfg: &cfg, client: client, url: url, index: i, value: v}
		lv := r.run(ctx)
		rep.Levels = append(rep.Levels, lv)
		if ctx.Err() != nil {
			if errors.Is(context.Cause(ctx), ErrTimeout) {
				return rep, fmt.Errorf("%w after %d of %d levels", ErrTimeout, i+1, len(cfg.Levels))
			}
			return rep, ctx.Err()
		}
	}
	return rep, nil
}

func defaultTransport(cfg *Config) *http.Transport {
	most := 0.0
	for _, l := range cfg.Levels {
		most = max(most, l)
	}
	conns := int(most) + 1
	if cfg.Mode == Open {
		conns = min(cfg.MaxInFlight, 1024)
	}
	return &http.Transport{
		Proxy:               nil, // only the given URL is contacted
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
}

// DiscoverModel returns the first model listed by GET baseURL/v1/models, or
// "" when there is none or the call fails.
func DiscoverModel(ctx context.Context, client *http.Client, baseURL string) string {
	id, _ := discover(ctx, client, baseURL)
	return id
}

// DiscoverContext returns the context length in tokens of the first model
// listed by GET baseURL/v1/models (its max_model_len, as vLLM and the
// simulator publish it), or 0 when it is not given or the call fails.
func DiscoverContext(ctx context.Context, client *http.Client, baseURL string) int {
	_, n := discover(ctx, client, baseURL)
	return n
}

func discover(ctx context.Context, client *http.Client, baseURL string) (string, int) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(baseURL, "/")+"/v1/models", nil)
	if err != nil {
		return "", 0
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", 0
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&list) != nil || len(list.Data) == 0 {
		return "", 0
	}
	return list.Data[0].ID, max(list.Data[0].MaxModelLen, 0)
}

func describe(w Workload) string {
	switch w := w.(type) {
	case Synthetic:
		return fmt.Sprintf("synthetic input %s words, output %s tokens", w.InputLen, w.OutputLen)
	case *PromptFile:
		return fmt.Sprintf("prompt file (%d prompts)", len(w.Prompts))
	}
	return "custom"
}

// levelRun is the state of one level while it runs.
type levelRun struct {
	cfg    *Config
	client *http.Client
	url    string
	index  int
	value  float64

	mu          sync.Mutex
	start       time.Time
	measuring   bool // the window is open
	closed      bool // the window has ended
	windowStart time.Time
	windowEnd   time.Time
	records     []Record
	caps        []CapSample
	done, good  int           // measured requests, and good ones
	full        chan struct{} // closed window by request count
}

// add records one ended request.
func (r *levelRun) add(rec Record) {
	rec.Level = r.index
	if rec.Outcome != Unfinished {
		rec.Judge(merge(r.cfg.Targets, rec.Targets))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec.Measured = r.measuring && !r.closed && rec.Outcome != Unfinished
	if rec.Measured {
		r.done++
		if rec.Good {
			r.good++
		}
		if r.cfg.Requests > 0 && r.done >= r.cfg.Requests {
			r.closeWindowLocked(rec.End)
		}
	}
	r.records = append(r.records, rec)
}

// merge returns base with every bound that own sets replaced.
func merge(base, own Targets) Targets {
	if own.TTFT > 0 {
		base.TTFT = own.TTFT
	}
	if own.TPOT > 0 {
		base.TPOT = own.TPOT
	}
	if own.E2E > 0 {
		base.E2E = own.E2E
	}
	return base
}

func (r *levelRun) closeWindowLocked(at time.Time) {
	if r.closed {
		return
	}
	r.closed = true
	r.windowEnd = at
	close(r.full)
}

// run drives the level: warm-up, the measured window, then cancels what is
// still in flight and waits for every goroutine it started.
func (r *levelRun) run(ctx context.Context) Level {
	r.full = make(chan struct{})
	r.start = time.Now()
	if r.cfg.Warmup <= 0 {
		// Open the window before any load starts: a request that ends before
		// supervise runs must still be measured.
		r.measuring, r.windowStart = true, r.start
	}
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if r.cfg.Mode == Closed {
		for u := range int(r.value) {
			wg.Go(func() { r.user(lctx, u) })
		}
	} else {
		wg.Go(func() { r.dispatch(lctx, &wg) })
	}
	if r.cfg.CapURL != "" {
		wg.Go(func() { r.pollCap(lctx) })
	}
	r.supervise(ctx)
	cancel()
	wg.Wait()
	lv := Level{Index: r.index, Value: r.value, Start: r.start, WindowStart: r.windowStart, WindowEnd: r.windowEnd, Records: r.records, Caps: r.caps}
	lv.Summary = lv.summarize()
	r.progress("done")
	return lv
}

// supervise opens and closes the measured window and reports progress.
func (r *levelRun) supervise(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	open := func() {
		r.mu.Lock()
		r.measuring, r.windowStart = true, time.Now()
		r.mu.Unlock()
	}
	if r.cfg.Warmup > 0 {
		warm := time.NewTimer(r.cfg.Warmup)
		defer warm.Stop()
	warmup:
		for {
			select {
			case <-warm.C:
				open()
				break warmup
			case <-tick.C:
				r.progress("warmup")
			case <-ctx.Done():
				open()
				r.closeWindow()
				return
			}
		}
	}
	var end <-chan time.Time
	if r.cfg.Duration > 0 {
		t := time.NewTimer(r.cfg.Duration)
		defer t.Stop()
		end = t.C
	}
	for {
		select {
		case <-end:
			r.closeWindow()
			return
		case <-r.full:
			return
		case <-tick.C:
			r.progress("measure")
		case <-ctx.Done():
			r.closeWindow()
			return
		}
	}
}

func (r *levelRun) closeWindow() {
	r.mu.Lock()
	r.closeWindowLocked(time.Now())
	r.mu.Unlock()
}

func (r *levelRun) progress(phase string) {
	if r.cfg.Progress == nil {
		return
	}
	r.mu.Lock()
	p := Progress{
		Level: r.index, Levels: len(r.cfg.Levels), Value: r.value, Phase: phase,
		Elapsed: time.Since(r.start), Done: r.done, Total: r.cfg.Requests,
		Window: r.cfg.Duration, Good: r.good,
	}
	if r.measuring {
		p.Elapsed = time.Since(r.windowStart)
	}
	r.mu.Unlock()
	r.cfg.Progress(p)
}

// rng returns the seeded source of one caller: the dispatcher (user -1) or
// a closed-loop user, so a run does not depend on goroutine scheduling.
func (r *levelRun) rng(user int) *rand.Rand {
	return rand.New(rand.NewPCG(r.cfg.Seed, uint64(r.index)<<32|uint64(uint32(user+1))))
}
