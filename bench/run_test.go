package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Warm-up is not counted, the window lasts Duration, and requests still in
// flight at its end are cut off and reported as unfinished.
func TestWarmupAndWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &script{TTFT: 300 * time.Millisecond, Tokens: 8, Decode: 700 * time.Millisecond} // 1 s each
		rep, err := Run(t.Context(), Config{
			BaseURL: "http://e", Client: servePipe(t, eng), Model: "m",
			Levels: []float64{2, 4}, Warmup: 2500 * time.Millisecond, Duration: 10 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, users := range []int{2, 4} {
			lv := rep.Levels[i]
			s := lv.Summary
			if lv.WindowStart.Sub(lv.Start) != 2500*time.Millisecond || s.Duration != 10*time.Second {
				t.Fatalf("level %d: window from +%v for %v", i, lv.WindowStart.Sub(lv.Start), s.Duration)
			}
			// Requests end at whole seconds: 3..12 fall in [2.5, 12.5).
			if s.Completed != 10*users || s.Unfinished != users || s.RequestThroughput != float64(users) {
				t.Fatalf("level %d: %+v", i, s)
			}
			warm := 0
			for _, r := range lv.Records {
				if !r.Measured && r.Outcome == Completed {
					warm++
				}
			}
			if warm != 2*users {
				t.Fatalf("level %d: %d warm-up requests, want %d", i, warm, 2*users)
			}
		}
	})
}

// The hard bound cuts a run short and says so.
func TestTimeoutBoundsRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &script{TTFT: time.Second, Tokens: 2, Decode: time.Second}
		rep, err := Run(t.Context(), Config{
			BaseURL: "http://e", Client: servePipe(t, eng), Model: "m",
			Levels: []float64{1, 2, 4}, Requests: 1000, Timeout: 31 * time.Second,
		})
		if !errors.Is(err, ErrTimeout) || len(rep.Levels) != 1 || rep.Levels[0].Summary.Completed != 15 {
			t.Fatalf("err %v, %d levels, %+v", err, len(rep.Levels), rep.Levels[0].Summary)
		}
	})
}

// Open-loop arrivals: the same seed gives the same schedule, and the mean
// gap is 1/rate for Poisson and bursty (gamma) arrivals alike.
func TestArrivals(t *testing.T) {
	for _, b := range []float64{1, 0.25, 4} {
		r := &levelRun{cfg: &Config{Burstiness: b, Seed: 7}, value: 4}
		rng := r.rng(-1)
		var sum, sq float64
		const n = 20000
		for range n {
			g := r.gap(rng, 0).Seconds()
			sum += g
			sq += g * g
		}
		mean := sum / n
		cv2 := (sq/n - mean*mean) / (mean * mean) // 1/shape for gamma
		if mean < 0.24 || mean > 0.26 || cv2 < 0.85/b || cv2 > 1.15/b {
			t.Errorf("burstiness %g: mean gap %.4f s (want 0.25), CV² %.3f (want %.3f)", b, mean, cv2, 1/b)
		}
	}
	a, b := (&levelRun{cfg: &Config{Seed: 3}, value: 1}), (&levelRun{cfg: &Config{Seed: 3}, value: 1})
	ra, rb := a.rng(-1), b.rng(-1)
	for range 10 {
		if a.gap(ra, 0) != b.gap(rb, 0) {
			t.Fatal("same seed, different arrivals")
		}
	}
}

// A run is repeatable: in virtual time two runs with the same seed give the
// same records.
func TestRepeatable(t *testing.T) {
	run := func() []Record {
		var recs []Record
		synctest.Test(t, func(t *testing.T) {
			eng := &script{TTFT: 50 * time.Millisecond, Tokens: 4, Decode: 90 * time.Millisecond}
			rep, err := Run(t.Context(), Config{
				BaseURL: "http://e", Client: servePipe(t, eng), Model: "m", Seed: 9,
				Mode: Open, Levels: []float64{20}, Duration: 3 * time.Second, Burstiness: 0.5,
			})
			if err != nil {
				t.Fatal(err)
			}
			recs = rep.Levels[0].Records
		})
		return recs
	}
	a, b := run(), run()
	// Requests that end at the same virtual instant may be recorded in
	// either order; compare them by when they were due.
	for _, rs := range [][]Record{a, b} {
		slices.SortFunc(rs, func(x, y Record) int { return x.Due.Compare(y.Due) })
	}
	if len(a) != len(b) || len(a) < 30 {
		t.Fatalf("%d vs %d records", len(a), len(b))
	}
	for i := range a {
		if a[i].Due.Sub(a[0].Due) != b[i].Due.Sub(b[0].Due) || a[i].TTFT != b[i].TTFT {
			t.Fatalf("record %d differs", i)
		}
	}
}

