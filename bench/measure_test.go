package bench

import (
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// The brief's trap: a 500 ms first token and 100 output tokens over 700 ms of
// decode. vLLM's TPOT excludes the first token: 700/99 = 7.07 ms; including
// it (GuideLLM, inference-perf) would read 1200/100 = 12.00 ms.
func TestTPOTExcludesFirstToken(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := Record{Due: t0, First: t0.Add(500 * time.Millisecond), Last: t0.Add(1200 * time.Millisecond), OutputTokens: 100, Outcome: Completed}
	r.finish()
	if r.TTFT != 500*time.Millisecond || r.E2E != 1200*time.Millisecond {
		t.Fatalf("TTFT %v E2E %v", r.TTFT, r.E2E)
	}
	if want := 700 * time.Millisecond / 99; r.TPOT != want {
		t.Fatalf("TPOT = %v, want %v", r.TPOT, want)
	}
	if got := ms(r.TPOT); got != "7.07" {
		t.Fatalf("TPOT prints %s ms, want 7.07 (12.00 would include the first token)", got)
	}
	r.Judge(Targets{TPOT: 7 * time.Millisecond})
	if r.Good {
		t.Fatal("7.07 ms TPOT judged within a 7 ms target")
	}
	r.Judge(Targets{TPOT: 8 * time.Millisecond, TTFT: 500 * time.Millisecond})
	if !r.Good {
		t.Fatal("request within both targets judged not good")
	}
}

// A request that is not streamed is judged by E2E alone: against the E2E
// target when set (its TTFT and TPOT targets do not apply), else against
// the E2E of a stream of its length meeting both.
func TestJudgeNotStreamed(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := Record{NoStream: true, Due: t0, End: t0.Add(3 * time.Second), OutputTokens: 21, Outcome: Completed}
	r.finish()
	if r.E2E != 3*time.Second || r.HasTPOT() {
		t.Fatalf("E2E %v, has TPOT %v", r.E2E, r.HasTPOT())
	}
	for _, tt := range []struct {
		t    Targets
		good bool
	}{
		{Targets{TTFT: time.Millisecond, TPOT: time.Millisecond, E2E: 3 * time.Second}, true},
		{Targets{E2E: 2 * time.Second}, false},
		{Targets{TTFT: time.Second, TPOT: 100 * time.Millisecond}, true}, // 1 + 20 x 0.1 = 3 s
		{Targets{TTFT: time.Second, TPOT: 99 * time.Millisecond}, false}, // 2.98 s
		{Targets{}, true},
	} {
		if r.Judge(tt.t); r.Good != tt.good {
			t.Errorf("targets %+v: good %v, want %v", tt.t, r.Good, tt.good)
		}
	}
}

// The same timeline end to end: a fake engine in a synctest bubble streams
// the first token at 500 ms and 99 more evenly until 1200 ms.
func TestTimelineThroughHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &script{TTFT: 500 * time.Millisecond, Tokens: 100, Decode: 700 * time.Millisecond}
		rep, err := Run(t.Context(), Config{
			BaseURL: "http://engine", Client: servePipe(t, eng), Model: "m",
			Levels: []float64{1}, Requests: 3, Targets: Targets{TTFT: time.Second, TPOT: 10 * time.Millisecond},
		})
		if err != nil {
			t.Fatal(err)
		}
		s := rep.Levels[0].Summary
		if s.Completed != 3 || s.Good != 3 || s.TTFT.P50 != 500*time.Millisecond || s.TPOT.P99 != 700*time.Millisecond/99 ||
			s.E2E.P50 != 1200*time.Millisecond {
			t.Fatalf("summary %+v", s)
		}
		// Three requests of 100 tokens back to back, 1.2 s each (the engine
		// answers at once after [DONE]): exactly 3.6 s of window.
		if s.Duration != 3600*time.Millisecond || !near(s.OutputThroughput, 300/3.6) || !near(s.Goodput, 3/3.6) {
			t.Fatalf("window %v, %v tok/s, goodput %v", s.Duration, s.OutputThroughput, s.Goodput)
		}
		if s.ITL.N != 3*99 || s.ITL.P50 != 700*time.Millisecond/99 {
			t.Fatalf("ITL %+v", s.ITL)
		}
	})
}

