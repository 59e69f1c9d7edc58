package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/gateway"
)

// frontend is one gateway, built by gateway.New from KNEECAP_* settings as
// `kneecap serve` builds it, serving on 127.0.0.1.
type frontend struct {
	gw             *gateway.Gateway
	traffic, admin string // base URLs
	cancel         context.CancelFunc
	done           chan error
	started        time.Time
	log            *logTail // the gateway's warnings and errors
}

// startGateway runs a gateway in front of upstream with the targets and
// the mode's settings, everything else at its default.
func startGateway(upstream string, m Mode) (*frontend, error) {
	env := append([]string{
		"KNEECAP_UPSTREAM=" + upstream,
		"KNEECAP_SLO_TTFT=" + Targets.TTFT.String(),
		"KNEECAP_SLO_TPOT=" + Targets.TPOT.String(),
	}, m.env()...)
	cfg, err := gateway.ConfigFromEnv(env)
	if err != nil {
		return nil, err
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = tl.Close()
		return nil, err
	}
	tail := &logTail{}
	logger := slog.New(slog.NewTextHandler(tail, &slog.HandlerOptions{Level: slog.LevelWarn}))
	gw, err := gateway.New(cfg, gateway.WithListeners(tl, al), gateway.WithRegistry(prometheus.NewRegistry()), gateway.WithLogger(logger))
	if err != nil {
		_, _ = tl.Close(), al.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &frontend{gw: gw, traffic: "http://" + tl.Addr().String(), admin: "http://" + al.Addr().String(),
		cancel: cancel, done: make(chan error, 1), started: time.Now(), log: tail}
	go func() { f.done <- gw.Run(ctx) }()
	return f, nil
}

// stop shuts the gateway down and waits for Run to return (at most a
// minute: its drain timeout is 30 s).
func (f *frontend) stop() error {
	f.cancel()
	select {
	case err := <-f.done:
		return err
	case <-time.After(time.Minute):
		return errors.New("Run did not return within a minute")
	}
}

// logTail keeps the start of what the gateway logged (its warnings and
// errors: net/http's own, a handler's panic among them, come through the
// same logger), up to logTailBytes, for the report of a run that lost a
// request.
type logTail struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	dropped int
}

const logTailBytes = 16 << 10

func (t *logTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.buf.Len()+len(p) > logTailBytes {
		t.dropped++
		return len(p), nil
	}
	return t.buf.Write(p)
}

// lines returns the lines kept, and a last one counting those dropped.
func (t *logTail) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	if kept := strings.TrimSpace(t.buf.String()); kept != "" {
		out = strings.Split(kept, "\n")
	}
	if t.dropped > 0 {
		out = append(out, fmt.Sprintf("(%d more records not kept)", t.dropped))
	}
	return out
}

// sample is the gateway's limiter at one instant.
type sample struct {
	at      time.Time
	outside admission.OutsideStats
	running int
	limit   int
}

// sampleEvery is how often the gateway's limiter is read during a run.
const sampleEvery = 50 * time.Millisecond

// sampler reads the gateway's limiter every sampleEvery until finish.
type sampler struct {
	stop    context.CancelFunc
	done    chan struct{}
	once    sync.Once
	samples []sample
}

func (f *frontend) startSampling() *sampler {
	ctx, stop := context.WithCancel(context.Background())
	s := &sampler{stop: stop, done: make(chan struct{})}
	read := func() sample {
		l := f.gw.Limiter()
		return sample{at: time.Now(), outside: l.Outside(), running: l.Running(), limit: l.Limit()}
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		s.samples = append(s.samples, read())
		for {
			select {
			case <-ctx.Done():
				s.samples = append(s.samples, read()) // the last, after the window
				return
			case <-t.C:
				s.samples = append(s.samples, read())
			}
		}
	}()
	return s
}

// finish stops sampling and returns every sample, the last taken now.
func (s *sampler) finish() []sample {
	s.once.Do(func() {
		s.stop()
		<-s.done
	})
	return s.samples
}

// check reads /status and /metrics on the admin port and reports what is
// missing from them or disagrees with the limiter's own count of the
// demand outside, read just before and just after; and idle slot time
// beyond the slots there were: most, the highest cap seen.
func (f *frontend) check(most int) []string {
	var problems []string
	fail := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	before := f.gw.Limiter().Outside()
	var st struct {
		Admission struct {
			Outside *struct {
				Away            *int     `json:"away"`
				IdleSlotSeconds *float64 `json:"idle_slot_seconds"`
				Returned        *int64   `json:"returned"`
				RefusedAgain    *int64   `json:"refused_again"`
				GaveUp          *int64   `json:"gave_up"`
			} `json:"outside"`
		} `json:"admission"`
	}
	if err := getJSON(f.admin+"/status", &st); err != nil {
		fail("/status: %v", err)
	}
	metrics, err := getMetrics(f.admin + "/metrics")
	if err != nil {
		fail("/metrics: %v", err)
	}
	after := f.gw.Limiter().Outside()

	within := func(what string, v, lo, hi float64) {
		if !(v >= lo-1e-9 && v <= hi+1e-9) {
			fail("%s = %g, want within the limiter's %g..%g", what, v, lo, hi)
		}
	}
	if o := st.Admission.Outside; o == nil || o.IdleSlotSeconds == nil || o.Returned == nil || o.RefusedAgain == nil || o.GaveUp == nil || o.Away == nil {
		fail("/status has no admission.outside with idle_slot_seconds, returned, refused_again, gave_up and away")
	} else {
		within("/status idle_slot_seconds", *o.IdleSlotSeconds, before.IdleSlotTime.Seconds(), after.IdleSlotTime.Seconds())
		within("/status returned", float64(*o.Returned), float64(before.Returned), float64(after.Returned))
		within("/status refused_again", float64(*o.RefusedAgain), float64(before.RefusedAgain), float64(after.RefusedAgain))
		within("/status gave_up", float64(*o.GaveUp), float64(before.GaveUp), float64(after.GaveUp))
	}
	for _, m := range []struct {
		name   string
		lo, hi float64
	}{
		{"kneecap_admission_idle_slot_seconds_total", before.IdleSlotTime.Seconds(), after.IdleSlotTime.Seconds()},
		{"kneecap_admission_returns_total", float64(before.Returned), float64(after.Returned)},
		{"kneecap_admission_refused_again_total", float64(before.RefusedAgain), float64(after.RefusedAgain)},
		{"kneecap_admission_gave_up_total", float64(before.GaveUp), float64(after.GaveUp)},
	} {
		if v, ok := metrics[m.name]; !ok {
			fail("/metrics has no %s", m.name)
		} else {
			within("/metrics "+m.name, v, m.lo, m.hi)
		}
	}
	for _, l := range f.log.lines() {
		if strings.Contains(l, "http: panic serving") { // net/http's words for a handler's panic
			fail("the gateway logged a panic: %s", l)
		}
	}
	// Idle slot time is slot time: never more than the slots there were
	// over the gateway's life.
	life := time.Since(f.started)
	if slots := max(most, f.gw.Limiter().Limit()); after.IdleSlotTime > time.Duration(slots)*life {
		fail("idle slot time %v in %v of life with at most %d slots", after.IdleSlotTime, life, slots)
	}
	return problems
}

var adminClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

func getJSON(url string, v any) error {
	resp, err := adminClient.Get(url)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// getMetrics reads the samples without labels of a text exposition.
func getMetrics(url string) (map[string]float64, error) {
	resp, err := adminClient.Get(url)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil && !math.IsNaN(v) {
			out[name] = v
		}
	}
	return out, sc.Err()
}
