package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// Profile is the engine being simulated: its memory limits, its scheduler
// budget and the cost of one step. A step that schedules n sequences, attends
// to kv tokens of KV cache and prefills p prompt tokens takes
//
//	StepBase + n*StepPerSeq + kv*StepPerKVToken + p*StepPerPrefillToken
//	         + c*StepPerCachedToken
//
// times the run-time step factor ([Sim.SetStepFactor]), divided by the time
// scale. StepBase is reading the weights once (bound by memory bandwidth);
// StepPerSeq and StepPerKVToken are what each sequence adds (for a
// mixture-of-experts model, the extra experts its token activates, and its KV
// cache); StepPerPrefillToken is the compute of a prompt token. c is the
// number of tokens resident in the prefix cache (see PrefixCacheTokens).
type Profile struct {
	// Name is the profile's name (--profile).
	Name string
	// Model is the served model name, as /v1/models reports it.
	Model string

	// MaxNumSeqs is the most sequences running at once (vLLM's
	// max_num_seqs); the rest wait in the engine's FCFS queue.
	MaxNumSeqs int
	// KVCacheTokens is the KV-cache capacity in tokens. When a running
	// sequence needs a slot and none is free, the newest running sequence
	// is preempted and later recomputed.
	KVCacheTokens int
	// MaxBatchedTokens is the per-step token budget (vLLM's
	// max_num_batched_tokens): one per decoding sequence, the rest for
	// chunked prefill.
	MaxBatchedTokens int
	// MaxModelLen bounds prompt plus output tokens of one request; it is
	// also the default for max_tokens (minus the prompt).
	MaxModelLen int

	StepBase            time.Duration
	StepPerSeq          time.Duration
	StepPerKVToken      time.Duration
	StepPerPrefillToken time.Duration

	// PrefixCacheTokens, when positive, keeps the tokens of finished
	// sequences resident for prefix reuse, as llama.cpp's server and vLLM's
	// prefix cache do, up to that many tokens (the oldest are evicted
	// first); each resident token adds StepPerCachedToken to every step, so
	// the engine's per-token time grows over a run as the cache fills and
	// is the same again only on a fresh engine. Zero means no such cache.
	PrefixCacheTokens  int
	StepPerCachedToken time.Duration
	// UnifiedCache makes the prefix cache llama.cpp's unified KV cache
	// (its server with --kv-unified, the default since n_parallel became
	// auto): MaxNumSeqs are its slots, and a sequence that ends, finished
	// or cancelled, leaves its computed cells in its slot. They stay until
	// the slot takes a new request (the slot idle longest goes first), or
	// until running sequences need the room (the oldest cells go first;
	// they count against KVCacheTokens), or until [Sim.FlushCache]; at
	// most PrefixCacheTokens of them. So the resident cells, and the time
	// of every step, go up while slots sit idle and down as they are
	// reused, with nothing a gateway sees in its own traffic; the
	// llamacpp flavour publishes them in llamacpp:kv_cache_tokens. False
	// keeps the older model above (a resident total that only grows, up
	// to PrefixCacheTokens, beside KVCacheTokens).
	UnifiedCache bool

	// PrefixCaching turns on the hashed prefix cache of vLLM (automatic
	// prefix caching) and SGLang (RadixAttention): each full block of
	// PrefixBlockTokens prompt tokens is named by a hash of the prompt up
	// to its end; a block a running sequence computed is held while it
	// runs and stays cached after it ends, within KVCacheTokens, until
	// running sequences need the room (the block freed longest ago goes
	// first). A new request skips the prefill of its longest cached
	// prefix (at least one token is computed) and reports those tokens
	// (usage's prompt_tokens_details.cached_tokens; llama.cpp's
	// timings.cache_n). With UnifiedCache it is llama.cpp's instead: a
	// request takes the idle slot whose previous prompt shares the longest
	// prefix with its own (more than a tenth of it) and reuses those
	// cells. Off by default, as every calibration was made without it.
	PrefixCaching bool
	// PrefixBlockTokens is the block size; 0 means the flavour's: 16
	// (vLLM's default), 4 for sglang (its radix tree matches single
	// tokens), 16 for llamacpp.
	PrefixBlockTokens int

	// MeanOutputTokens is the mean of the output length drawn (exponential,
	// seeded, capped by max_tokens, at least 1) when a request does not set
	// ignore_eos.
	MeanOutputTokens int
}

