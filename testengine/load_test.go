package testengine

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// outputs streams one chat request and returns when each output chunk
// arrived; started, when set, is closed at the first.
func outputs(t *testing.T, e *Engine, words, tokens int, started chan<- struct{}) []time.Time {
	t.Helper()
	body := fmt.Sprintf(`{"stream":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`,
		tokens, strings.TrimSpace(strings.Repeat("w ", words)))
	resp, err := post(t.Context(), newClient(t), e, "/v1/chat/completions", body)
	if err != nil {
		t.Errorf("POST: %v", err)
		return nil
	}
	defer func() { _ = resp.Body.Close() }()
	var at []time.Time
	_, err = readEvents(resp.Body, func(d string) {
		if d == "[DONE]" {
			return
		}
		var c chunk
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Errorf("chunk %q: %v", d, err)
		}
		if _, ok := c.content(); ok {
			at = append(at, time.Now())
			if len(at) == 1 && started != nil {
				close(started)
			}
		}
	})
	if err != nil || len(at) != tokens {
		t.Errorf("%d outputs of %d, %v", len(at), tokens, err)
	}
	return at
}

// meanGap is the mean time between successive outputs.
func meanGap(at []time.Time) time.Duration {
	if len(at) < 2 {
		return 0
	}
	return at[len(at)-1].Sub(at[0]) / time.Duration(len(at)-1)
}

// metric returns the value of the first line of /metrics that starts with
// name (labels included), as text.
func metric(t *testing.T, e *Engine, name string) string {
	t.Helper()
	code, body, err := get(t, e, "/metrics", 5*time.Second, 1<<20)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("/metrics has no %s:\n%s", name, body)
	return ""
}

// The names of running and waiting requests and of resident KV tokens.
var (
	runningName = map[Kind]string{Uvicorn: `vllm:num_requests_running{engine="0",model_name="test"}`, HTTPLib: "llamacpp:requests_processing"}
	waitingName = map[Kind]string{Uvicorn: `vllm:num_requests_waiting{engine="0",model_name="test"}`, HTTPLib: "llamacpp:requests_deferred"}
	kvName      = map[Kind]string{Uvicorn: `vllm:kv_cache_usage_perc{engine="0",model_name="test"}`, HTTPLib: "llamacpp:kv_cache_tokens"}
)

// number formats a metric's value as each engine writes it: Python's
// repr(float) on uvicorn, printf's %g on httplib.
func number(k Kind, v float64) string {
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if k == Uvicorn && !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}

// A request's gaps grow while a second one runs beside it, and the second
// one's are those of two running requests.
func TestLoadGapGrowsWithRunning(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		l := Load{Slots: 4, Token: 20 * time.Millisecond, PerRunning: 20 * time.Millisecond}
		e := Start(t, k, WithLoad(l))
		started := make(chan struct{})
		first := make(chan []time.Time, 1)
		go func() { first <- outputs(t, e, 1, 30, started) }()
		<-started
		time.Sleep(250 * time.Millisecond) // the first alone
		second := outputs(t, e, 1, 8, nil)
		a := <-first
		var alone []time.Time
		for _, at := range a {
			if at.Before(second[0]) {
				alone = append(alone, at)
			}
		}
		if g := meanGap(alone); len(alone) < 4 || g >= l.Gap(2, 0) {
			t.Errorf("alone: %d outputs, mean gap %v, want under %v", len(alone), g, l.Gap(2, 0))
		}
		if g := meanGap(second); g < l.Gap(2, 0)-2*time.Millisecond {
			t.Errorf("beside the first: mean gap %v, want %v", g, l.Gap(2, 0))
		}
	})
}

// A request beyond the slots waits in the engine until a slot frees, and
// /metrics shows it waiting.
func TestLoadBeyondTheSlotsWaits(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		e := Start(t, k, WithLoad(Load{Slots: 1, Token: 20 * time.Millisecond}))
		started := make(chan struct{})
		first := make(chan []time.Time, 1)
		go func() { first <- outputs(t, e, 1, 25, started) }()
		<-started
		second := make(chan []time.Time, 1)
		sent := time.Now()
		go func() { second <- outputs(t, e, 1, 2, nil) }()
		deadline := time.Now().Add(5 * time.Second)
		for metric(t, e, waitingName[k]) != number(k, 1) {
			if time.Now().After(deadline) {
				t.Fatalf("no request waiting: %s %s", waitingName[k], metric(t, e, waitingName[k]))
			}
			time.Sleep(10 * time.Millisecond)
		}
		if got := metric(t, e, runningName[k]); got != number(k, 1) {
			t.Errorf("%s = %s, want 1", runningName[k], got)
		}
		// The first has 24 outputs of 20ms to go: the second waits for them.
		if b := <-second; len(b) == 0 || b[0].Sub(sent) < 400*time.Millisecond {
			t.Errorf("the second request did not wait for the first: %v", b)
		}
		<-first
		if got := metric(t, e, waitingName[k]); got != number(k, 0) {
			t.Errorf("%s = %s after both, want 0", waitingName[k], got)
		}
	})
}

// A prefill stalls every running request for its length.
func TestLoadPrefillStallsOthers(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		l := Load{Slots: 2, Token: 10 * time.Millisecond, Prefill: time.Millisecond}
		e := Start(t, k, WithLoad(l))
		started := make(chan struct{})
		first := make(chan []time.Time, 1)
		go func() { first <- outputs(t, e, 1, 40, started) }()
		<-started
		sent := time.Now()
		long := outputs(t, e, 300, 2, nil) // 300 ms of prefill
		a := <-first
		if len(long) > 0 && long[0].Sub(sent) < 300*time.Millisecond {
			t.Errorf("a 300-word prompt's first output after %v, want >= 300ms", long[0].Sub(sent))
		}
		var most time.Duration
		for i := 1; i < len(a); i++ {
			most = max(most, a[i].Sub(a[i-1]))
		}
		if most < 290*time.Millisecond {
			t.Errorf("the longest gap of the running request was %v: not stalled by the 300ms prefill", most)
		}
	})
}

// With KeepKV a finished request's cells stay resident and slow the next
// request in another slot; /metrics counts them.
func TestLoadKeptCellsSlowTheNext(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		l := Load{Slots: 2, Token: 5 * time.Millisecond, PerKVToken: time.Millisecond, KeepKV: true}
		e := Start(t, k, WithLoad(l))
		outputs(t, e, 40, 2, nil) // leaves 42 cells
		want := map[Kind]float64{Uvicorn: 42.0 / 32768, HTTPLib: 42}[k]
		if got := metric(t, e, kvName[k]); got != number(k, want) {
			t.Errorf("%s = %s after one request, want %s", kvName[k], got, number(k, want))
		}
		next := outputs(t, e, 1, 6, nil)
		if g, least := meanGap(next), l.Gap(1, 42); g < least {
			t.Errorf("the next request's mean gap %v, want at least %v", g, least)
		}
	})
}
