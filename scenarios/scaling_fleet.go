package scenarios

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/kneecap/kneecap/gateway"
	"github.com/kneecap/kneecap/proxy"
	"github.com/kneecap/kneecap/sim"
	"github.com/prometheus/client_golang/prometheus"
)

// member is one replica of the fleet.
type member struct {
	name    string
	gw      *gateway.Gateway
	tr      *http.Transport
	stop    context.CancelFunc // drains the gateway, then stops the engine
	ready   bool               // in the balancer
	loading bool
	flight  int // requests the balancer has in flight on it
	weight  int // its cap, as the agent last reported it (Weighted)
	samples []float64
}

// fleet is the replicas, the balancer's view of them, and the metric
// history, under one mutex.
type fleet struct {
	mu      sync.Mutex
	s       Scaling
	members []*member
	next    int
	start   time.Time
	res     *ScalingResult
	wg      sync.WaitGroup
	ctx     context.Context
	seed    uint64
	// servedBy is the replica that answered each request, by the instant
	// it arrived (in virtual time the instant it was due); "" when two
	// arrived at one instant.
	servedBy map[int64]string
	// stateFile is the fleet's shared KNEECAP_STATE_FILE (Scaling.SharedState).
	stateFile string
}

// stopAll drains every replica still in the fleet (a loading one never
// starts once the run's context has ended).
func (f *fleet) stopAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.members {
		if m.stop != nil {
			m.stop()
		}
	}
}

// add starts a replica: after delay (its model loading) a cold engine and
// a cold gateway, then it joins the balancer.
func (f *fleet) add(delay time.Duration) error {
	f.mu.Lock()
	f.next++
	m := &member{name: fmt.Sprintf("replica-%d", f.next), loading: true}
	f.members = append(f.members, m)
	seed := f.seed*100 + uint64(f.next)
	factor := 0.0
	if f.next <= len(f.s.StepFactors) {
		factor = f.s.StepFactors[f.next-1]
	}
	f.mu.Unlock()
	start := func() error {
		quiet := slog.New(slog.DiscardHandler)
		eng, err := sim.New(sim.Config{Profile: f.s.Profile, Seed: seed, Registry: prometheus.NewRegistry(), Logger: quiet, Stagger: eventSpacing})
		if err != nil {
			return err
		}
		if factor > 0 {
			eng.SetStepFactor(factor)
		}
		engE, _ := newEndpoint(m.name+"-engine", false)
		gwE, _ := newEndpoint(m.name, false)
		adminE, _ := newEndpoint(m.name+"-admin", false)
		tg := f.s.targets()
		upstream := "http://" + engE.host
		if f.stateFile != "" {
			// A sidecar's engine: one URL on every replica (the
			// replica's own transport dials its own engine).
			upstream = "http://127.0.0.1:8000"
		}
		env := []string{
			"KNEECAP_UPSTREAM=" + upstream,
			"KNEECAP_SLO_TTFT=" + tg.TTFT.String(), "KNEECAP_SLO_TPOT=" + tg.TPOT.String(),
			"KNEECAP_DRAIN_TIMEOUT=" + f.s.HPA.DrainGrace.String(),
		}
		if f.stateFile != "" {
			env = append(env, "KNEECAP_STATE_FILE="+f.stateFile)
		}
		if f.s.StaticCap > 0 {
			env = append(env, "KNEECAP_MAX_CONCURRENCY="+strconv.Itoa(f.s.StaticCap), "KNEECAP_TOKEN_BUDGET=false")
		}
		cfg, err := gateway.ConfigFromEnv(env)
		if err != nil {
			return err
		}
		gw, err := gateway.New(cfg, gateway.WithTransport(engE.tr), gateway.WithLogger(quiet), gateway.WithListeners(gwE.ln, adminE.ln))
		if err != nil {
			return err
		}
		engSrv := &http.Server{Handler: eng.Handler()}
		engCtx, stopEngine := context.WithCancel(context.Background())
		gwCtx, stopGW := context.WithCancel(context.Background())
		f.wg.Go(func() { _ = engSrv.Serve(engE.ln) })
		f.wg.Go(func() { _ = eng.Run(engCtx) })
		gwDone := make(chan struct{})
		f.wg.Go(func() {
			defer close(gwDone)
			time.Sleep(eventSpacing / 2)
			_ = gw.Run(gwCtx)
		})
		f.wg.Go(func() {
			<-gwDone // the gateway drained: its streams ended
			stopEngine()
			_ = engSrv.Close()
			gwE.tr.CloseIdleConnections()
			engE.tr.CloseIdleConnections()
		})
		f.mu.Lock()
		m.gw, m.tr, m.stop, m.ready, m.loading = gw, gwE.tr, stopGW, true, false
		if f.ctx.Err() != nil {
			stopGW() // the run ended while this one started: stopAll missed it
		}
		f.mu.Unlock()
		return nil
	}
	if delay <= 0 {
		return start()
	}
	f.wg.Go(func() {
		select {
		case <-time.After(delay):
		case <-f.ctx.Done():
			return
		}
		if f.stateFile != "" {
			f.mu.Lock()
			first := f.members[0].gw
			f.mu.Unlock()
			if err := first.SaveState(); err != nil {
				panic(err) // the fleet's replicas write the same file every 30 s
			}
		}
		if err := start(); err != nil {
			panic(err) // the same settings started the first replicas
		}
	})
	return nil
}

