package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kneecap/kneecap/bench"
	"github.com/kneecap/kneecap/sim"
)

var (
	liveScreenshot = flag.String("live-screenshot", "",
		"TestLivePageInChromium: also run the adaptive gateway in front of the simulator (gb10-bf16, 10x) under the demo's load for -live-screenshot-load, then write a PNG of the live page to this file")
	liveScreenshotLoad = flag.Duration("live-screenshot-load", 2*time.Minute, "how long the load runs before the screenshot")
)

// TestLivePageInChromium opens the admin port's live page in headless
// Chromium (Debian's package; scripts/deps installs it) in front of the
// real simulator under load: the page loads with no console error, draws
// the controller's curve with the cap marker at the level /status
// reports, and follows when the cap changes. Then it feeds the page
// statuses with and without a plateau, and garbled ones, through a
// controller that reports what the test says.
func TestLivePageInChromium(t *testing.T) {
	browser := startChromium(t)
	t.Run("simulator", func(t *testing.T) { livePageBehindSim(t, browser, false) })
	t.Run("plateau", func(t *testing.T) { livePagePlateau(t, browser) })
	if *liveScreenshot != "" {
		t.Run("screenshot", func(t *testing.T) { livePageBehindSim(t, browser, true) })
	}
}

// startChromium starts headless Chromium for the test's tabs, with the
// flags it needs on a machine without a network. A missing chromium skips
// the test, except under CI, where scripts/deps installs it.
func startChromium(t *testing.T) context.Context {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium not found under CI: scripts/deps installs Debian's chromium package")
		}
		t.Skip("chromium not found: install Debian's chromium package (scripts/deps does) to run this test")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		bcancel()
		acancel() // waits for the browser to exit
	})
	// The first action on bctx starts the browser, which then lives as
	// long as bctx (a context with a timeout would end it).
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return bctx
}

// tab is one page of the browser and what its console said.
type tab struct {
	ctx      context.Context
	mu       sync.Mutex
	errs     []string
	watching chan struct{}
}

// openTab opens url in a new tab of browser and records every console
// error and uncaught exception; it closes when the test ends.
func openTab(t *testing.T, browser context.Context, url string) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	tb := &tab{ctx: ctx, watching: make(chan struct{})}
	msgs := chromedp.Console(ctx) // subscribes before the page loads
	go func() {
		defer close(tb.watching)
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				tb.mu.Lock()
				tb.errs = append(tb.errs, fmt.Sprintf("%s (%s:%d)", m.Text, m.URL, m.Line+1))
				tb.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-tb.watching
	})
	nav, ncancel := context.WithTimeout(ctx, 30*time.Second)
	defer ncancel()
	if err := chromedp.Do(nav, chromedp.Navigate(url)); err != nil {
		t.Fatalf("navigate %s: %v", url, err)
	}
	return tb
}

// noConsoleErrors fails the test on any console error so far.
func (tb *tab) noConsoleErrors(t *testing.T) {
	t.Helper()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for _, e := range tb.errs {
		t.Errorf("console: %s", e)
	}
}

// pageState is what the test reads of the page's DOM.
type pageState struct {
	Cap     float64 `json:"cap"`     // the cap marker's data-cap; -1: none
	CapX    float64 `json:"capX"`    // its x
	LevelX  float64 `json:"levelX"`  // x of the curve's point at the cap's level; -1: none
	Points  int     `json:"points"`  // points of the goodput curve
	Levels  int     `json:"levels"`  // levels the curve was given
	Plateau string  `json:"plateau"` // "from-to" of the plateau band; "": none
	Reason  string  `json:"reason"`
	Conn    string  `json:"conn"`
	History int     `json:"history"` // length of the history's cap line
	HTML    string  `json:"html"`
}

const probeJS = `(() => {
  const q = (s) => document.querySelector(s);
  const m = q('#cap-marker'), line = q('#goodput-line'), p = q('#plateau');
  const cap = m ? Number(m.getAttribute('data-cap')) : -1;
  const at = m ? q('#curve circle[data-level="' + cap + '"]') : null;
  const h = q('#h-conc path');
  return {
    cap: cap, capX: m ? Number(m.querySelector('line').getAttribute('x1')) : -1,
    levelX: at ? Number(at.getAttribute('cx')) : -1,
    points: line ? Number(line.getAttribute('data-points')) : 0,
    levels: Number(q('#curve').getAttribute('data-levels') || 0),
    plateau: p ? p.getAttribute('data-from') + '-' + p.getAttribute('data-to') : '',
    reason: q('#reason').textContent, conn: q('#conn').textContent,
    history: h ? (h.getAttribute('d') || '').length : 0,
    html: document.documentElement.outerHTML,
  };
})()`

