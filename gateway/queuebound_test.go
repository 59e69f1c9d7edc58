package gateway

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kneecap/kneecap/sim"
)

// The operator's queue bound wins over the deadline check: in front of the
// simulator at a cap of 1 (TTFT target 1s, each request about 0.6s on the
// engine), a burst of eight requests after the model has learnt is partly
// refused at once for a predicted TTFT miss (429, reason deadline) when
// KNEECAP_MAX_QUEUE_WAIT is left to the targets; with it set to 60s every
// request waits its turn and is served, the last ones after more than the
// TTFT target in the queue. With 2s, longer than the target but shorter
// than the burst needs, the requests predicted to wait beyond it are
// refused at once (the limiter would time them out anyway).
func TestOperatorQueueBoundWins(t *testing.T) {
	for _, tc := range []struct {
		name         string
		env          []string
		wantDeadline bool // some refused with reason deadline
		wantAllOK    bool
	}{
		{"left to the targets", nil, true, false},
		{"set to 60s", []string{"KNEECAP_MAX_QUEUE_WAIT=60s"}, false, true},
		{"set to 2s", []string{"KNEECAP_MAX_QUEUE_WAIT=2s"}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				codes, reasons, maxTTFT := queueBoundBurst(t, tc.env)
				ok, deadline := 0, 0
				for i, c := range codes {
					if c == http.StatusOK {
						ok++
					}
					if reasons[i] == "deadline" {
						deadline++
					}
				}
				if (deadline > 0) != tc.wantDeadline || (ok == len(codes)) != tc.wantAllOK {
					t.Errorf("codes %v reasons %q: %d served, %d refused for the deadline", codes, reasons, ok, deadline)
				}
				if tc.wantAllOK && maxTTFT <= time.Second {
					t.Errorf("slowest first token after %v: the burst never queued past the TTFT target", maxTTFT)
				}
			})
		})
	}
}

// queueBoundBurst runs the gateway (cap 1, the given settings) in front of
// the simulator: eight requests one after another so that the model
// learns, then eight at once. It returns the burst's status codes, their
// refusal reasons and the slowest time to the first byte of a 200's body.
func queueBoundBurst(t *testing.T, env []string) (codes []int, reasons []string, maxTTFT time.Duration) {
	client, stop := behindSim(t, sim.Config{Profile: sim.GB10BF16, Seed: 1},
		append([]string{"KNEECAP_MAX_CONCURRENCY=1", "KNEECAP_SLO_TTFT=1s", "KNEECAP_SLO_TPOT=100ms"}, env...))
	defer stop()
	body := fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":40,"ignore_eos":true,"messages":[{"role":"user","content":%q}]}`,
		strings.Repeat("w ", 3000))
	send := func() (int, string, time.Duration) {
		start := time.Now()
		resp, err := client.Post("http://gateway/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return 0, "", 0
		}
		defer resp.Body.Close()
		var first time.Duration
		buf := make([]byte, 1)
		if _, err := resp.Body.Read(buf); err == nil {
			first = time.Since(start)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.Header.Get("X-Kneecap-Reason"), first
	}
	for range 8 {
		if c, _, _ := send(); c != http.StatusOK {
			t.Fatalf("learning request: status %d", c)
		}
	}
	codes, reasons = make([]int, 8), make([]string, 8)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range 8 {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * time.Millisecond) // a fixed order of arrival
			c, r, first := send()
			mu.Lock()
			codes[i], reasons[i] = c, r
			if c == http.StatusOK {
				maxTTFT = max(maxTTFT, first)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return codes, reasons, maxTTFT
}
