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
// refused at once (the limiter would time them out anyway). A class's
// wait (KNEECAP_CLASSES) does the same for its requests, in place of
// KNEECAP_MAX_QUEUE_WAIT.
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
		{"the class's wait 60s", []string{"KNEECAP_CLASSES=chat:wait=60s"}, false, true},
		{"the class's wait 60s over the operator's 2s", []string{"KNEECAP_CLASSES=chat:wait=60s", "KNEECAP_MAX_QUEUE_WAIT=2s"}, false, true},
		{"the class's wait 2s over the operator's 60s", []string{"KNEECAP_CLASSES=chat:wait=2s", "KNEECAP_MAX_QUEUE_WAIT=60s"}, true, false},
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

// A request's queue bound is its class's wait, else KNEECAP_MAX_QUEUE_WAIT,
// else its TTFT target, else its E2E target, else none. In front of the
// simulator at a cap of 1, one long request holds the slot while one
// request of each class queues behind it, before the model has learnt
// anything (so the deadline check lets every one queue): each class's
// request leaves the queue with 429 queue_timeout no sooner than its
// bound, and the class with no bound at all waits for the slot and is
// served.
func TestClassQueueBounds(t *testing.T) {
	type want struct {
		code    int
		atLeast time.Duration // the least time to the answer
	}
	for _, tc := range []struct {
		name string
		env  []string
		want map[string]want // by class
	}{
		{
			"class wait over the operator's bound",
			[]string{"KNEECAP_CLASSES=interactive;batch:ttft=0,tpot=0,wait=200ms", "KNEECAP_MAX_QUEUE_WAIT=3s"},
			map[string]want{"interactive": {http.StatusTooManyRequests, 3 * time.Second}, "batch": {http.StatusTooManyRequests, 200 * time.Millisecond}},
		},
		{
			"class wait over the TTFT target",
			[]string{"KNEECAP_CLASSES=interactive;batch:ttft=0,tpot=0,wait=200ms"},
			map[string]want{"interactive": {http.StatusTooManyRequests, time.Second}, "batch": {http.StatusTooManyRequests, 200 * time.Millisecond}},
		},
		{
			"E2E target without a TTFT target, and no bound",
			[]string{"KNEECAP_CLASSES=interactive;bulk:ttft=0,tpot=0,e2e=300ms;free:ttft=0,tpot=0"},
			map[string]want{"interactive": {http.StatusTooManyRequests, time.Second}, "bulk": {http.StatusTooManyRequests, 300 * time.Millisecond}, "free": {http.StatusOK, 0}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				client, stop := behindSim(t, sim.Config{Profile: sim.GB10BF16, Seed: 1},
					append([]string{"KNEECAP_MAX_CONCURRENCY=1", "KNEECAP_SLO_TTFT=1s", "KNEECAP_SLO_TPOT=100ms", "KNEECAP_CLASS_HEADER=x-kneecap-class"}, tc.env...))
				defer stop()
				send := func(class string, maxTokens int) (int, string, time.Duration) {
					body := fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":%d,"ignore_eos":true,"messages":[{"role":"user","content":"hi"}]}`, maxTokens)
					req, _ := http.NewRequest("POST", "http://gateway/v1/chat/completions", strings.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("X-Kneecap-Class", class)
					start := time.Now()
					resp, err := client.Do(req)
					if err != nil {
						t.Error(err)
						return 0, "", 0
					}
					defer resp.Body.Close()
					_, _ = io.Copy(io.Discard, resp.Body)
					return resp.StatusCode, resp.Header.Get("X-Kneecap-Reason"), time.Since(start)
				}
				type result struct {
					code   int
					reason string
					took   time.Duration
				}
				var wg sync.WaitGroup
				var holder result
				results := map[string]*result{}
				wg.Go(func() {
					holder.code, holder.reason, holder.took = send("interactive", 1000)
				})
				time.Sleep(10 * time.Millisecond) // it holds the slot
				for class := range tc.want {
					r := &result{}
					results[class] = r
					wg.Go(func() { r.code, r.reason, r.took = send(class, 1) })
				}
				wg.Wait()
				if holder.code != http.StatusOK {
					t.Fatalf("the request holding the slot: %d %q", holder.code, holder.reason)
				}
				for class, w := range tc.want {
					r := results[class]
					if r.code != w.code || r.took < w.atLeast {
						t.Errorf("class %s: %d %q after %v, want %d after at least %v", class, r.code, r.reason, r.took, w.code, w.atLeast)
					}
					if r.code == http.StatusTooManyRequests && r.reason != "queue_timeout" {
						t.Errorf("class %s: reason %q, want queue_timeout", class, r.reason)
					}
					if r.code == http.StatusTooManyRequests && r.took >= holder.took {
						t.Errorf("class %s: refused after %v, once the slot was free (held %v)", class, r.took, holder.took)
					}
				}
			})
		})
	}
}
