package testengine

import (
	"errors"
	"strconv"
	"time"
)

// Load is an engine's load model, for an engine started [WithLoad]: its
// timing then follows the requests it serves, as a real engine's does,
// instead of being fixed per request. The zero value is off: every request
// is timed by its headers alone (no delay without them) and none waits.
//
// At most Slots requests run at once; the rest wait inside the engine in
// the order they came (vLLM's waiting queue, llama.cpp's deferred requests,
// beyond its -np slots). A request that gets a slot first prefills its
// prompt (one token per word, as the engines count usage): Prefill per
// prompt token, one prefill at a time, during which no running request
// makes a token. Then each output token takes
//
//	Token + PerRunning x running + PerKVToken x resident
//
// where running counts the requests holding a slot (its own included) and
// resident the KV tokens held in every slot: each request's prompt and
// output so far and, with KeepKV, the cells a finished request left in its
// slot until another request takes it (llama.cpp's unified cache: every
// step slows with cells no running request uses). A new request takes the
// slot idle longest. Outputs are max_tokens long, as with ignore_eos.
//
// HeaderFirstDelay and HeaderGap, when a request sends them, still set its
// first-token delay (instead of its prefill) and its gap; it still takes a
// slot. GET /metrics reports the slots: running and waiting
// (vllm:num_requests_running and vllm:num_requests_waiting on uvicorn,
// llamacpp:requests_processing and llamacpp:requests_deferred on httplib)
// and the resident KV tokens (vllm:kv_cache_usage_perc of 32,768 tokens;
// llamacpp:kv_cache_tokens and llamacpp:kv_cache_usage_ratio of 8,192).
type Load struct {
	// Slots is the number of requests served at once; zero turns the
	// model off.
	Slots int
	// Token is the time of one output token with nothing else running;
	// PerRunning is added per request running (its own included), and
	// PerKVToken per KV token resident.
	Token, PerRunning, PerKVToken time.Duration
	// Prefill is the time per prompt token.
	Prefill time.Duration
	// KeepKV keeps a finished request's KV cells in its slot until the
	// slot is taken again.
	KeepKV bool
}

// WithLoad times the engine's work by the load model l for its whole life
// (a Restart keeps it).
func WithLoad(l Load) Option { return func(o *options) { o.load = l } }

// Gap is the time of one output token with running requests holding a
// slot and resident KV tokens in the cache.
func (l Load) Gap(running, resident int) time.Duration {
	return l.Token + time.Duration(running)*l.PerRunning + time.Duration(resident)*l.PerKVToken
}

func (l Load) validate() error {
	if l.Slots < 0 || l.Token < 0 || l.PerRunning < 0 || l.PerKVToken < 0 || l.Prefill < 0 {
		return errors.New("load model: negative slots or times")
	}
	return nil
}

// args are the engines' command-line flags for l (none when off).
func (l Load) args() []string {
	if l.Slots == 0 {
		return nil
	}
	ns := func(d time.Duration) string { return strconv.FormatInt(int64(d), 10) }
	a := []string{"--load-slots", strconv.Itoa(l.Slots), "--load-token-ns", ns(l.Token),
		"--load-per-running-ns", ns(l.PerRunning), "--load-per-kv-ns", ns(l.PerKVToken), "--load-prefill-ns", ns(l.Prefill)}
	if l.KeepKV {
		a = append(a, "--load-keep-kv")
	}
	return a
}
