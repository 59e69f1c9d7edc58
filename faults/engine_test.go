package faults

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kneecap/kneecap/testengine"
)

// faultEnv are the gateway's bounds in the fault cases: short, so that a
// hang is answered within the test's patience.
var faultEnv = []string{
	"KNEECAP_MAX_CONCURRENCY=8", "KNEECAP_SLO_TTFT=10s", "KNEECAP_SLO_TPOT=1s",
	"KNEECAP_FIRST_TOKEN_TIMEOUT=1s", "KNEECAP_RESPONSE_TIMEOUT=2s",
	"KNEECAP_STREAM_IDLE_TIMEOUT=1s", "KNEECAP_CLIENT_WRITE_TIMEOUT=1s",
}

// TestEngineFaults sends, through the gateway, requests that make the
// engine fail in each way it can, and checks what the client saw and that
// nothing is left: no slot held, nothing queued, nothing running in the
// engine (when it lives), no goroutine (goleak, when the package ends).
func TestEngineFaults(t *testing.T) {
	type want struct {
		status  int    // the HTTP status the client gets
		code    string // the error code it gets ("" for a complete answer)
		events  int    // at least this many data events before the error
		maxWait time.Duration
	}
	const (
		stream = "stream"      // streamed
		whole  = "reassembled" // not streamed: streamed from the engine and reassembled
		relay  = "whole"       // not streamed, with a field that keeps it whole: relayed whole
	)
	cases := []struct {
		fault string
		how   string
		want  want
	}{
		{testengine.FaultKillBeforeHeaders, stream, want{502, "upstream_unreachable", 0, 5 * time.Second}},
		{testengine.FaultKillAfterHeaders, stream, want{200, "stream_broken", 0, 5 * time.Second}},
		{testengine.FaultKillMidStream, stream, want{200, "stream_broken", 3, 5 * time.Second}},
		{testengine.FaultHangBeforeHeaders, stream, want{504, "first_token_timeout", 0, 5 * time.Second}},
		{testengine.FaultHangAfterHeaders, stream, want{200, "first_token_timeout", 0, 5 * time.Second}},
		{testengine.FaultHangMidStream, stream, want{200, "stream_idle_timeout", 3, 5 * time.Second}},
		{testengine.FaultStatus500, stream, want{500, "*", 0, 5 * time.Second}},
		{testengine.FaultStatus400, stream, want{400, "*", 0, 5 * time.Second}},
		{testengine.FaultNonJSON500, stream, want{500, "engine_status", 0, 5 * time.Second}},
		{testengine.FaultNonJSON200, stream, want{502, "engine_bad_response", 0, 5 * time.Second}},
		{testengine.FaultBrokenSSE, stream, want{200, "stream_broken", 1, 5 * time.Second}},
		{testengine.FaultTruncated, stream, want{200, "stream_broken", 3, 5 * time.Second}},
		{testengine.FaultHugeLine, stream, want{200, "event_too_large", 1, 10 * time.Second}},
		// Not streamed, reassembled: nothing reaches the client before the
		// end, so every fault is answered with a status.
		{testengine.FaultKillAfterHeaders, whole, want{502, "stream_broken", 0, 5 * time.Second}},
		{testengine.FaultKillMidStream, whole, want{502, "stream_broken", 0, 5 * time.Second}},
		{testengine.FaultHangBeforeHeaders, whole, want{504, "first_token_timeout", 0, 5 * time.Second}},
		{testengine.FaultHangAfterHeaders, whole, want{504, "first_token_timeout", 0, 5 * time.Second}},
		{testengine.FaultHangMidStream, whole, want{504, "stream_idle_timeout", 0, 5 * time.Second}},
		{testengine.FaultStatus503, whole, want{503, "*", 0, 5 * time.Second}},
		{testengine.FaultNonJSON200, whole, want{502, "engine_bad_response", 0, 5 * time.Second}},
		{testengine.FaultBrokenSSE, whole, want{502, "engine_bad_response", 0, 5 * time.Second}},
		{testengine.FaultTruncated, whole, want{502, "stream_broken", 0, 5 * time.Second}},
		{testengine.FaultHugeLine, whole, want{502, "event_too_large", 0, 10 * time.Second}},
		// Relayed whole: bounded by the response timeout to its headers.
		{testengine.FaultHangBeforeHeaders, relay, want{504, "response_timeout", 0, 6 * time.Second}},
		{testengine.FaultHangAfterHeaders, relay, want{504, "stream_idle_timeout", 0, 5 * time.Second}},
		{testengine.FaultStatus503, relay, want{503, "*", 0, 5 * time.Second}},
		{testengine.FaultNonJSON200, relay, want{502, "engine_bad_response", 0, 5 * time.Second}},
	}
	for _, kind := range testengine.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			eng := testengine.Start(t, kind)
			h := startGateway(t, eng, faultEnv...)
			c := &http.Client{Transport: &http.Transport{}}
			t.Cleanup(c.CloseIdleConnections)
			// A plain request first, so that the cases below run on reused
			// connections as they would in production.
			if s, err := request(context.Background(), c, h.traffic, true, 4); err != nil || !s.complete {
				t.Fatalf("plain request: %v %s", err, s)
			}
			for _, tc := range cases {
				name := tc.fault
				if tc.how != stream {
					name += " " + tc.how
				}
				t.Run(name, func(t *testing.T) {
					heap := heapAfterGC()
					start := time.Now()
					body := fmt.Sprintf(chatStream, 16)
					switch tc.how {
					case whole:
						body = fmt.Sprintf(chatWhole, 16)
					case relay:
						body = fmt.Sprintf(chatWholeOnly, 16)
					}
					s, err := send(context.Background(), c, h.traffic, body, testengine.HeaderFault, tc.fault)
					took := time.Since(start)
					if err != nil {
						t.Fatalf("client error after %v: %v (%s)", took, err, s)
					}
					if !s.answered() {
						t.Errorf("neither a complete answer nor an OpenAI-shaped error: %s", s)
					}
					if s.status != tc.want.status || (tc.want.code != "*" && s.errCode != tc.want.code) || (tc.want.code == "*" && s.errType == "") || s.events < tc.want.events {
						t.Errorf("got %s\nwant status %d, error code %q after at least %d events", s, tc.want.status, tc.want.code, tc.want.events)
					}
					if took > tc.want.maxWait {
						t.Errorf("answered after %v, want within %v", took, tc.want.maxWait)
					}
					if strings.HasPrefix(tc.fault, "kill-") {
						_ = eng.Wait() // the engine killed itself: start it again
						eng.Restart(t)
					}
					settle(t, h, eng)
					if grew := int64(heapAfterGC()) - int64(heap); grew > 16<<20 {
						t.Errorf("heap grew by %d MiB", grew>>20)
					}
					// The gateway still serves.
					if s, err := request(context.Background(), c, h.traffic, true, 4); err != nil || !s.complete {
						t.Fatalf("after the fault: %v %s", err, s)
					}
				})
			}
		})
	}
}