// removeLocked takes the newest ready replica out of the balancer and
// drains it, as a ReplicaSet scaling down removes its newest pod and
// kneecap drains on SIGTERM (queued requests get 503 draining, which the
// balancer retries; running streams finish).
func (f *fleet) removeLocked() {
	for i := len(f.members) - 1; i >= 0; i-- {
		m := f.members[i]
		if m.ready {
			m.ready = false
			f.members = append(f.members[:i], f.members[i+1:]...)
			stop := m.stop
			f.wg.Go(func() { stop() })
			return
		}
	}
}

// record notes the fleet's size.
func (f *fleet) record() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.res.Replicas = append(f.res.Replicas, CapPoint{At: time.Since(f.start), Cap: len(f.members)})
}

// RoundTrip is the balancer: the ready replica with the fewest requests in
// flight (the first of equals), and on a refusal (429 or 503 with
// X-Kneecap-Reason, before anything reached an engine) or a failed
// connection the next one not tried yet, up to three tries; the last
// refusal goes to the client.
func (f *fleet) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
	}
	arrived := time.Now().UnixNano()
	tried := map[*member]bool{}
	var last *http.Response
	var lastErr error = fmt.Errorf("no replica ready")
	tries := f.s.Tries
	if tries <= 0 {
		tries = 3
	}
	for try := 0; try < tries; try++ {
		f.mu.Lock()
		var m *member
		for _, c := range f.members {
			if c.ready && !tried[c] && (m == nil || f.less(c, m)) {
				m = c
			}
		}
		if m != nil {
			m.flight++
		}
		f.mu.Unlock()
		if m == nil {
			break
		}
		tried[m] = true
		out := req.Clone(req.Context())
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.ContentLength = int64(len(body))
		out.URL.Host = m.name
		resp, err := m.tr.RoundTrip(out)
		if err != nil {
			f.done(m)
			lastErr = err
			continue
		}
		if (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) && resp.Header.Get(proxy.HeaderReason) != "" {
			if last != nil {
				last.Body.Close()
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(b))
			last = resp
			f.done(m)
			continue
		}
		resp.Body = &flightBody{ReadCloser: resp.Body, release: func() { f.done(m) }}
		f.mu.Lock()
		if _, twice := f.servedBy[arrived]; twice {
			f.servedBy[arrived] = ""
		} else {
			f.servedBy[arrived] = m.name
		}
		f.mu.Unlock()
		if last != nil {
			last.Body.Close()
		}
		return resp, nil
	}
	if last != nil {
		return last, nil
	}
	return nil, lastErr
}

// less reports whether the balancer prefers a to b: fewer requests in
// flight, or with Weighted fewer per unit of weight, (flight+1)/weight as
// HAProxy's leastconn orders servers.
func (f *fleet) less(a, b *member) bool {
	if !f.s.Weighted {
		return a.flight < b.flight
	}
	wa, wb := max(a.weight, 1), max(b.weight, 1)
	return (a.flight+1)*wb < (b.flight+1)*wa
}