// The workload hook sees the time since the level started, so a workload
// can change halfway (scenario 4: prompts double).
func TestWorkloadChangesMidRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lens []int
		eng := &script{TTFT: 100 * time.Millisecond, Tokens: 1}
		base := Synthetic{InputLen: Dist{Mean: 10}, OutputLen: Dist{Mean: 1}}
		wl := WorkloadFunc(func(s Slot) Request {
			r := base.Next(s)
			if s.Elapsed >= time.Second {
				r.Prompt += " " + r.Prompt
			}
			lens = append(lens, len(strings.Fields(r.Prompt)))
			return r
		})
		_, err := Run(t.Context(), Config{BaseURL: "http://e", Client: servePipe(t, eng), Model: "m",
			Workload: wl, Levels: []float64{1}, Duration: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if lens[0] != 10 || lens[9] != 10 || lens[10] != 20 || lens[len(lens)-1] != 20 {
			t.Fatalf("prompt lengths %v", lens)
		}
	})
}

// Real sockets: engines that fail in each way are counted as failures, never
// good, and the run goes on.
func TestFailuresOverRealHTTP(t *testing.T) {
	var n int
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body["stream"] != true ||
			body["stream_options"].(map[string]any)["include_usage"] != true || body["ignore_eos"] != true ||
			body["prompt"] == nil || body["max_tokens"] != 7.0 || body["model"] != "served" {
			http.Error(w, fmt.Sprintf("bad request body %v", body), http.StatusBadRequest)
			return
		}
		n++
		w.Header().Set("Content-Type", "text/event-stream")
		switch n % 4 {
		case 0: // llama.cpp: no role chunk, usage in the last chunk
			fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"text\":\"b\",\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":7,\"total_tokens\":9}}\n\ndata: [DONE]\n\n")
		case 1: // cut mid-stream
			fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n")
		case 2: // error event mid-stream
			fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}\n\n")
		case 3:
			http.Error(w, `{"error":{"message":"overloaded","type":"server_error","param":null,"code":null}}`, http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"served","object":"model"}]}`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	rep, err := Run(t.Context(), Config{BaseURL: srv.URL + "/", Endpoint: Completions, IgnoreEOS: true,
		Workload: Synthetic{InputLen: Dist{Mean: 5}, OutputLen: Dist{Mean: 7}},
		Levels:   []float64{1}, Requests: 8, Targets: Targets{TTFT: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	s := rep.Levels[0].Summary
	if rep.Model != "served" || s.Completed != 2 || s.Good != 2 || s.Failed != 6 || s.Rejected != 0 || s.OutputTokens != 14 {
		t.Fatalf("model %q, summary %+v", rep.Model, s)
	}
	var errs []string
	for _, r := range rep.Levels[0].Records[:4] {
		errs = append(errs, r.Err)
	}
	if got := strings.Join(errs, "|"); !strings.Contains(got, "before [DONE]") || !strings.Contains(got, "boom") || !strings.Contains(got, "overloaded") {
		t.Fatalf("errors %q", got)
	}
}

func TestReportOutputs(t *testing.T) {
	rep := sampleReport()
	var tab bytes.Buffer
	if err := rep.WriteTable(&tab); err != nil {
		t.Fatal(err)
	}
	out := tab.String()
	for _, want := range []string{"goodput", "TPOT p50", "definitions (vLLM's)", "(output_tokens - 1)",
		"knee: highest goodput 2.00 req/s at concurrency 4", "knee: highest concurrency that met the targets (attainment >= 90%): 4"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var parsed struct {
		Levels []map[string]any `json:"levels"`
		Knee   float64          `json:"knee_best_goodput_level"`
	}
	if err := json.Unmarshal(js.Bytes(), &parsed); err != nil || len(parsed.Levels) != 3 || parsed.Knee != 4 {
		t.Fatalf("JSON %v: %s", err, js.String())
	}
	for _, k := range []string{"median_ttft_ms", "p99_tpot_ms", "request_goodput", "output_throughput", "mean_e2el_ms", "max_concurrency", "p99_itl_ms"} {
		if _, ok := parsed.Levels[1][k]; !ok {
			t.Errorf("JSON level lacks %s", k)
		}
	}
	if parsed.Levels[1]["median_tpot_ms"] != 50.0 {
		t.Errorf("median_tpot_ms = %v", parsed.Levels[1]["median_tpot_ms"])
	}
	for _, f := range []string{"png", "svg"} {
		var img bytes.Buffer
		if err := rep.WritePlot(&img, f); err != nil {
			t.Fatal(err)
		}
		if magic := map[string]string{"png": "\x89PNG", "svg": "<?xml"}[f]; !bytes.HasPrefix(img.Bytes(), []byte(magic)) {
			t.Errorf("%s plot starts %q", f, img.Bytes()[:8])
		}
	}
	var cmp bytes.Buffer
	if err := WriteComparison(&cmp, []string{"engine alone", "through kneecap"}, []Report{rep, rep}); err != nil ||
		!strings.Contains(cmp.String(), "through kneecap") {
		t.Fatalf("comparison: %v\n%s", err, cmp.String())
	}
}

// sampleReport is three closed-loop levels of hand-made records: at 2 users
// all good, at 4 all good at a higher rate, at 8 none.
func sampleReport() Report {
	t0 := time.Unix(0, 0)
	rep := Report{Mode: Closed, Targets: Targets{TTFT: time.Second, TPOT: 100 * time.Millisecond}, MinAttainment: 0.9}
	for i, lvl := range []struct {
		users      float64
		n          int
		ttft, tpot time.Duration
	}{{2, 10, 200 * time.Millisecond, 30 * time.Millisecond}, {4, 20, 400 * time.Millisecond, 50 * time.Millisecond}, {8, 24, 3 * time.Second, 150 * time.Millisecond}} {
		lv := Level{Index: i, Value: lvl.users, Start: t0, WindowStart: t0, WindowEnd: t0.Add(10 * time.Second)}
		for j := range lvl.n {
			due := t0.Add(time.Duration(j) * 100 * time.Millisecond)
			r := Record{Due: due, Outcome: Completed, OutputTokens: 11, First: due.Add(lvl.ttft), Last: due.Add(lvl.ttft + 10*lvl.tpot), Measured: true}
			r.End = r.Last
			r.finish()
			r.ITL = []time.Duration{lvl.tpot}
			r.Judge(rep.Targets)
			lv.Records = append(lv.Records, r)
		}
		lv.Summary = lv.summarize()
		rep.Levels = append(rep.Levels, lv)
	}
	return rep
}

func TestParsers(t *testing.T) {
	tg, err := ParseTargets("ttft=1s,tpot=100ms,e2e=20000")
	if err != nil || tg != (Targets{time.Second, 100 * time.Millisecond, 20 * time.Second}) {
		t.Fatalf("ParseTargets = %+v, %v", tg, err)
	}
	for _, bad := range []string{"ttft", "ttft=x", "foo=1s", "tpot=-1s"} {
		if _, err := ParseTargets(bad); err == nil {
			t.Errorf("ParseTargets(%q) accepted", bad)
		}
	}
	if l, err := ParseLevels("1, 2,4"); err != nil || len(l) != 3 || l[2] != 4 {
		t.Fatalf("ParseLevels = %v, %v", l, err)
	}
	if _, err := ParseLevels("1,-2"); err == nil {
		t.Error("negative level accepted")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for in, check := range map[string]func(int) bool{
		"1000":            func(v int) bool { return v == 1000 },
		"1000:0.2":        func(v int) bool { return v >= 800 && v <= 1200 },
		"500-1500":        func(v int) bool { return v >= 500 && v <= 1500 },
		"exp:100":         func(v int) bool { return v >= 1 },
		"normal:100,0":    func(v int) bool { return v == 100 },
		"lognormal:100,0": func(v int) bool { return v == 100 },
		"lognormal:100,1": func(v int) bool { return v >= 1 },
	} {
		d, err := ParseDist(in)
		if err != nil {
			t.Fatalf("ParseDist(%q): %v", in, err)
		}
		for range 100 {
			if v := d.Draw(rng); !check(v) {
				t.Fatalf("%q drew %d", in, v)
			}
		}
	}
	for _, bad := range []string{"", "x", "0", "10:2", "9-3", "exp:", "lognormal:100", "lognormal:0,1"} {
		if _, err := ParseDist(bad); err == nil {
			t.Errorf("ParseDist(%q) accepted", bad)
		}
	}
	// lognormal:N,S has median N and a heavy upper tail.
	ln, _ := ParseDist("lognormal:500,1")
	var draws []int
	for range 4000 {
		draws = append(draws, ln.Draw(rng))
	}
	slices.Sort(draws)
	if med, p99 := draws[2000], draws[3960]; med < 450 || med > 550 || p99 < 5*med {
		t.Errorf("lognormal:500,1: median %d, P99 %d; want about 500 and at least 5x it", med, p99)
	}
	if got := ln.String(); got != "lognormal:500,1" {
		t.Errorf("String() = %q", got)
	}
	if n := len(strings.Fields(Words(rng, 1000))); n != 1000 {
		t.Fatalf("Words(1000) has %d words", n)
	}
	pf, err := ReadPromptFile(strings.NewReader("{\"prompt\":\"a b\",\"max_tokens\":3}\n\n{\"messages\":[{\"role\":\"user\",\"content\":\"c\"}]}\n"))
	if err != nil || len(pf.Prompts) != 2 || pf.Prompts[0].MaxTokens != 3 || pf.Prompts[1].Prompt != "c" {
		t.Fatalf("ReadPromptFile = %+v, %v", pf, err)
	}
	if _, err := ReadPromptFile(strings.NewReader("{\"prompt\":")); err == nil {
		t.Error("bad JSONL accepted")
	}
}

func TestScaled(t *testing.T) {
	rep := sampleReport()
	sc := rep.Scaled(10)
	a, b := rep.Levels[1].Summary, sc.Levels[1].Summary
	if b.TTFT.P50 != 10*a.TTFT.P50 || !near(b.Goodput, a.Goodput/10) || sc.Targets.TPOT != time.Second ||
		b.Duration != 100*time.Second || rep.Levels[1].Summary.TTFT.P50 != 400*time.Millisecond {
		t.Fatalf("scaled %+v from %+v", b, a)
	}
}

func TestRampUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &script{TTFT: 100 * time.Millisecond, Tokens: 1}
		rep, err := Run(t.Context(), Config{BaseURL: "http://e", Client: servePipe(t, eng), Model: "m",
			Levels: []float64{4}, RampUp: 2 * time.Second, Warmup: 3 * time.Second, Duration: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		first := map[int]time.Duration{}
		for _, r := range rep.Levels[0].Records {
			if _, ok := first[r.User]; !ok {
				first[r.User] = r.Due.Sub(rep.Levels[0].Start)
			}
		}
		for u := range 4 {
			if first[u] != time.Duration(u)*500*time.Millisecond {
				t.Errorf("user %d started at +%v", u, first[u])
			}
		}
	})
}

// A closed-loop user waits Think after a completed request.
func TestThink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &script{TTFT: 100 * time.Millisecond, Tokens: 1}
		rep, err := Run(t.Context(), Config{BaseURL: "http://e", Client: servePipe(t, eng), Model: "m",
			Levels: []float64{1}, Requests: 3, Think: 250 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		recs := rep.Levels[0].Records
		if len(recs) != 3 {
			t.Fatalf("%d records, want 3", len(recs))
		}
		for i := 1; i < len(recs); i++ {
			if gap := recs[i].Due.Sub(recs[i-1].End); gap != 250*time.Millisecond {
				t.Errorf("request %d sent %v after the previous ended, want 250ms", i, gap)
			}
		}
	})
}

// A request that outlives RequestTimeout fails (it is not merely unfinished)
// and the user goes on.
func TestRequestTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &script{TTFT: 2 * time.Second, Tokens: 1}
		rep, err := Run(t.Context(), Config{BaseURL: "http://e", Client: servePipe(t, eng), Model: "m",
			Levels: []float64{1}, Requests: 2, RequestTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		s := rep.Levels[0].Summary
		r := rep.Levels[0].Records[0]
		if s.Failed != 2 || r.Outcome != Failed || r.End.Sub(r.Due) != time.Second || !strings.Contains(r.Err, "deadline") {
			t.Fatalf("summary %+v, first record %+v", s, r)
		}
	})
}

// A request that fails because the server dropped the connection it was
// sent on says so when that connection was kept alive from an earlier
// request: the race of a server closing an idle connection as the client
// reuses it, told apart from a failure on a fresh one.
func TestFailureOnAKeptAliveConnectionIsNamed(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, `{"error":{"message":"busy","type":"rate_limit_error"}}`, http.StatusTooManyRequests)
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		_ = conn.Close()
	}))
	defer srv.Close()
	rep, err := Run(t.Context(), Config{BaseURL: srv.URL, Model: "m",
		Workload: Synthetic{InputLen: Dist{Mean: 5}, OutputLen: Dist{Mean: 3}},
		Levels:   []float64{1}, Requests: 2, Targets: Targets{TTFT: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	recs := ended(rep.Levels[0].Records)
	if len(recs) != 2 || recs[0].Outcome != Rejected || recs[1].Outcome != Failed {
		t.Fatalf("records %+v", recs)
	}
	if !strings.Contains(recs[1].Err, "on a connection idle ") {
		t.Errorf("error %q: want it to name the kept-alive connection", recs[1].Err)
	}
}
