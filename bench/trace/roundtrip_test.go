package trace_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kneecap/kneecap/bench/trace"
	"github.com/kneecap/kneecap/reqlog"
	"github.com/kneecap/kneecap/sim"
)

// recordedGoodput reads a request log and returns its good requests per
// second from the first arrival to the last end, and its line count.
func recordedGoodput(t *testing.T, path string) (goodput float64, good, lines int) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var first, last time.Time
	for _, s := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		tr, err := trace.Read(path, strings.NewReader(s), trace.Kneecap)
		if err != nil || len(tr.Requests) != 1 {
			t.Fatalf("%s: %v", path, err)
		}
		var l reqlog.Line
		if err := jsonUnmarshal(s, &l); err != nil {
			t.Fatal(err)
		}
		lines++
		end := l.Arrival.Add(time.Duration(l.E2E * float64(time.Millisecond)))
		if first.IsZero() || l.Arrival.Before(first) {
			first = l.Arrival
		}
		if end.After(last) {
			last = end
		}
		if l.Outcome == reqlog.OutcomeGood {
			good++
		}
	}
	return float64(good) / last.Sub(first).Seconds(), good, lines
}

// The round trip: a gateway with its request log on serves a load (a
// Mooncake-shaped trace that overloads the simulated GB10 FP8 engine, no
// retries); then `kneecap bench --trace` on that log, against a fresh
// engine and gateway alike, reproduces the goodput the log recorded
// within 10 %. Virtual time; the numbers are logged (go test -v -run
// RoundTrip ./bench/trace) and quoted in docs/bench.md.
func TestRoundTrip(t *testing.T) {
	logFile := filepath.Join(t.TempDir(), "requests.jsonl")
	synctest.Test(t, func(t *testing.T) {
		load, err := trace.Read("load.jsonl", strings.NewReader(mooncakeLike(480, time.Minute, 11)), trace.Auto)
		if err != nil {
			t.Fatal(err)
		}
		load = load.Scale(1, 1.0/2)

		client, stop := behindGateway(t, sim.GB10FP8, []string{"KNEECAP_REQUEST_LOG=" + logFile})
		served := replay(t, client, load, trace.BlockTokens/2)
		stop()
		recorded, good, lines := recordedGoodput(t, logFile)
		s := served.Levels[0].Summary
		if lines != len(load.Requests) {
			t.Fatalf("the log has %d lines for %d requests", lines, len(load.Requests))
		}
		if s.Rejected == 0 || s.Good == 0 {
			t.Fatalf("the load should overload the engine and still serve some: %+v", s)
		}

		logged, err := trace.ReadFile(logFile, trace.Auto)
		if err != nil {
			t.Fatal(err)
		}
		client, stop = behindGateway(t, sim.GB10FP8, nil)
		again := replay(t, client, logged, trace.BlockTokens)
		stop()
		r := again.Levels[0].Summary
		t.Logf("served: %d requests, %d good, %d refused, goodput %.3f req/s (the client's), recorded %.3f req/s (%d good in the log)",
			len(load.Requests), s.Good, s.Rejected, s.Goodput, recorded, good)
		t.Logf("replayed from the log: %d good, %d refused, goodput %.3f req/s (%.3f of the recorded)",
			r.Good, r.Rejected, r.Goodput, r.Goodput/recorded)
		if math.Abs(r.Goodput/recorded-1) > 0.10 {
			t.Errorf("replayed goodput %.3f req/s is not within 10 %% of the recorded %.3f", r.Goodput, recorded)
		}
	})
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
