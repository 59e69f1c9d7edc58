package faults

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kneecap/kneecap/enginemetrics"
	"github.com/kneecap/kneecap/gateway"
	"github.com/kneecap/kneecap/testengine"
)

// TestEngineMetricsFaults starts each engine with its metrics endpoint
// failing for its whole life (missing, hanging 30 s, 50 MiB of garbage,
// NaN values; and not failing, for comparison) and runs traffic through the
// gateway while it scrapes: every stream completes as fast as without the
// scrape, the failure shows in /status and the metrics, the gateway writes
// exactly one log line about it, and nothing is left behind (settle;
// goleak when the package ends).
func TestEngineMetricsFaults(t *testing.T) {
	cases := []struct {
		fault string
		state enginemetrics.State
	}{
		{"", enginemetrics.StateOK},
		{testengine.MetricsMissing, enginemetrics.StateMissing},
		{testengine.MetricsHang, enginemetrics.StateSlow},
		{testengine.MetricsHuge, enginemetrics.StateTooLarge},
		{testengine.MetricsNaN, enginemetrics.StateInvalid},
	}
	for _, kind := range testengine.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			for _, tc := range cases {
				name := tc.fault
				if name == "" {
					name = "none"
				}
				t.Run(name, func(t *testing.T) { runMetricsFault(t, kind, tc.fault, tc.state) })
			}
		})
	}
}

// The scrape's bounds in these cases: every 2 s, cut at 1.5 s, so that a
// loaded machine reads the 4 MiB a garbage body may cost within the
// timeout, and three scrapes fit in about 4 s.
const metricsInterval = 2 * time.Second

func runMetricsFault(t *testing.T, kind testengine.Kind, fault string, want enginemetrics.State) {
	var opts []testengine.Option
	if fault != "" {
		opts = append(opts, testengine.WithMetricsFault(fault))
	}
	eng := testengine.Start(t, kind, opts...)
	logs := &lockedBuffer{}
	h := startGatewayWith(t, eng, []gateway.Option{gateway.WithLogger(slog.New(slog.NewTextHandler(logs, nil)))},
		append([]string{"KNEECAP_ENGINE_METRICS_INTERVAL=" + metricsInterval.String()}, faultEnv...)...)
	scraper := h.g.EngineMetrics()

	// Four clients send short streams back to back until three scrapes
	// have ended (the first at start, then one every 2 s).
	c := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(c.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var slowest time.Duration
	sent := 0
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil && scraper.Status().Scrapes < 3 {
				start := time.Now()
				s, err := request(ctx, c, h.traffic, true, 8, testengine.HeaderGap, "10")
				took := time.Since(start)
				if err != nil || !s.complete {
					t.Errorf("stream while scraping: %v %s", err, s)
					return
				}
				mu.Lock()
				sent++
				slowest = max(slowest, took)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	st := scraper.Status()
	if st.Scrapes < 3 {
		t.Fatalf("%d scrapes in 20 s: %+v", st.Scrapes, st)
	}
	// A stream of 8 chunks 10 ms apart: well under a second on an idle
	// machine, and never the 30 s of a hanging scrape (the bound is
	// generous for a loaded one; streams and scrapes share nothing).
	if slowest > 5*time.Second {
		t.Errorf("the slowest of %d streams took %v", sent, slowest)
	}
	if st.State != want {
		t.Errorf("state %s (%s), want %s", st.State, st.LastError, want)
	}
	r, fresh := scraper.Latest()
	wantEngine := map[testengine.Kind]string{testengine.Uvicorn: enginemetrics.EngineVLLM, testengine.HTTPLib: enginemetrics.EngineLlamaCpp}[kind]
	if want == enginemetrics.StateOK {
		if !fresh || r.Engine != wantEngine || !(r.KVUsage >= 0) {
			t.Errorf("reading %+v, fresh %v", r, fresh)
		}
	} else {
		if fresh || st.Failures != st.Scrapes {
			t.Errorf("a reading from a failing endpoint: %+v %v (%+v)", r, fresh, st)
		}
		if n := h.counter(t, "kneecap_engine_scrape_errors_total", "reason", string(want)); n != float64(st.Scrapes) {
			t.Errorf("errors{reason=%s} = %v after %d scrapes", want, n, st.Scrapes)
		}
	}
	// A hang is cut at the timeout: the scrapes took about 1.5 s each at
	// most, never the hang's 30 s.
	if sum, n := h.histogram(t, "kneecap_engine_scrape_duration_seconds"); n < 3 || sum/float64(n) > 2 {
		t.Errorf("%d scrapes took %v s on average", n, sum/float64(n))
	}
	var lines []string
	for _, l := range logs.lines() {
		if strings.Contains(l, "engine metrics") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "state="+string(want)) {
		t.Errorf("log lines about the engine's metrics (want one, state=%s):\n%s", want, strings.Join(lines, "\n"))
	}
	settle(t, h, eng)
	h.stop(t)
}

// histogram reads a histogram of the gateway: its sum and count.
func (h *gw) histogram(t *testing.T, name string) (float64, uint64) {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			hist := mf.GetMetric()[0].GetHistogram()
			return hist.GetSampleSum(), hist.GetSampleCount()
		}
	}
	t.Fatalf("no histogram %s", name)
	return 0, 0
}

// lockedBuffer is a log destination for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(l.b.String(), "\n")
}
