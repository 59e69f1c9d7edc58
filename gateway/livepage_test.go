package gateway

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kneecap/kneecap/proxy/proxytest"
	"github.com/kneecap/kneecap/slo"
)

// serveAdmin serves one request from the gateway's admin handler.
func serveAdmin(g *Gateway, method, target string, header http.Header) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(method, target, nil)
	for k, v := range header {
		r.Header[k] = v
	}
	g.AdminHandler().ServeHTTP(rec, r)
	return rec
}

// The page and its files are served on the admin port for GET and HEAD,
// with the security headers, the same bytes whatever the query string;
// other methods are 405 and other paths still 404.
func TestLivePageRoutes(t *testing.T) {
	g := newFromEnv(t, []string{"KNEECAP_UPSTREAM=http://127.0.0.1:1"})
	page := serveAdmin(g, http.MethodGet, "/", nil)
	if page.Code != 200 || page.Header().Get("Content-Type") != "text/html; charset=utf-8" ||
		!strings.Contains(page.Body.String(), `src="live/page.js"`) {
		t.Fatalf("GET /: %d %q %.200s", page.Code, page.Header().Get("Content-Type"), page.Body.String())
	}
	total := 0
	for _, tc := range []struct{ path, ctype string }{
		{"/", "text/html; charset=utf-8"},
		{"/live/page.js", "text/javascript; charset=utf-8"},
		{"/live/page.css", "text/css; charset=utf-8"},
		{"/live/icon.svg", "image/svg+xml"},
		{"/live/history", "application/json"},
	} {
		rec := serveAdmin(g, http.MethodGet, tc.path, nil)
		h := rec.Header()
		if rec.Code != 200 || h.Get("Content-Type") != tc.ctype {
			t.Errorf("GET %s: %d %q", tc.path, rec.Code, h.Get("Content-Type"))
		}
		total += rec.Body.Len()
		csp := h.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self';") ||
			strings.Contains(csp, "unsafe") || h.Get("X-Content-Type-Options") != "nosniff" ||
			h.Get("X-Frame-Options") != "DENY" || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("GET %s: headers %v", tc.path, h)
		}
		head := serveAdmin(g, http.MethodHead, tc.path, nil)
		if head.Code != 200 || head.Body.Len() != 0 || head.Header().Get("Content-Length") == "" {
			t.Errorf("HEAD %s: %d, %d body bytes, Content-Length %q", tc.path, head.Code, head.Body.Len(), head.Header().Get("Content-Length"))
		}
		for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			if rec := serveAdmin(g, m, tc.path, nil); rec.Code != http.StatusMethodNotAllowed {
				t.Errorf("%s %s: %d, want 405", m, tc.path, rec.Code)
			}
		}
	}
	if total > 96<<10 {
		t.Errorf("the page and its files are %d bytes, want them small (under 96 KiB)", total)
	}
	for _, p := range []string{"/index.html", "/live", "/live/", "/live/page.js/x", "/live/../status/x", "/favicon.ico", "/live/history/1"} {
		if rec := serveAdmin(g, http.MethodGet, p, nil); rec.Code != 404 {
			t.Errorf("GET %s: %d, want 404", p, rec.Code)
		}
	}
	// A query string changes nothing, and nothing of it is written back.
	for _, q := range []string{"?x=%3Cscript%3Ealert(1)%3C/script%3E", "?since=%ZZ&&&=", "?" + strings.Repeat("a=1&", 2000)} {
		rec := serveAdmin(g, http.MethodGet, "/"+q, nil)
		if rec.Code != 200 || rec.Body.String() != page.Body.String() {
			t.Errorf("GET /%.40s: %d, body differs from GET /", q, rec.Code)
		}
		if rec := serveAdmin(g, http.MethodGet, "/live/history"+q, nil); rec.Code != 200 || strings.Contains(rec.Body.String(), "script") {
			t.Errorf("GET /live/history%.40s: %d %.200s", q, rec.Code, rec.Body.String())
		}
	}
	// Browsers revalidate the files: an unchanged one is a 304.
	etag := page.Header().Get("ETag")
	if rec := serveAdmin(g, http.MethodGet, "/", http.Header{"If-None-Match": {etag}}); etag == "" || rec.Code != http.StatusNotModified {
		t.Errorf("GET / with If-None-Match %q: %d, want 304", etag, rec.Code)
	}
}

