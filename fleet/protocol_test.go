package fleet

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kneecap/kneecap/proxy"
	"github.com/kneecap/kneecap/proxy/proxytest"
)

// answer is what a client saw of one request.
type answer struct {
	status int
	reason string
	retry  string
	body   string
	err    error
}

func (a answer) complete() bool {
	return a.err == nil && a.status == http.StatusOK && strings.HasSuffix(a.body, "data: [DONE]\n\n")
}

// streamBody carries a 4,000-word prompt (about 20 KiB), larger than
// HAProxy's default buffer: a layer-7 retry needs tune.bufsize above it.
var streamBody = `{"model":"fake","stream":true,"messages":[{"role":"user","content":"` +
	strings.TrimSpace(strings.Repeat("word ", 4000)) + `"}]}`

func post(url string) answer {
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(streamBody))
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, reason: resp.Header.Get(proxy.HeaderReason), retry: resp.Header.Get("Retry-After"), body: string(b), err: err}
}

// TestBalancerProtocol puts real nginx and HAProxy, configured as
// docs/fleet.md shows (deploy/fleet), in front of three kneecaps with a
// static cap of 1 and no queue, and checks what kneecap tells a balancer:
// a refusal is tried on another replica (a 429 by nginx, a 503 with
// KNEECAP_REFUSAL_STATUS=503 by HAProxy 2.6), the client sees a 429 with
// Retry-After and the reason only when every replica refused, and a
// draining replica's 503 is tried elsewhere (HAProxy also hears "drain"
// from the agent).
func TestBalancerProtocol(t *testing.T) {
	for _, name := range []string{"nginx", "haproxy"} {
		t.Run(name, func(t *testing.T) {
			lookBalancer(t, name)
			env := []string{"KNEECAP_MAX_CONCURRENCY=1", "KNEECAP_MAX_QUEUE=0"}
			if name == "haproxy" {
				env = append(env, "KNEECAP_REFUSAL_STATUS=503")
			}
			var reps []*replica
			for i := range 3 {
				eng := &proxytest.Engine{Flavor: proxytest.VLLM, Chunks: 10, Gap: 100 * time.Millisecond}
				reps = append(reps, startReplica(t, "r"+string(rune('1'+i)), replicaConfig{Engine: eng, Env: env, Agent: name == "haproxy"}))
			}
			var b *balancer
			if name == "nginx" {
				b = startNginx(t, reps)
			} else {
				b = startHAProxy(t, reps)
				time.Sleep(1500 * time.Millisecond) // the first agent checks
			}
			url := "http://" + b.addr

			// Replicas full behind the balancer's back: it picks by its own
			// count, which knows nothing of them, and must retry.
			var wg sync.WaitGroup
			fill := func(r *replica) {
				wg.Go(func() {
					if a := post("http://" + r.traffic); !a.complete() {
						t.Errorf("direct request to %s: %d %v", r.name, a.status, a.err)
					}
				})
				waitUntil(t, func() bool { return r.gw.Limiter().Running() == 1 })
			}
			for round := range 6 {
				// Two of three full, the same free one twice in a row, so
				// that the balancer's own rotation hits a full one.
				for i, r := range reps {
					if i != round/2 {
						fill(r)
					}
				}
				if a := post(url); !a.complete() {
					t.Errorf("round %d: two replicas full, one free: got %d %q %v, want a complete stream", round, a.status, a.reason, a.err)
				}
				wg.Wait()
			}

			// Every replica full: the client sees the refusal as a 429.
			for _, r := range reps {
				fill(r)
			}
			a := post(url)
			if a.status != http.StatusTooManyRequests || a.reason != "queue_full" || a.retry == "" || !strings.Contains(a.body, "rate_limit_error") {
				t.Errorf("every replica full: got %d, reason %q, Retry-After %q, body %q; want 429 queue_full with Retry-After", a.status, a.reason, a.retry, a.body)
			}
			wg.Wait()

			// A draining replica: its 503 (and, for HAProxy, its agent's
			// "drain") sends its share elsewhere; the other two serve.
			reps[0].gw.Drain()
			if name == "haproxy" {
				time.Sleep(1500 * time.Millisecond)
			}
			var got [4]answer
			for i := range got {
				wg.Go(func() { got[i] = post(url) })
				time.Sleep(20 * time.Millisecond)
				if i == 1 {
					wg.Wait() // two at a time: the two serving replicas' caps
				}
			}
			wg.Wait()
			for i, a := range got {
				if !a.complete() {
					t.Errorf("one replica draining, request %d: got %d %q %v, want a complete stream", i, a.status, a.reason, a.err)
				}
			}
			if n := reps[0].gw.Limiter().State().Running; n != 0 {
				t.Errorf("the draining replica runs %d", n)
			}
		})
	}
}

// waitUntil polls cond for up to 10 s.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
