package proxy

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/proxy/proxytest"
	"github.com/kneecap/kneecap/slo"
)

func TestRejection(t *testing.T) {
	eng := &proxytest.Engine{Chunks: 2, FirstDelay: 300 * time.Millisecond}
	lim := admission.NewLimiter(admission.Config{Limit: 1, MaxQueue: 0})
	s := newSetup(t, eng, Config{Limiter: lim})
	wait := holdTheSlot(t, s, lim)
	resp := post(t, s.gateway.URL, "/v1/chat/completions", chatBody)
	body := readAll(t, resp)
	wait()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || resp.Header.Get(HeaderReason) != "queue_full" ||
		!strings.Contains(body, `"type":"rate_limit_error"`) || !strings.Contains(body, `"code":"queue_full"`) {
		t.Fatalf("status %d headers %v body %s", resp.StatusCode, resp.Header, body)
	}
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	var rejected int
	for _, r := range s.rec.records {
		if r.Outcome == slo.Rejected && r.Reason == "queue_full" && r.Status == 429 {
			rejected++
		}
	}
	if rejected != 1 || lim.Running() != 0 {
		t.Fatalf("rejected %d, running %d", rejected, lim.Running())
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "1", 300 * time.Millisecond: "1", time.Second: "1", 1001 * time.Millisecond: "2", 15 * time.Second: "15"} {
		if got := retryAfterSeconds(d); got != want {
			t.Errorf("retryAfterSeconds(%v) = %s, want %s", d, got, want)
		}
	}
}

// TestQueueThroughProxy checks the queue at the HTTP edge: a request that
// waits its own TTFT target gets 429 queue_timeout; a queued request whose
// client leaves is gone from the queue at once.
func TestQueueThroughProxy(t *testing.T) {
	eng := &proxytest.Engine{Chunks: 2, FirstDelay: 2 * time.Second}
	lim := admission.NewLimiter(admission.Config{Limit: 1, MaxQueue: 10})
	s := newSetup(t, eng, Config{Limiter: lim})
	held := make(chan struct{})
	go func() {
		defer close(held)
		readAll(t, post(t, s.gateway.URL, "/v1/chat/completions", chatBody))
	}()
	for lim.Running() == 0 {
		time.Sleep(time.Millisecond)
	}

	// Waits its 100 ms TTFT target in the queue, then is refused.
	resp := post(t, s.gateway.URL, "/v1/chat/completions", chatBody, "x-slo-ttft-ms", "100")
	body := readAll(t, resp)
	if resp.StatusCode != 429 || resp.Header.Get(HeaderReason) != "queue_timeout" || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(body, `"code":"queue_timeout"`) {
		t.Fatalf("status %d headers %v body %s", resp.StatusCode, resp.Header, body)
	}

	// A client that leaves the queue.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.gateway.URL+"/v1/chat/completions", strings.NewReader(chatBody))
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	for lim.State().Queued == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-errc
	for deadline := time.Now().Add(5 * time.Second); lim.State().Queued != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("cancelled request still queued")
		}
	}
	<-held
	outcomes := map[string]int{}
	for range 3 {
		s.rec.last(t) // wait for all three records
	}
	s.rec.mu.Lock()
	for _, r := range s.rec.records {
		outcomes[r.Outcome.String()+"/"+r.Reason]++
	}
	s.rec.mu.Unlock()
	if outcomes["rejected/queue_timeout"] != 1 || outcomes["client_cancelled/"] != 1 || outcomes["good/"] != 1 {
		t.Fatalf("outcomes %v", outcomes)
	}
}