// history returns a gateway's history as /live/history serves it.
func getHistory(t *testing.T, g *Gateway, query string) HistoryJSON {
	t.Helper()
	rec := serveAdmin(g, http.MethodGet, "/live/history"+query, nil)
	var h HistoryJSON
	if rec.Code != 200 || rec.Header().Get("Cache-Control") != "no-store" || json.Unmarshal(rec.Body.Bytes(), &h) != nil {
		t.Fatalf("/live/history%s: %d %.300s", query, rec.Code, rec.Body.String())
	}
	return h
}

// The history keeps the last historyLen samples, serves those from since
// on when it still has them (all of them otherwise), and counts refusals
// per sample by reason.
func TestLiveHistoryRing(t *testing.T) {
	g := newFromEnv(t, []string{"KNEECAP_UPSTREAM=http://127.0.0.1:1"})
	if h := getHistory(t, g, ""); h.First != 0 || h.Next != 0 || len(h.Time) != 0 || len(h.Refused) != len(refusalReasons) {
		t.Fatalf("empty history: %+v", h)
	}
	t0 := time.Unix(1_700_000_000, 0)
	i := 0
	rejected := map[string]int64{}
	g.history.read = func() (sample, map[string]int64) {
		i++
		rejected["deadline"] += 2
		rejected["no_such_reason"]++
		if i == 5 {
			rejected["queue_full"] = 7
		}
		nan := math.NaN()
		return sample{at: t0.Add(time.Duration(i) * historyEvery), limit: i, running: i - 1, attainment: nan,
			ttft: [3]float64{0.1, 0.2, nan}, tpot: [3]float64{nan, nan, nan}}, rejected
	}
	for range historyLen + 25 {
		g.history.take()
	}
	all := getHistory(t, g, "?since=nonsense")
	if all.Next != historyLen+25 || all.First != 25 || len(all.Time) != historyLen || len(all.Limit) != historyLen ||
		all.Limit[0] != 26 || all.Limit[historyLen-1] != historyLen+25 || all.IntervalSeconds != 2 {
		t.Fatalf("after %d samples: first %d next %d, %d times, limits %v..%v", historyLen+25, all.First, all.Next, len(all.Time), all.Limit[0], all.Limit[len(all.Limit)-1])
	}
	if got := float64(all.Time[1] - all.Time[0]); got != historyEvery.Seconds() {
		t.Errorf("samples %v s apart, want %v", got, historyEvery.Seconds())
	}
	if d, o := all.Refused["deadline"], all.Refused["other"]; d[0] != 2 || o[0] != 1 || all.Refused["queue_full"][0] != 0 {
		t.Errorf("refused per sample: deadline %v, other %v", d[:3], o[:3])
	}
	for _, q := range []string{"", "?since=-4", "?since=3", "?since=99999", "?since=1e3", "?since=" + strings.Repeat("9", 40)} {
		if h := getHistory(t, g, q); h.First != 25 || len(h.Time) != historyLen {
			t.Errorf("since %q: first %d, %d samples, want all kept", q, h.First, len(h.Time))
		}
	}
	tail := getHistory(t, g, "?since=320")
	if tail.First != 320 || tail.Next != 325 || len(tail.Limit) != 5 || tail.Limit[0] != 321 || len(tail.TTFT[0]) != 5 {
		t.Errorf("since 320: %+v", tail)
	}
	if none := getHistory(t, g, "?since=325"); none.First != 325 || len(none.Time) != 0 {
		t.Errorf("since next: %+v", none)
	}
	// NaN is null.
	rec := serveAdmin(g, http.MethodGet, "/live/history?since=324", nil)
	if !strings.Contains(rec.Body.String(), `"attainment":[null]`) || !strings.Contains(rec.Body.String(), `"ttft":[[0.1],[0.2],[null]]`) {
		t.Errorf("NaN not null: %s", rec.Body.String())
	}

	// A counter that went back (it cannot; a restart would) is no
	// negative count.
	g.history.read = func() (sample, map[string]int64) { return sample{at: t0}, map[string]int64{} }
	g.history.take()
	if h := getHistory(t, g, "?since=325"); h.Refused["deadline"][0] != 0 {
		t.Errorf("a counter that went back: %v", h.Refused["deadline"])
	}
}