// agent reads every ready replica's cap once a second, as HAProxy's
// agent-check (agent-inter 1s) reads kneecap's "ready up <cap>%".
func (f *fleet) agent(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.mu.Lock()
			for _, m := range f.members {
				if m.gw != nil {
					m.weight = m.gw.Limiter().Limit()
				}
			}
			f.mu.Unlock()
		}
	}
}

func (f *fleet) done(m *member) {
	f.mu.Lock()
	m.flight--
	f.mu.Unlock()
}

// flightBody releases the balancer's count of a request when its response
// body is closed.
type flightBody struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (b *flightBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}

// scrape samples every ready replica's demand ratio as Prometheus would,
// every Scrape; a loading replica's is 0.
func (f *fleet) scrape(ctx context.Context) {
	t := time.NewTicker(f.s.HPA.Scrape)
	defer t.Stop()
	keep := int(f.s.HPA.MetricWindow / f.s.HPA.Scrape)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			f.mu.Lock()
			for _, m := range f.members {
				v := 0.0
				if m.gw != nil {
					v = gateway.DemandRatio(m.gw.Limiter().State(), m.gw.Window().Stats(now))
				}
				m.samples = append(m.samples, v)
				if len(m.samples) > keep {
					m.samples = m.samples[len(m.samples)-keep:]
				}
			}
			f.mu.Unlock()
		}
	}
}

// autoscale is the HPA's loop (see HPA).
func (f *fleet) autoscale(ctx context.Context) {
	h := f.s.HPA
	type rec struct {
		at time.Time
		n  int
	}
	// The HPA has run over this fleet before: its history holds the
	// initial size, so that the cold start's first readings cannot scale
	// it in before the scale-down window has passed.
	recs := []rec{{time.Now(), f.s.Initial}}
	type event struct {
		at time.Time
		d  int
	}
	var events []event
	// The first decision waits for a full metric window, as an HPA
	// created over a running fleet reads the adapter's averages.
	select {
	case <-ctx.Done():
		return
	case <-time.After(h.MetricWindow):
	}
	t := time.NewTicker(h.Sync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			f.mu.Lock()
			cur := len(f.members)
			sum := 0.0
			for _, m := range f.members {
				if len(m.samples) > 0 {
					s := 0.0
					for _, v := range m.samples {
						s += v
					}
					sum += s / float64(len(m.samples))
				}
			}
			avg := sum / float64(cur)
			desired := cur
			if u := avg / h.Target; math.Abs(u-1) > h.Tolerance {
				desired = int(math.Ceil(float64(cur) * u))
			}
			desired = max(f.s.Min, min(desired, f.s.Max))
			// Stabilization (k8s stabilizeRecommendationWithBehaviors).
			up, down := desired, desired
			kept := recs[:0]
			for _, r := range recs {
				if now.Sub(r.at) <= max(h.UpWindow, h.DownWindow) {
					kept = append(kept, r)
				}
				if now.Sub(r.at) <= h.UpWindow {
					up = min(up, r.n)
				}
				if now.Sub(r.at) <= h.DownWindow {
					down = max(down, r.n)
				}
			}
			recs = append(kept, rec{now, desired})
			next := cur
			next = max(next, up)
			next = min(next, down)
			// Policies: at most UpPods added per UpPeriod, DownPods removed
			// per DownPeriod.
			added, removed := 0, 0
			for _, e := range events {
				if e.d > 0 && now.Sub(e.at) < h.UpPeriod {
					added += e.d
				}
				if e.d < 0 && now.Sub(e.at) < h.DownPeriod {
					removed -= e.d
				}
			}
			next = min(next, cur-added+h.UpPods)
			next = max(next, cur+removed-h.DownPods)
			f.mu.Unlock()
			if next == cur {
				continue
			}
			events = append(events, event{now, next - cur})
			f.res.Events = append(f.res.Events, fmt.Sprintf("%v: %d -> %d (average demand ratio %.2f)", now.Sub(f.start).Round(time.Second), cur, next, avg))
			for range next - cur {
				_ = f.add(f.s.LoadDelay)
			}
			if next < cur {
				f.mu.Lock()
				for range cur - next {
					f.removeLocked()
				}
				f.mu.Unlock()
			}
			f.record()
		}
	}
}
