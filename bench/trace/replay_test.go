package trace_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kneecap/kneecap/bench"
	"github.com/kneecap/kneecap/bench/trace"
	"github.com/kneecap/kneecap/gateway"
	"github.com/kneecap/kneecap/proxy/proxytest"
	"github.com/kneecap/kneecap/sim"
)

// behindGateway runs the real simulator with profile p and, in front of
// it, a gateway built from environ, over pipe listeners (call it inside a
// synctest bubble). It returns a client of the gateway and a stop
// function that ends both and checks the gateway's Run.
func behindGateway(t *testing.T, p sim.Profile, environ []string) (*http.Client, func()) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	engine, err := sim.New(sim.Config{Profile: p, Seed: 1, Logger: quiet, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Go(func() { _ = engine.Run(ctx) })
	engL := proxytest.NewPipeListener()
	engSrv := &http.Server{Handler: engine.Handler()}
	bg.Go(func() { _ = engSrv.Serve(engL) })
	cfg, err := gateway.ConfigFromEnv(append([]string{"KNEECAP_UPSTREAM=http://engine"}, environ...))
	if err != nil {
		t.Fatal(err)
	}
	engT := engL.Transport()
	gwL, adminL := proxytest.NewPipeListener(), proxytest.NewPipeListener()
	g, err := gateway.New(cfg, gateway.WithTransport(engT), gateway.WithListeners(gwL, adminL),
		gateway.WithRegistry(prometheus.NewRegistry()), gateway.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error, 1)
	go func() { runErr <- g.Run(ctx) }()
	clientT := gwL.Transport()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-runErr; err != nil {
				t.Error(err)
			}
			clientT.CloseIdleConnections()
			_ = engSrv.Close()
			engT.CloseIdleConnections()
			bg.Wait()
		})
	}
	t.Cleanup(stop)
	return &http.Client{Transport: clientT}, stop
}

// mooncakeLike writes a Mooncake trace of n requests over about span:
// conversations whose turns extend their own history (hash ids shared
// with the turn before) after a system prompt every request shares (id 0),
// arrivals in bursts.
func mooncakeLike(n int, span time.Duration, seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 1))
	var b strings.Builder
	next := uint64(1)
	var convs [][]uint64
	at := 0.0
	for range n {
		at += rng.ExpFloat64() * float64(span/time.Millisecond) / float64(n)
		var ids []uint64
		if len(convs) > 0 && rng.IntN(2) == 0 {
			c := rng.IntN(len(convs))
			ids = slices.Clone(convs[c])
			for range 1 + rng.IntN(3) {
				ids = append(ids, next)
				next++
			}
			convs[c] = ids
		} else {
			ids = []uint64{0}
			for range 1 + rng.IntN(4) {
				ids = append(ids, next)
				next++
			}
			convs = append(convs, ids)
		}
		in := (len(ids)-1)*512 + 1 + rng.IntN(512)
		out := 20 + rng.IntN(400)
		idStrs := make([]string, len(ids))
		for i, id := range ids {
			idStrs[i] = fmt.Sprint(id)
		}
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": %d, "hash_ids": [%s]}`+"\n",
			int(at), in, out, strings.Join(idStrs, ", "))
	}
	return b.String()
}

// replay runs tr open loop against client with no retries.
func replay(t *testing.T, client *http.Client, tr *trace.Trace, block int) bench.Report {
	t.Helper()
	rp := &trace.Replay{Trace: tr, Block: block}
	rep, err := bench.Run(t.Context(), bench.Config{
		BaseURL: "http://gateway", Client: client, Mode: bench.Open, Levels: []float64{rp.Rate()},
		Interarrival: rp.Interarrival(), Workload: rp.Workload(), EndWithArrivals: true,
		Duration: tr.Span() + 10*time.Minute, IgnoreEOS: true, Clients: bench.ClientsNone,
		Targets: bench.Targets{TTFT: time.Second, TPOT: 100 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// A two-minute Mooncake-shaped trace, its window from 30 s to 90 s,
// lengths scaled by 1/8, replayed through a gateway in front of the
// simulated GB10 FP8 engine in virtual time: every request of the window
// is sent once, at its own arrival, with its own lengths; the level ends
// when the last one has.
func TestReplayMooncakeThroughGateway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		full, err := trace.Read("mooncake-like.jsonl", strings.NewReader(mooncakeLike(240, 2*time.Minute, 5)), trace.Auto)
		if err != nil {
			t.Fatal(err)
		}
		w, err := full.Window(30*time.Second, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		tr := w.Scale(1, 1.0/8)
		client, stop := behindGateway(t, sim.GB10FP8, nil)
		rep := replay(t, client, tr, trace.BlockTokens/8)
		stop()

		lv := rep.Levels[0]
		recs := slices.Clone(lv.Records)
		slices.SortFunc(recs, func(a, b bench.Record) int { return a.Due.Compare(b.Due) })
		if len(recs) != len(tr.Requests) {
			t.Fatalf("%d records for %d requests in the window", len(recs), len(tr.Requests))
		}
		for i, rec := range recs {
			want := tr.Requests[i]
			if got := rec.Due.Sub(lv.Start); got != want.At {
				t.Errorf("request %d (line %d) due at %v, want %v", i, want.Line, got, want.At)
			}
			if rec.Outcome == bench.Completed && (rec.PromptTokens != want.Prompt || rec.OutputTokens != want.Output) {
				t.Errorf("request %d (line %d): %d prompt and %d output tokens, want %d and %d",
					i, want.Line, rec.PromptTokens, rec.OutputTokens, want.Prompt, want.Output)
			}
			if !rec.Measured {
				t.Errorf("request %d (line %d) ended outside the window", i, want.Line)
			}
		}
		t.Logf("%d requests over %v: %+v", len(recs), tr.Span(), lv.Summary)
		if s := lv.Summary; s.Completed == 0 || s.Good == 0 {
			t.Errorf("summary %+v: nothing completed or good", s)
		}
		if end := lv.WindowEnd.Sub(lv.Start); end < tr.Span() || end > tr.Span()+2*time.Minute {
			t.Errorf("window ended %v after the start, want soon after the last arrival (%v)", end, tr.Span())
		}
	})
}