// Validate reports the first parameter that cannot work.
func (p Profile) Validate() error {
	switch {
	case p.MaxNumSeqs < 1:
		return errors.New("max_num_seqs must be at least 1")
	case p.MaxModelLen < 2:
		return errors.New("max_model_len must be at least 2")
	case p.KVCacheTokens < p.MaxModelLen:
		return fmt.Errorf("kv_cache_tokens (%d) must hold one sequence of max_model_len (%d)", p.KVCacheTokens, p.MaxModelLen)
	case p.MaxBatchedTokens < 1:
		return errors.New("max_batched_tokens must be at least 1")
	case p.StepBase < 0 || p.StepPerSeq < 0 || p.StepPerKVToken < 0 || p.StepPerPrefillToken < 0 || p.StepPerCachedToken < 0:
		return errors.New("step costs must not be negative")
	case p.StepBase+p.StepPerSeq <= 0:
		return errors.New("a step must take some time: step_base + step_per_seq > 0")
	case p.PrefixCacheTokens < 0:
		return errors.New("prefix_cache_tokens must not be negative")
	case p.PrefixBlockTokens < 0:
		return errors.New("prefix_block_tokens must not be negative")
	case p.MeanOutputTokens < 1:
		return errors.New("mean_output_tokens must be at least 1")
	}
	return nil
}

// StepTime is the modelled duration of one step with an empty prefix
// cache, before the step factor and the time scale.
func (p Profile) StepTime(seqs, kvTokens, prefillTokens int) time.Duration {
	return p.StepBase + time.Duration(seqs)*p.StepPerSeq +
		time.Duration(kvTokens)*p.StepPerKVToken +
		time.Duration(prefillTokens)*p.StepPerPrefillToken
}

// CachedStepTime is StepTime with cached tokens resident in the prefix
// cache (at most PrefixCacheTokens count).
func (p Profile) CachedStepTime(seqs, kvTokens, prefillTokens, cached int) time.Duration {
	return p.StepTime(seqs, kvTokens, prefillTokens) + time.Duration(min(cached, p.PrefixCacheTokens))*p.StepPerCachedToken
}