func (tb *tab) probe(t *testing.T) pageState {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 20*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[pageState](probeJS))
	if err != nil {
		t.Fatalf("reading the page: %v", err)
	}
	return s
}

// eventually polls cond until it holds or the time is up; cond says what
// it saw, for the failure.
func eventually(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last: %s", what, within, saw)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// liveStatus is what the test reads of /status.
type liveStatus struct {
	Limit      int `json:"limit"`
	Controller *struct {
		Cap    int `json:"cap"`
		Levels []struct {
			Running int     `json:"running"`
			Goodput float64 `json:"predicted_goodput_requests_per_second"`
		} `json:"levels"`
	} `json:"controller"`
}

func readStatus(t *testing.T, admin string) liveStatus {
	t.Helper()
	resp, err := http.Get(admin + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st liveStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// livePageBehindSim runs the gateway in front of the simulator under a
// closed-loop load and checks the page against /status. The CI run holds
// a cap of 3 and moves it to 2 through the limiter, as an operator's new static
// cap would; the screenshot run is the adaptive gateway under the demo's
// load (no race detector: time-scaled latencies).
func livePageBehindSim(t *testing.T, browser context.Context, screenshot bool) {
	scale, users, prompt, output := 2.0, 6, 1000, 32
	env := []string{"KNEECAP_MAX_CONCURRENCY=3", "KNEECAP_SLO_TTFT=1s", "KNEECAP_SLO_TPOT=100ms"}
	if screenshot {
		scale, users, prompt, output = 10, 16, sim.SecondWorkload.PromptTokens, sim.SecondWorkload.OutputTokens
		env = []string{"KNEECAP_SLO_TTFT=100ms", "KNEECAP_SLO_TPOT=10ms"} // 1 s and 100 ms in the engine's time
	}
	profile, err := sim.LookupProfile("gb10-bf16")
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	engine, err := sim.New(sim.Config{Profile: profile, TimeScale: scale, Seed: 1, Logger: quiet, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	var bg sync.WaitGroup
	engCtx, engStop := context.WithCancel(context.Background())
	bg.Go(func() { _ = engine.Run(engCtx) })
	t.Cleanup(func() { // after the gateway's and its engine server's (start)
		engStop()
		bg.Wait()
	})
	cfg, err := ConfigFromEnv(append([]string{"KNEECAP_UPSTREAM=http://engine"}, env...)) // start serves the engine
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, engine.Handler(), cfg, withOwnController(), WithLogger(quiet))
	g, admin := h.g, h.admin

	loadCtx, loadStop := context.WithCancel(context.Background())
	var load sync.WaitGroup
	load.Go(func() {
		_, err := bench.Run(loadCtx, bench.Config{
			BaseURL: h.traffic, Levels: []float64{float64(users)}, Duration: time.Hour,
			Workload:  bench.Synthetic{InputLen: bench.Dist{Mean: prompt}, OutputLen: bench.Dist{Mean: output}},
			IgnoreEOS: true, Seed: 1, RetryAfterMax: time.Duration(float64(2*time.Second) / scale),
		})
		if err != nil && !errors.Is(err, context.Canceled) && loadCtx.Err() == nil {
			t.Errorf("load: %v", err)
		}
	})
	defer func() { // before the gateway and the engine stop (in t.Cleanup)
		loadStop()
		load.Wait()
	}()

	tb := openTab(t, browser, admin+"/")
	// The curve is drawn with the cap marker on the curve's point at the
	// level /status reports.
	atStatusCap := func(want func(int) bool) func() (bool, string) {
		return func() (bool, string) {
			before := readStatus(t, admin)
			p := tb.probe(t)
			after := readStatus(t, admin)
			ok := before.Limit == after.Limit && p.Cap == float64(after.Limit) && want(after.Limit) &&
				p.Points >= 2 && p.LevelX >= 0 && p.CapX == p.LevelX && p.History > 0
			return ok, fmt.Sprintf("/status limit %d then %d; page: cap %v at x %v, the level's point at x %v, %d points of %d levels, history line %d, %q",
				before.Limit, after.Limit, p.Cap, p.CapX, p.LevelX, p.Points, p.Levels, p.History, p.Conn)
		}
	}
	eventually(t, 90*time.Second, "the curve with the cap marker at /status's cap", atStatusCap(func(int) bool { return true }))
	if !screenshot {
		if st := readStatus(t, admin); st.Limit != 3 || st.Controller == nil || len(st.Controller.Levels) < 2 {
			t.Fatalf("/status: limit %d, controller %+v", st.Limit, st.Controller)
		}
		// Lower, so that the new cap's level is on the curve (a fixed
		// cap's levels end at it).
		g.Limiter().SetLimit(2)
		eventually(t, 60*time.Second, "the page following the cap to 2", atStatusCap(func(n int) bool { return n == 2 }))
	} else {
		for end := time.Now().Add(*liveScreenshotLoad); time.Now().Before(end); time.Sleep(time.Second) {
		}
		eventually(t, 30*time.Second, "the page at /status's cap after the load", atStatusCap(func(int) bool { return true }))
		ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
		defer cancel()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*liveScreenshot, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", *liveScreenshot, len(png))
	}
	tb.noConsoleErrors(t)
}

// withOwnController undoes start's WithStaticCap: the gateway's own
// controller sets the cap, as in kneecap serve.
func withOwnController() Option { return func(o *options) { o.static = false } }

// scriptedStatus is a controller that moves nothing and reports in
// /status whatever the test stores.
type scriptedStatus struct {
	mu sync.Mutex
	v  any
}

func (s *scriptedStatus) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (s *scriptedStatus) set(v any)                     { s.mu.Lock(); s.v = v; s.mu.Unlock() }
func (s *scriptedStatus) Status() any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.v
}

// livePagePlateau feeds the page controller states with a plateau, without
// one and garbled, through a URL whose query string and fragment carry
// markup: the band is drawn only for a well-formed plateau, nothing
// throws, and nothing of the URL reaches the page.
func livePagePlateau(t *testing.T, browser context.Context) {
	ctl := &scriptedStatus{}
	ctl.set(map[string]any{})
	h := start(t, http.NotFoundHandler(), Config{MaxConcurrency: 4},
		WithCapControl(func(Host) (CapControl, error) { return ctl, nil }))
	var levels []map[string]any
	for n := 1; n <= 8; n++ {
		levels = append(levels, map[string]any{
			"running": n, "predicted_goodput_requests_per_second": 0.1 * float64(min(n, 5)), "predicted_attainment": 1 - 0.08*float64(n),
			"meets_targets": n <= 4, "predicted_tpot_seconds": 0.02 * float64(n), "dwell_seconds": 30 * float64(n%2),
			"measured_goodput_requests_per_second": 0.1 * float64(n), "measured_attainment": 0.9, "measured_requests": 5,
		})
	}
	tb := openTab(t, browser, h.admin+"/?x=%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E&since=%3Cb%3E#%3Cscript%3Ealert(2)%3C/script%3E")
	for i, tc := range []struct {
		name    string
		plateau any // absent when nil
		want    string
	}{
		{"plateau", map[string]any{"from": 3, "to": 5, "noise": 0.01, "left_edge": 3}, "3-5"},
		{"no plateau", nil, ""},
		{"one level", map[string]any{"from": 4, "to": 4}, "4-4"},
		{"garbled", map[string]any{"from": "3", "to": nil, "noise": "x"}, ""},
		{"backwards", map[string]any{"from": 6, "to": 2}, ""},
		{"a string", "wide", ""},
		{"an array", []any{3, 5}, ""},
		{"huge", map[string]any{"from": 1, "to": 1e300}, ""},
	} {
		reason := fmt.Sprintf("case %d: %s <b>not markup</b>", i, tc.name)
		st := map[string]any{"mode": "test", "cap": 4, "reason": reason, "percentile": 0.9, "levels": levels}
		if tc.plateau != nil {
			st["plateau"] = tc.plateau
		}
		ctl.set(st)
		eventually(t, 30*time.Second, tc.name, func() (bool, string) {
			p := tb.probe(t)
			return strings.Contains(p.Reason, reason) && p.Plateau == tc.want && p.Points == 8 && p.Cap == 4,
				fmt.Sprintf("reason %q, plateau %q (want %q), %d points, cap %v", p.Reason, p.Plateau, tc.want, p.Points, p.Cap)
		})
	}
	// Controllers of other shapes: garbled levels, none at all.
	for i, st := range []any{
		map[string]any{"reason": "garbled levels", "levels": []any{1, "x", nil, map[string]any{"running": "2"}, map[string]any{"running": -1}}, "tokens": "none"},
		42,
		nil,
	} {
		ctl.set(st)
		eventually(t, 30*time.Second, fmt.Sprintf("controller shape %d", i), func() (bool, string) {
			p := tb.probe(t)
			return p.Levels == 0 && p.Points == 0 && p.Cap == 4 && p.Plateau == "" && (i == 0) == strings.Contains(p.Reason, "garbled levels"),
				fmt.Sprintf("%d levels, %d points, cap %v, reason %q", p.Levels, p.Points, p.Cap, p.Reason)
		})
	}
	if p := tb.probe(t); strings.Contains(p.HTML, "onerror") || strings.Contains(p.HTML, "alert(") || strings.Contains(p.HTML, "<b>not markup") {
		t.Errorf("the URL or a status string reached the page as markup: %.2000s", p.HTML)
	}
	tb.noConsoleErrors(t)
}