// A request with one output token has no TPOT: it is left out of the TPOT
// percentiles and cannot miss the TPOT target, as in vLLM.
func TestOneTokenRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &script{TTFT: 200 * time.Millisecond, Tokens: 1}
		rep, err := Run(t.Context(), Config{
			BaseURL: "http://engine", Client: servePipe(t, eng), Model: "m",
			Levels: []float64{1}, Requests: 2, Targets: Targets{TTFT: time.Second, TPOT: time.Nanosecond},
		})
		if err != nil {
			t.Fatal(err)
		}
		s := rep.Levels[0].Summary
		if s.Completed != 2 || s.Good != 2 || s.TPOT.N != 0 || s.TTFT.P50 != 200*time.Millisecond || s.E2E.P50 != 200*time.Millisecond {
			t.Fatalf("summary %+v", s)
		}
		if r := rep.Levels[0].Records[0]; r.TPOT != 0 || r.HasTPOT() || len(r.ITL) != 0 {
			t.Fatalf("record %+v", r)
		}
	})
}

// Chunks that carry several tokens: TPOT uses the usage report's count, not
// the number of chunks; without usage the count is marked estimated.
func TestTokensFromUsage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &script{TTFT: 100 * time.Millisecond, Tokens: 41, Chunks: 5, Decode: 400 * time.Millisecond}
		rep, err := Run(t.Context(), Config{BaseURL: "http://e", Client: servePipe(t, eng), Model: "m", Levels: []float64{1}, Requests: 1})
		if err != nil {
			t.Fatal(err)
		}
		r := rep.Levels[0].Records[0]
		if r.OutputTokens != 41 || r.Estimated || r.TPOT != 10*time.Millisecond || len(r.ITL) != 4 || r.ITL[0] != 100*time.Millisecond {
			t.Fatalf("record %+v", r)
		}
		eng2 := &script{TTFT: 100 * time.Millisecond, Tokens: 5, Decode: 400 * time.Millisecond, NoUsage: true}
		rep, err = Run(t.Context(), Config{BaseURL: "http://e", Client: servePipe(t, eng2), Model: "m", Levels: []float64{1}, Requests: 1})
		if err != nil {
			t.Fatal(err)
		}
		if r := rep.Levels[0].Records[0]; r.OutputTokens != 5 || !r.Estimated || r.TPOT != 100*time.Millisecond {
			t.Fatalf("record %+v", r)
		}
	})
}

// In open loop a request's latencies count from when it was due, not from
// when the client got round to sending it.
func TestOpenLoopCountsFromDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// One request at a time, 400 ms to the first token, a second token
		// 200 ms later: 600 ms each. Arrivals every 500 ms, one in flight.
		eng := &script{TTFT: 400 * time.Millisecond, Tokens: 2, Decode: 200 * time.Millisecond}
		rep, err := Run(t.Context(), Config{
			BaseURL: "http://e", Client: servePipe(t, eng), Model: "m",
			Mode: Open, Constant: true, Levels: []float64{2}, MaxInFlight: 1, Requests: 3,
		})
		if err != nil {
			t.Fatal(err)
		}
		recs := rep.Levels[0].Records
		start := rep.Levels[0].Start
		// Due at 0.5, 1.0, 1.5 s. Sent at 0.5, 1.1 (when the first ended),
		// 1.7. First tokens at 0.9, 1.5, 2.1: TTFT 0.4, 0.5, 0.6 s.
		for i, want := range []time.Duration{400, 500, 600} {
			r := recs[i]
			if r.Due != start.Add(time.Duration(i+1)*500*time.Millisecond) || r.TTFT != want*time.Millisecond ||
				r.E2E != (want+200)*time.Millisecond || r.TPOT != 200*time.Millisecond {
				t.Errorf("request %d: due +%v sent +%v TTFT %v E2E %v TPOT %v", i, r.Due.Sub(start), r.Sent.Sub(start), r.TTFT, r.E2E, r.TPOT)
			}
		}
	})
}