// The built-in profiles. Their parameters and how they were fitted are in
// docs/sim-calibration.md; the calibration test (calibrate_test.go) checks them against
// the brief's measurements.
var (
	// GB10BF16 is Qwen3-30B-A3B in BF16 on an NVIDIA GB10 (the brief's
	// measurements). The per-sequence cost of a step is dominated by
	// attention over its KV cache (StepPerKVToken, fitted), so long contexts
	// make every step slower; prefill costs 158 us per prompt token (the
	// brief's 163 ms TTFT for 1000 tokens at concurrency 1).
	GB10BF16 = Profile{
		Name: "gb10-bf16", Model: "Qwen/Qwen3-30B-A3B",
		MaxNumSeqs: 4096, KVCacheTokens: 500_000, MaxBatchedTokens: 32768, MaxModelLen: 40960,
		StepBase: 1800 * time.Microsecond, StepPerSeq: 200 * time.Microsecond,
		StepPerKVToken: 2200 * time.Nanosecond, StepPerPrefillToken: 158 * time.Microsecond,
		MeanOutputTokens: 256,
	}
	// GB10FP8 is the same model in FP8: half the weight bytes (base and
	// per-sequence costs), twice the GEMM rate (prefill), and attention over
	// the KV cache fitted to the brief's FP8 column (a third of BF16's).
	GB10FP8 = Profile{
		Name: "gb10-fp8", Model: "Qwen/Qwen3-30B-A3B-FP8",
		MaxNumSeqs: 4096, KVCacheTokens: 800_000, MaxBatchedTokens: 32768, MaxModelLen: 40960,
		StepBase: 900 * time.Microsecond, StepPerSeq: 100 * time.Microsecond,
		StepPerKVToken: 733 * time.Nanosecond, StepPerPrefillToken: 79 * time.Microsecond,
		MeanOutputTokens: 256,
	}
	// L48B is an 8B dense model in BF16 on an NVIDIA L4: one decode step
	// reads 16.41 GB at 300 GB/s (54.7 ms at least; 60.16 ms measured at
	// batch 1), and each token of KV cache adds 128 KiB read per step.
	L48B = Profile{
		Name: "l4-8b", Model: "meta-llama/Llama-3.1-8B-Instruct",
		MaxNumSeqs: 256, KVCacheTokens: 28_000, MaxBatchedTokens: 2048, MaxModelLen: 8192,
		StepBase: 59_500 * time.Microsecond, StepPerSeq: 200 * time.Microsecond,
		StepPerKVToken: 437 * time.Nanosecond, StepPerPrefillToken: 250 * time.Microsecond,
		MeanOutputTokens: 256,
	}
	// H1008B is Llama 3.1 8B in BF16 on one H100 80GB under vLLM: a step
	// reads 16 GB of weights at 3.35 TB/s (4.8 ms; 7 ms with the engine's
	// own work per step), each running sequence adds its sampling and
	// scheduling (60 us) and its KV cache (128 KiB per token: 15 ns per
	// token at about 8.7 TB/s, FlashInfer's paged reads), and a prompt
	// token costs 16 GFLOP (30 us at about half the dense BF16 peak). At
	// 1024 sequences of about 400 tokens of context a step takes 75 ms:
	// about 12,000 output tokens/s with their prefills, the published
	// figure of about 12,500. docs/sim-calibration.md gives the sources.
	H1008B = Profile{
		Name: "h100-8b", Model: "meta-llama/Llama-3.1-8B-Instruct",
		MaxNumSeqs: 1024, KVCacheTokens: 600_000, MaxBatchedTokens: 8192, MaxModelLen: 16384,
		StepBase: 7 * time.Millisecond, StepPerSeq: 60 * time.Microsecond,
		StepPerKVToken: 15 * time.Nanosecond, StepPerPrefillToken: 30 * time.Microsecond,
		MeanOutputTokens: 256,
	}
	// H100x470B is Llama 3.1 70B in BF16 on four H100 80GB with tensor
	// parallelism 4 under vLLM: 141 GB of weights, 35 GB a GPU (10.5 ms
	// at 3.35 TB/s; 17 ms with the all-reduces of 80 layers, fitted to a
	// measured TPOT), 320 KiB of KV per token spread over the four (40
	// ns), 140 GFLOP per prompt token over four GPUs (90 us, fitted to a
	// measured TTFT), and what 288 GB at 0.9 utilization leaves for KV
	// after the weights: 460,000 tokens.
	H100x470B = Profile{
		Name: "h100x4-70b", Model: "meta-llama/Llama-3.1-70B-Instruct",
		MaxNumSeqs: 1024, KVCacheTokens: 460_000, MaxBatchedTokens: 8192, MaxModelLen: 16384,
		StepBase: 17 * time.Millisecond, StepPerSeq: 100 * time.Microsecond,
		StepPerKVToken: 40 * time.Nanosecond, StepPerPrefillToken: 90 * time.Microsecond,
		MeanOutputTokens: 256,
	}
	// Tiny is a fast engine for unit tests: 1 ms steps, 8 sequences.
	Tiny = Profile{
		Name: "tiny", Model: "kneecap/tiny",
		MaxNumSeqs: 8, KVCacheTokens: 4096, MaxBatchedTokens: 512, MaxModelLen: 2048,
		StepBase: time.Millisecond, StepPerSeq: 50 * time.Microsecond,
		StepPerKVToken: 0, StepPerPrefillToken: 2 * time.Microsecond,
		MeanOutputTokens: 16,
	}
)

// Profiles returns the built-in profiles by name. The map is new on each
// call; changing it changes nothing else.
func Profiles() map[string]Profile {
	m := map[string]Profile{}
	for _, p := range []Profile{GB10BF16, GB10FP8, L48B, H1008B, H100x470B, Tiny} {
		m[p.Name] = p
	}
	return m
}