// TestEngineRestart kills the engine, checks that requests are answered at
// once (502, not a hang) and /readyz turns 503 while it is down, then
// restarts it and checks that the gateway serves again with what it had
// learned: errors while the engine was down are not latency samples, so
// the cap is not dragged down by them.
func TestEngineRestart(t *testing.T) {
	for _, kind := range testengine.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			eng := testengine.Start(t, kind)
			// The adaptive controller (no static cap): what it learned must
			// survive the engine's absence.
			h := startGateway(t, eng, faultEnv[1:]...)
			c := &http.Client{Transport: &http.Transport{}}
			t.Cleanup(c.CloseIdleConnections)
			for range 5 {
				if s, err := request(context.Background(), c, h.traffic, true, 4); err != nil || !s.complete {
					t.Fatalf("before: %v %s", err, s)
				}
			}
			if code := getStatus(t, h.admin+"/readyz"); code != 200 {
				t.Fatalf("/readyz %d with the engine up", code)
			}
			limit := h.g.Limiter().Limit()
			eng.Kill()
			for i := range 20 {
				start := time.Now()
				s, err := request(context.Background(), c, h.traffic, i%2 == 0, 4)
				if err != nil || s.status != 502 || s.errCode != "upstream_unreachable" {
					t.Fatalf("engine down: %v %s", err, s)
				}
				if took := time.Since(start); took > 2*time.Second {
					t.Fatalf("engine down: answered after %v", took)
				}
			}
			if code := getStatus(t, h.admin+"/readyz"); code != 503 {
				t.Fatalf("/readyz %d with the engine down", code)
			}
			eng.Restart(t)
			if code := getStatus(t, h.admin+"/readyz"); code != 200 {
				t.Fatalf("/readyz %d after the restart", code)
			}
			for range 5 {
				if s, err := request(context.Background(), c, h.traffic, true, 4); err != nil || !s.complete {
					t.Fatalf("after the restart: %v %s", err, s)
				}
			}
			if got := h.g.Limiter().Limit(); got < limit {
				t.Errorf("cap %d after the restart, %d before: the errors lowered it", got, limit)
			}
			if n := h.counter(t, "kneecap_requests_total", "outcome", "engine_error"); n != 20 {
				t.Errorf("%v engine errors counted, want 20", n)
			}
			settle(t, h, eng)
		})
	}
}

func getStatus(t *testing.T, u string) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}