// Rejections are counted apart and never good; users that honour
// Retry-After wait it, bounded by RetryAfterMax, before their next request.
func TestRetryAfterHonouredAndBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &script{TTFT: 100 * time.Millisecond, Tokens: 2, Decode: 100 * time.Millisecond,
			Reject: func(n int, _ *http.Request) (string, bool) {
				switch n {
				case 0:
					return "1", true
				case 1:
					return "30", true // longer than the bound
				}
				return "", false
			}}
		rep, err := Run(t.Context(), Config{
			BaseURL: "http://e", Client: servePipe(t, eng), Model: "m",
			Levels: []float64{1}, Requests: 3, RetryAfterMax: 5 * time.Second, Targets: Targets{TTFT: time.Second},
		})
		if err != nil {
			t.Fatal(err)
		}
		recs := ended(rep.Levels[0].Records)
		if len(recs) != 3 || recs[0].Outcome != Rejected || recs[1].Outcome != Rejected || recs[2].Outcome != Completed {
			t.Fatalf("outcomes %v", recs)
		}
		if recs[0].Good || recs[0].RetryAfter != time.Second || recs[0].Reason != "queue_full" || !strings.Contains(recs[0].Err, "queue_full") {
			t.Fatalf("rejection %+v", recs[0])
		}
		if w := recs[1].Due.Sub(recs[0].End); w != time.Second {
			t.Errorf("waited %v after Retry-After: 1, want 1s", w)
		}
		if w := recs[2].Due.Sub(recs[1].End); w != 5*time.Second {
			t.Errorf("waited %v after Retry-After: 30 with a 5s bound, want 5s", w)
		}
		s := rep.Levels[0].Summary
		if s.Rejected != 2 || s.Good != 1 || s.Attainment != 1.0/3 {
			t.Fatalf("summary %+v", s)
		}
	})
}

// Per-request headers and targets: half of the requests carry a tighter
// x-slo-tpot-ms and are judged by it.
func TestTaggedRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tagged int
		eng := &script{TTFT: 100 * time.Millisecond, Tokens: 11, Decode: 500 * time.Millisecond, // TPOT 50 ms
			OnHeader: func(r *http.Request) {
				if r.Header.Get("x-slo-tpot-ms") == "20" {
					tagged++ // one user: no race
				}
			}}
		wl := WorkloadFunc(func(s Slot) Request {
			r := Request{Prompt: Words(s.Rand, 10), MaxTokens: 11}
			if s.Seq%2 == 1 {
				r.Header = http.Header{"X-Slo-Tpot-Ms": {"20"}}
				r.Targets = Targets{TPOT: 20 * time.Millisecond}
				r.Class = "tight"
			}
			return r
		})
		rep, err := Run(t.Context(), Config{
			BaseURL: "http://e", Client: servePipe(t, eng), Model: "m", Workload: wl,
			Levels: []float64{1}, Requests: 4, Targets: Targets{TTFT: time.Second, TPOT: 100 * time.Millisecond},
		})
		if err != nil {
			t.Fatal(err)
		}
		if tagged != 2 {
			t.Fatalf("%d tagged requests reached the engine, want 2", tagged)
		}
		for _, r := range ended(rep.Levels[0].Records) {
			if r.Good == (r.Class == "tight") || (r.Class == "tight" && r.Targets.TTFT != time.Second) {
				t.Errorf("class %q good=%v targets %+v", r.Class, r.Good, r.Targets)
			}
		}
	})
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// ended drops the requests cut off when a level ended.
func ended(recs []Record) []Record {
	var out []Record
	for _, r := range recs {
		if r.Outcome != Unfinished {
			out = append(out, r)
		}
	}
	return out
}
