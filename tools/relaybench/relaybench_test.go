package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestStreamThroughEngine runs the load client against the engine: every
// stream complete, its chunks counted, paced and unpaced.
func TestStreamThroughEngine(t *testing.T) {
	srv := httptest.NewServer(engineHandler())
	defer srv.Close()
	tr := newClientTransport()
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for _, tc := range []struct {
		name string
		w    workload
	}{
		{"paced", workload{streams: 3, perWorker: 2, steadyFrom: 1, chunks: 5, interval: 2 * time.Millisecond, stagger: 10 * time.Millisecond, timeout: 10 * time.Second}},
		{"unpaced", workload{streams: 4, perWorker: 1, chunks: 50, stagger: time.Millisecond, timeout: 10 * time.Second}},
		// Not streamed: one JSON answer after the generation, counted as
		// its stream's events.
		{"whole", workload{streams: 3, perWorker: 2, steadyFrom: 1, chunks: 5, interval: 2 * time.Millisecond, stagger: 10 * time.Millisecond, timeout: 10 * time.Second, whole: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runRound(context.Background(), client, srv.URL, tc.w)
			if len(res) != tc.w.streams*tc.w.perWorker {
				t.Fatalf("%d results, want %d", len(res), tc.w.streams*tc.w.perWorker)
			}
			steady := 0
			for _, r := range res {
				if r.broken {
					t.Errorf("broken stream: %s", r.reason)
				}
				// chunks + finish + usage + [DONE]
				if r.events != tc.w.chunks+3 {
					t.Errorf("%d events, want %d", r.events, tc.w.chunks+3)
				}
				if r.ttfc <= 0 || r.e2e < r.ttfc {
					t.Errorf("ttfc %v, e2e %v", r.ttfc, r.e2e)
				}
				if r.steady {
					steady++
				}
			}
			if want := tc.w.streams * (tc.w.perWorker - tc.w.steadyFrom); steady != want {
				t.Errorf("%d steady streams, want %d", steady, want)
			}
		})
	}
}

// TestBrokenStreams: a stream that stops before [DONE], a non-200 answer,
// and an unreachable relay all count as broken.
func TestBrokenStreams(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Header.Get(hdrChunks) == "2" {
			http.Error(w, "no", http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(chunkBytes) // then ends without [DONE]
	}))
	tr := newClientTransport()
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	w := workload{streams: 1, perWorker: 1, chunks: 1, timeout: 5 * time.Second}
	for _, tc := range []struct {
		name, base, reason string
		chunks             int
	}{
		{"cut short", srv.URL, "no [DONE]", 1},
		{"status", srv.URL, "status 429", 2},
	} {
		w.chunks = tc.chunks
		r := oneStream(context.Background(), client, tc.base, w)
		if !r.broken || r.reason != tc.reason {
			t.Errorf("%s: broken %v reason %q, want %q", tc.name, r.broken, r.reason, tc.reason)
		}
	}
	srv.Close()
	if r := oneStream(context.Background(), client, srv.URL, w); !r.broken || !strings.HasPrefix(r.reason, "request:") {
		t.Errorf("unreachable: broken %v reason %q", r.broken, r.reason)
	}
}

func TestReadStat(t *testing.T) {
	st, err := readStat(os.Getpid())
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	if st.ppid != os.Getppid() {
		t.Errorf("ppid %d, want %d", st.ppid, os.Getppid())
	}
}

func TestPercentile(t *testing.T) {
	d := []time.Duration{5, 1, 4, 2, 3}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 3}, {0.99, 5}, {0.2, 1}, {0, 1}} {
		if got := percentile(d, tc.q); got != tc.want {
			t.Errorf("percentile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if percentile(nil, 0.5) != 0 {
		t.Error("percentile of nothing is not 0")
	}
}

func TestFindValue(t *testing.T) {
	body := "heap profile: ...\n# runtime.MemStats\n# Alloc = 1\n# HeapAlloc = 12345\n# StackInuse = 65536\n"
	if v, ok := findValue(body, "# HeapAlloc = "); !ok || v != 12345 {
		t.Errorf("HeapAlloc %v %v", v, ok)
	}
	if _, ok := findValue(body, "# Mallocs = "); ok {
		t.Error("found a missing field")
	}
}

// TestLoads parses -loads and the -streams x -modes pairs it replaces, and
// checks that unpaced streams of -unpaced-chunks run back to back.
func TestLoads(t *testing.T) {
	got, err := parseLoads(defaultLoads)
	if err != nil {
		t.Fatal(err)
	}
	want := []setting{
		{streams: 100, mode: "paced", interval: 5 * time.Millisecond},
		{streams: 1000, mode: "paced", interval: 20 * time.Millisecond},
		{streams: 50, mode: "unpaced", interval: 20 * time.Millisecond},
	}
	if !slices.Equal(got, want) {
		t.Errorf("parseLoads(%q) = %v, want %v", defaultLoads, got, want)
	}
	if got, err := parseLoads("100x20ms:whole"); err != nil || !slices.Equal(got, []setting{{streams: 100, mode: "whole", interval: 20 * time.Millisecond}}) {
		t.Errorf("parseLoads(100x20ms:whole) = %v, %v", got, err)
	}
	for _, bad := range []string{"100", "x5ms", "100x", "100xfast", "-1x5ms", "100x-5ms", "100x:whole"} {
		if _, err := parseLoads(bad); err == nil {
			t.Errorf("parseLoads(%q): no error", bad)
		}
	}
	cross, err := crossSettings("100,1000", "paced,unpaced", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(cross) != 4 || cross[1] != (setting{streams: 100, mode: "unpaced", interval: 20 * time.Millisecond}) ||
		cross[2] != (setting{streams: 1000, mode: "paced", interval: 50 * time.Millisecond}) {
		t.Errorf("crossSettings = %v", cross)
	}
	c := config{chunks: 64, unpacedChunks: 256, unpacedTotal: 500000}
	w := c.workload(setting{streams: 50, mode: "unpaced", interval: 20 * time.Millisecond})
	if w.chunks != 256 || w.perWorker != 39 || w.steadyFrom != 0 {
		t.Errorf("unpaced workload %+v: want 39 streams of 256 chunks per worker, all counted", w)
	}
	c.unpacedChunks = 0
	if w := c.workload(setting{streams: 50, mode: "unpaced"}); w.chunks != 10000 || w.perWorker != 1 {
		t.Errorf("unpaced workload without -unpaced-chunks %+v: want one stream of 10000 chunks", w)
	}
}