// /status counts refusals by reason, and Run samples the history at once
// and stops it when it returns (goleak checks the rest).
func TestLiveHistoryUnderRun(t *testing.T) {
	eng := &proxytest.Engine{Flavor: proxytest.VLLM, Chunks: 50, Gap: 20 * time.Millisecond}
	h := start(t, eng, Config{MaxConcurrency: 1, MaxQueueWait: 50 * time.Millisecond})
	hist := func() HistoryJSON {
		var hj HistoryJSON
		resp, err := http.Get(h.admin + "/live/history")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&hj); err != nil {
			t.Fatal(err)
		}
		return hj
	}
	waitFor(t, func() bool { return len(hist().Time) > 0 })
	body := `{"model":"m","stream":true,"messages":[]}`
	running := make(chan struct{})
	go func() {
		defer close(running)
		resp, err := http.Post(h.traffic+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	waitFor(t, func() bool { return h.g.Limiter().Running() == 1 })
	resp, err := http.Post(h.traffic+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second request: %d, want a 429", resp.StatusCode)
	}
	<-running
	if n := h.g.Status().Rejections["queue_timeout"]; n != 1 {
		t.Errorf("/status rejections_total queue_timeout = %d, want 1 (%v)", n, h.g.Status().Rejections)
	}
	h.g.history.take()
	var refused int64
	for _, n := range hist().Refused["queue_timeout"] {
		refused += n
	}
	if refused != 1 {
		t.Errorf("the history counted %d queue_timeout refusals, want 1", refused)
	}
	h.stop(t)
}

// liveBenchGateway is an adaptive gateway whose window holds a minute of
// requests and chunks and whose controller has a model, as under load.
func liveBenchGateway(b *testing.B) *Gateway {
	b.Helper()
	cfg, err := ConfigFromEnv([]string{"KNEECAP_UPSTREAM=http://127.0.0.1:1", "KNEECAP_ENGINE_METRICS=off"})
	if err != nil {
		b.Fatal(err)
	}
	g, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	for i := range 3000 {
		at := now.Add(-time.Minute + time.Duration(i)*20*time.Millisecond)
		r := slo.Record{Outcome: slo.Good, TTFT: time.Duration(100+i%900) * time.Millisecond, EngineTTFT: 50 * time.Millisecond,
			E2E: 3 * time.Second, OutputTokens: 100, Streamed: true}
		g.win.Add(at, &r)
		for j := range 30 {
			g.win.AddITL(at, time.Duration(5+j+i%50)*time.Millisecond)
		}
	}
	ctrl := g.ctrl.(*adaptive)
	for n := 1; n <= 16; n++ {
		for range 20 {
			ctrl.Loop.Chunk(now, n, time.Duration(20+n)*time.Millisecond)
			ctrl.Loop.FirstChunk(now, n, time.Duration(200+10*n)*time.Millisecond)
		}
	}
	ctx, cancel := context.WithTimeout(b.Context(), 1500*time.Millisecond)
	_ = ctrl.Run(ctx) // one decision fits the model
	cancel()
	return g
}

// BenchmarkLivePage is what the live page costs the gateway, off the data
// path: one sample of the history (every 2 s while the gateway runs), and
// what an open page asks for (/status every second, /live/history every
// 2 s, all of it on its first load).
func BenchmarkLivePage(b *testing.B) {
	g := liveBenchGateway(b)
	for range historyLen {
		g.history.take()
	}
	last := func() string { // the newest sample's number, as a polling page asks
		g.history.mu.Lock()
		defer g.history.mu.Unlock()
		return strconv.FormatInt(g.history.n-1, 10)
	}
	for _, bc := range []struct {
		name string
		do   func()
	}{
		{"sample", g.history.take},
		{"status", func() { serveAdmin(g, http.MethodGet, "/status", nil) }},
		{"history-poll", func() { serveAdmin(g, http.MethodGet, "/live/history?since="+last(), nil) }},
		{"history-all", func() { serveAdmin(g, http.MethodGet, "/live/history", nil) }},
		{"page", func() { serveAdmin(g, http.MethodGet, "/", nil) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.do()
			}
		})
	}
}