// ProfileNames lists the built-in profiles, sorted.
func ProfileNames() []string {
	var names []string
	for n := range Profiles() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// LookupProfile returns the built-in profile of that name.
func LookupProfile(name string) (Profile, error) {
	p, ok := Profiles()[name]
	if !ok {
		return Profile{}, fmt.Errorf("unknown profile %q (have %v)", name, ProfileNames())
	}
	return p, nil
}

// Workload is a synthetic request mix for calibration and scenarios: each
// request asks for its output with ignore_eos, so lengths are exact on the
// simulator. With RangeRatio r, prompt and output lengths are drawn
// uniformly from [L x (1-r), L x (1+r)], as vLLM's benchmark does with
// --random-range-ratio; r = 0 means fixed lengths.
//
// With PromptSigma (OutputSigma) positive, the prompt (output) length is
// log-normal instead, heavy-tailed as in ShareGPT: its median is
// PromptTokens (OutputTokens) and its natural log has standard deviation
// PromptSigma (OutputSigma); MaxPromptTokens (MaxOutputTokens) clip it when
// positive, as a dataset's filter on length does.
type Workload struct {
	PromptTokens int
	OutputTokens int
	RangeRatio   float64

	PromptSigma, OutputSigma         float64
	MaxPromptTokens, MaxOutputTokens int
}

// Lengths draws one request's prompt and output lengths (at least 1 each).
func (w Workload) Lengths(rng *rand.Rand) (prompt, output int) {
	draw := func(n int, sigma float64, limit int) int {
		f := 1.0
		switch {
		case sigma > 0:
			f = math.Exp(sigma * rng.NormFloat64())
		case w.RangeRatio != 0:
			f = 1 - w.RangeRatio + 2*w.RangeRatio*rng.Float64()
		}
		v := max(1, int(math.Round(f*float64(n))))
		if limit > 0 {
			v = min(v, limit)
		}
		return v
	}
	prompt = draw(w.PromptTokens, w.PromptSigma, w.MaxPromptTokens)
	return prompt, draw(w.OutputTokens, w.OutputSigma, w.MaxOutputTokens)
}

// Solo returns the q-quantiles (0 < q < 1) of TTFT and TPOT that requests of
// w see on this engine running alone (one request at a time, an empty
// prefix cache, no step factor), over n requests drawn with seed: the best
// any cap can do, to set targets relative to what a profile can meet (k x
// the solo P75, say). TPOT is (E2E - TTFT)/(output - 1); a request with one
// output token has none and counts as 0.
func (p Profile) Solo(w Workload, q float64, n int, seed uint64) (ttft, tpot time.Duration) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	ttfts := make([]time.Duration, n)
	tpots := make([]time.Duration, n)
	for i := range n {
		prompt, out := w.Lengths(rng)
		for done := 0; done < prompt; {
			need := min(prompt-done, p.MaxBatchedTokens)
			ttfts[i] += p.StepTime(1, done+need, need)
			done += need
		}
		if out > 1 {
			var decode time.Duration
			for k := 2; k <= out; k++ {
				decode += p.StepTime(1, prompt+k-1, 0)
			}
			tpots[i] = decode / time.Duration(out-1)
		}
	}
	return quantile(ttfts, q), quantile(tpots, q)
}

// quantile is the q-quantile of d by the nearest rank; d is sorted in place.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	i := int(math.Ceil(q*float64(len(d)))) - 1
	return d[min(max(i, 0), len(d)-1)]
}

var (
	// Table1Workload is the brief's first table: about 1000 prompt and 120
	// output tokens, fixed lengths, closed loop.
	Table1Workload = Workload{PromptTokens: 1000, OutputTokens: 120}
	// SecondWorkload is the workload this simulator documents for the
	// brief's second table (targets TTFT 1 s, TPOT 100 ms): long prompts
	// and short answers, 4000 +/- 20 % prompt and 128 +/- 20 % output
	// tokens. See docs/sim-calibration.md.
	SecondWorkload = Workload{PromptTokens: 4000, OutputTokens: 128, RangeRatio: 0.2}
)