// Under pacing (admission.Limiter.SetPacing) the proxy tells the limiter
// when a stream's first output chunk arrives: the next request waits in
// the queue until then, though a slot is free. A request relayed whole
// holds nobody back (its first token cannot be seen).
func TestPacingEndsAtTheFirstChunk(t *testing.T) {
	const first, gap = 300 * time.Millisecond, 3 * time.Second
	eng := &proxytest.Engine{Chunks: 2, FirstDelay: first, Gap: gap}
	lim := admission.NewLimiter(admission.Config{Limit: 4, MaxQueue: 10})
	lim.SetPacing(1, time.Hour)
	s := newSetup(t, eng, Config{Limiter: lim})

	// Relayed whole: the next stream is not held back by it.
	done := make(chan struct{})
	go func() {
		defer close(done)
		readAll(t, post(t, s.gateway.URL, "/v1/chat/completions", `{"model":"m","messages":[],"prompt_logprobs":1}`))
	}()
	for lim.Running() == 0 {
		time.Sleep(time.Millisecond)
	}
	if st := lim.State(); st.Prefilling != 0 {
		t.Fatalf("a non-streamed request counts as prefilling: %+v", st)
	}

	go func() {
		readAll(t, post(t, s.gateway.URL, "/v1/chat/completions", chatBody))
	}()
	for lim.State().Prefilling == 0 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	second := post(t, s.gateway.URL, "/v1/chat/completions", chatBody)
	readAll(t, second)
	<-done
	var queued []time.Duration
	for range 3 {
		s.rec.last(t)
	}
	s.rec.mu.Lock()
	for _, r := range s.rec.records {
		if r.Streamed && r.QueueWait > 0 {
			queued = append(queued, r.QueueWait)
		}
		// The running count its chunks were made at: itself and the
		// other stream, at times the non-streamed request.
		if r.Streamed && (r.MeanRunning < 1 || r.MeanRunning > 3) {
			t.Errorf("mean running %v of a stream, want between 1 and 3", r.MeanRunning)
		}
	}
	s.rec.mu.Unlock()
	// The second stream queued though slots were free, and was granted at
	// the first one's first chunk (about `first` later), not when the
	// first one ended (`gap` after that) nor at the pacing bound.
	if len(queued) != 1 || queued[0] >= first+gap*2/3 || time.Since(start) < queued[0] {
		t.Fatalf("queue waits of streams %v; want one, near %v", queued, first)
	}
	if st := lim.State(); st.Running != 0 || st.Prefilling != 0 {
		t.Fatalf("end state %+v", st)
	}
}

// The OpenAI SDKs' count of earlier attempts (X-Stainless-Retry-Count)
// reaches admission as Request.Retries; a header that is absent, not a
// small count, too long or negative counts as a client that does not say
// (-1), never as an error or a huge count.
func TestRetryCountHeaderReachesAdmission(t *testing.T) {
	eng := &proxytest.Engine{Chunks: 2, FirstDelay: 2 * time.Second}
	seen := make(chan int, 1)
	lim := admission.NewLimiter(admission.Config{Limit: 1, MaxQueue: 10, Hooks: admission.Hooks{
		Gate: gateFunc(func(r admission.Request, _ admission.State) (bool, time.Duration) {
			seen <- r.Retries
			return false, time.Second
		}),
	}})
	s := newSetup(t, eng, Config{Limiter: lim})
	wait := holdTheSlot(t, s, lim)
	for header, want := range map[string]int{
		"": -1, "0": 0, "2": 2, "-1": -1, "abc": -1, "99999": -1, "1e3": -1, "0x1": -1,
		strings.Repeat("9", 4096): -1, "1 2": -1, " 3 ": 3,
	} {
		var hdr []string
		if header != "" {
			hdr = []string{"X-Stainless-Retry-Count", header}
		}
		resp := post(t, s.gateway.URL, "/v1/chat/completions", chatBody, hdr...)
		readAll(t, resp)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("header %.20q: status %d, want 429 from the Gate", header, resp.StatusCode)
		}
		if got := <-seen; got != want {
			t.Errorf("header %.20q: Retries %d, want %d", header, got, want)
		}
	}
	wait()
}

type gateFunc func(admission.Request, admission.State) (bool, time.Duration)

func (f gateFunc) Admit(r admission.Request, s admission.State) (bool, time.Duration) { return f(r, s) }
