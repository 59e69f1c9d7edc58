package slo

import (
	"net/http"
	"testing"
	"time"
)

const ms = time.Millisecond

func TestWithHeaders(t *testing.T) {
	base := Targets{TTFT: time.Second, TPOT: 100 * ms}
	tests := []struct {
		name    string
		hdr     map[string]string
		want    Targets
		wantErr bool
	}{
		{"none", nil, base, false},
		{"tighten tpot", map[string]string{"x-slo-tpot-ms": "50"}, Targets{TTFT: time.Second, TPOT: 50 * ms}, false},
		{"loosen ttft, add e2e", map[string]string{"x-slo-ttft-ms": "3000", "x-slo-e2e-ms": "9000"}, Targets{TTFT: 3 * time.Second, TPOT: 100 * ms, E2E: 9 * time.Second}, false},
		{"zero removes", map[string]string{"x-slo-ttft-ms": "0"}, Targets{TPOT: 100 * ms}, false},
		{"negative", map[string]string{"x-slo-ttft-ms": "-1"}, base, true},
		{"not a number", map[string]string{"x-slo-tpot-ms": "1.5"}, base, true},
		{"too large", map[string]string{"x-slo-e2e-ms": "999999999999"}, base, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.hdr {
				h.Set(k, v)
			}
			got, err := base.WithHeaders(h)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("WithHeaders = %+v, %v; want %+v, err %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestTPOT(t *testing.T) {
	// The brief's example: 500 ms first token, 100 output tokens over 700 ms
	// of decode: 700/99 = 7.07 ms, not 12 ms.
	r := Record{Streamed: true, TTFT: 500 * ms, E2E: 1200 * ms, OutputTokens: 100, OutputChunks: 40}
	got, ok := r.TPOT()
	if !ok || got != 700*ms/99 {
		t.Fatalf("TPOT = %v, %v; want %v", got, ok, 700*ms/99)
	}
	for _, r := range []Record{
		{Streamed: true, TTFT: ms, E2E: ms, OutputTokens: 1, OutputChunks: 1},
		{Streamed: false, E2E: time.Second, OutputTokens: 10},
		{Streamed: true, E2E: time.Second, OutputTokens: 10}, // no output chunk
	} {
		if _, ok := r.TPOT(); ok {
			t.Errorf("TPOT defined for %+v", r)
		}
	}
	// A reassembled request streamed from the engine: TPOT as served.
	r = Record{Reassembled: true, TTFT: 500 * ms, E2E: 1200 * ms, OutputTokens: 100, OutputChunks: 40}
	if got, ok := r.TPOT(); !ok || got != 700*ms/99 {
		t.Fatalf("reassembled TPOT = %v, %v; want %v", got, ok, 700*ms/99)
	}
}

func TestVerdictTargets(t *testing.T) {
	all := Targets{TTFT: time.Second, TPOT: 100 * ms, E2E: 13 * time.Second}
	for _, tt := range []struct {
		name string
		r    Record
		want Targets
	}{
		{"streamed: every target", Record{Streamed: true, Targets: all}, all},
		{"not streamed: e2e alone", Record{Targets: all}, Targets{E2E: 13 * time.Second}},
		{"reassembled: e2e alone", Record{Reassembled: true, Targets: all}, Targets{E2E: 13 * time.Second}},
		{"not streamed, no e2e: the implied bound's targets", Record{Targets: Targets{TTFT: time.Second, TPOT: 100 * ms}}, Targets{TTFT: time.Second, TPOT: 100 * ms}},
		{"no target", Record{}, Targets{}},
	} {
		if got := tt.r.VerdictTargets(); got != tt.want {
			t.Errorf("%s: VerdictTargets = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestJudge(t *testing.T) {
	tg := Targets{TTFT: time.Second, TPOT: 100 * ms}
	tests := []struct {
		name string
		r    Record
		want Outcome
	}{
		{"good", Record{Streamed: true, TTFT: 900 * ms, E2E: 900*ms + 99*50*ms, OutputTokens: 100, OutputChunks: 100}, Good},
		{"missed ttft", Record{Streamed: true, TTFT: 1100 * ms, E2E: 1200 * ms, OutputTokens: 3, OutputChunks: 3}, MissedTTFT},
		{"missed both", Record{Streamed: true, TTFT: 2 * time.Second, E2E: 4 * time.Second, OutputTokens: 3, OutputChunks: 1}, MissedTTFT | MissedTPOT},
		{"one token has no tpot", Record{Streamed: true, TTFT: 500 * ms, E2E: 900 * ms, OutputTokens: 1, OutputChunks: 1}, Good},
		{"no output judged by e2e as ttft", Record{Streamed: true, E2E: 2 * time.Second}, MissedTTFT},
		{"e2e target", Record{Streamed: true, TTFT: ms, E2E: 3 * time.Second, OutputTokens: 2, OutputChunks: 2, Targets: Targets{E2E: 2 * time.Second}}, MissedE2E},
		{"non-streamed implied bound met", Record{E2E: time.Second + 9*100*ms, OutputTokens: 10}, Good},
		{"non-streamed implied bound missed", Record{E2E: time.Second + 9*100*ms + ms, OutputTokens: 10}, MissedE2E},
		{"non-streamed e2e target wins", Record{E2E: 5 * time.Second, OutputTokens: 10, Targets: Targets{TTFT: time.Second, E2E: 6 * time.Second}}, Good},
		// Reassembled: TTFT and TPOT measured (both missed here), the
		// verdict by E2E alone, as the client felt it.
		{"reassembled judged by e2e target", Record{Reassembled: true, TTFT: 2 * time.Second, E2E: 12 * time.Second, OutputTokens: 10, OutputChunks: 10,
			Targets: Targets{TTFT: time.Second, TPOT: 100 * ms, E2E: 13 * time.Second}}, Good},
		{"reassembled misses e2e target", Record{Reassembled: true, TTFT: 500 * ms, E2E: 14 * time.Second, OutputTokens: 10, OutputChunks: 10,
			Targets: Targets{TTFT: time.Second, TPOT: 100 * ms, E2E: 13 * time.Second}}, MissedE2E},
		{"reassembled implied bound: slow first token made up", Record{Reassembled: true, TTFT: 1500 * ms, E2E: 1900 * ms, OutputTokens: 10, OutputChunks: 10}, Good},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.r.Targets == (Targets{}) {
				tt.r.Targets = tg
			}
			if got := Judge(&tt.r); got != tt.want {
				t.Fatalf("Judge = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[Outcome]string{
		Good: "good", MissedTPOT: "missed_tpot", MissedTTFT | MissedE2E: "missed_ttft+missed_e2e",
		Rejected: "rejected", EngineError: "engine_error", ClientCancelled: "client_cancelled", InvalidRequest: "invalid_request",
	} {
		if o.String() != want {
			t.Errorf("%d.String() = %q, want %q", o, o.String(), want)
		}
	}
	if !(MissedTTFT | MissedTPOT).Missed() || Rejected.Missed() || !Good.Completed() || EngineError.Completed() {
		t.Error("class predicates wrong")
	}
}

func TestWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := NewWindow(60*time.Second, t0)
	tg := Targets{TTFT: time.Second, TPOT: 100 * ms}
	add := func(at time.Duration, r Record) {
		r.Targets = tg
		if r.Outcome == Good {
			r.Outcome = Judge(&r)
		}
		w.Add(t0.Add(at), &r)
	}
	// 10 s in: 8 good, 1 missed, 1 rejected, 1 cancelled.
	for i := range 8 {
		add(time.Duration(i)*time.Second, Record{Streamed: true, TTFT: 200 * ms, EngineTTFT: 150 * ms, E2E: 200*ms + 9*20*ms, OutputTokens: 10, OutputChunks: 10})
	}
	add(8*time.Second, Record{Streamed: true, TTFT: 3 * time.Second, E2E: 4 * time.Second, OutputTokens: 10, OutputChunks: 10})
	add(9*time.Second, Record{Outcome: Rejected})
	add(9*time.Second, Record{Outcome: ClientCancelled})
	for i := range 100 {
		w.AddITL(t0.Add(5*time.Second), time.Duration(i+1)*ms)
	}
	s := w.Stats(t0.Add(10 * time.Second))
	if s.Requests != 11 || s.Good != 8 || s.Missed != 1 || s.Rejected != 1 || s.Cancelled != 1 || s.Judged != 10 {
		t.Fatalf("counts: %+v", s)
	}
	if s.Span != 10*time.Second || s.Goodput != 0.8 || s.Attainment != 0.8 || s.RejectionRate != 0.1 {
		t.Fatalf("rates: span %v goodput %v attainment %v rejections/s %v", s.Span, s.Goodput, s.Attainment, s.RejectionRate)
	}
	within := func(name string, got, want time.Duration) {
		t.Helper()
		if d := float64(got-want) / float64(want); d > 0.011 || d < -0.011 {
			t.Errorf("%s = %v, want %v within 1%%", name, got, want)
		}
	}
	within("TTFT p50", s.TTFT.P50, 200*ms)
	within("TTFT mean", s.TTFT.Mean, (8*200*ms+3*time.Second)/9)
	within("TPOT p50", s.TPOT.P50, 20*ms)
	within("ITL p50", s.ITL.P50, 50*ms)
	within("ITL p99", s.ITL.P99, 99*ms)
	within("engine TTFT p50", s.EngineTTFT.P50, 150*ms)
	if s.E2E.Count != 9 || s.TTFT.Count != 9 {
		t.Errorf("E2E count %d, TTFT count %d, want 9 (completed only)", s.E2E.Count, s.TTFT.Count)
	}

	// 75 s in, the first 10 s have slid out; one new good request.
	add(74*time.Second, Record{Streamed: true, TTFT: 100 * ms, E2E: 200 * ms, OutputTokens: 2, OutputChunks: 2})
	s = w.Stats(t0.Add(75 * time.Second))
	if s.Requests != 1 || s.Good != 1 || s.ITL.Count != 0 {
		t.Fatalf("after sliding: %+v", s)
	}
	if s.Span < 55*time.Second || s.Span >= 60*time.Second {
		t.Fatalf("span = %v, want within [55s, 60s)", s.Span)
	}
}

func BenchmarkWindowAddITL(b *testing.B) {
	t0 := time.Now()
	w := NewWindow(time.Minute, t0)
	for i := 0; b.Loop(); i++ {
		w.AddITL(t0.Add(time.Duration(i)*time.Microsecond), 20*ms)
	}
}

// BenchmarkWindowAddITLParallel is the gateway's case: every relay adds one
// gap per output chunk, from as many goroutines as there are streams.
func BenchmarkWindowAddITLParallel(b *testing.B) {
	t0 := time.Now()
	w := NewWindow(time.Minute, t0)
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			w.AddITL(t0.Add(time.Duration(i)*time.Microsecond), 20*ms)
		}
	})
}

// FuzzWithHeaders checks that any header value either applies exactly (a
// whole number of milliseconds within bounds) or is refused leaving the
// targets unchanged.
func FuzzWithHeaders(f *testing.F) {
	for _, s := range []string{"0", "250", "-1", "1e3", " 5", "86400000", "86400001", "99999999999999999999"} {
		f.Add(s)
	}
	base := Targets{TTFT: time.Second, TPOT: 100 * ms}
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{}
		h.Set(HeaderTPOT, v)
		got, err := base.WithHeaders(h)
		if err != nil {
			if got != base {
				t.Fatalf("refused %q but changed targets to %+v", v, got)
			}
			return
		}
		if v == "" {
			return
		}
		if got.TTFT != base.TTFT || got.TPOT < 0 || got.TPOT > 24*time.Hour || got.TPOT%ms != 0 {
			t.Fatalf("accepted %q as %+v", v, got)
		}
	})
}

func TestHeaderPolicy(t *testing.T) {
	base := Targets{TTFT: time.Second, TPOT: 100 * time.Millisecond}
	floor := Targets{TTFT: 100 * time.Millisecond, TPOT: 5 * time.Millisecond, E2E: time.Second}
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	for _, tt := range []struct {
		name string
		mode HeaderMode
		h    http.Header
		want Targets
		err  bool
	}{
		{"any: looser", HeadersAny, hdr(HeaderTTFT, "5000"), Targets{TTFT: 5 * time.Second, TPOT: 100 * time.Millisecond}, false},
		{"any: 0 is no bound", HeadersAny, hdr(HeaderTTFT, "0"), Targets{TPOT: 100 * time.Millisecond}, false},
		{"any: below the floor is the floor", HeadersAny, hdr(HeaderTPOT, "1", HeaderE2E, "10"), Targets{TTFT: time.Second, TPOT: 5 * time.Millisecond, E2E: time.Second}, false},
		{"tighten: tighter", HeadersTighten, hdr(HeaderTTFT, "500"), Targets{TTFT: 500 * time.Millisecond, TPOT: 100 * time.Millisecond}, false},
		{"tighten: looser ignored", HeadersTighten, hdr(HeaderTTFT, "5000", HeaderTPOT, "0"), base, false},
		{"tighten: a new bound is tighter than none", HeadersTighten, hdr(HeaderE2E, "30000"), Targets{TTFT: time.Second, TPOT: 100 * time.Millisecond, E2E: 30 * time.Second}, false},
		{"off: ignored", HeadersOff, hdr(HeaderTTFT, "10"), base, false},
		{"off: malformed still an error", HeadersOff, hdr(HeaderTTFT, "x"), base, true},
		{"any: malformed", HeadersAny, hdr(HeaderTPOT, "-1"), base, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := HeaderPolicy{Mode: tt.mode, Floor: floor}.Apply(base, tt.h)
			if got != tt.want || (err != nil) != tt.err {
				t.Fatalf("Apply = %+v, %v; want %+v, error %v", got, err, tt.want, tt.err)
			}
		})
	}
}
