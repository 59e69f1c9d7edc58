package sim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"
)

func prefixProfile() Profile {
	p := Tiny
	p.PrefixCaching = true
	return p
}

// prompt is n words, the first naming the conversation: prompts of two
// conversations share no block.
func prompt(conv string, n int) string {
	return conv + strings.Repeat(" w", n-1)
}

// pipeClient serves s over net.Pipe inside the synctest bubble and returns
// an OpenAI client for it; cleanup stops the server.
func pipeClient(t *testing.T, s *Sim) (openai.Client, *http.Client, func()) {
	l := newPipeListener()
	srv := &http.Server{Handler: s.Handler()}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(l) })
	tr := &http.Transport{DialContext: l.dial}
	hc := &http.Client{Transport: tr}
	client := openai.NewClient(option.WithBaseURL("http://sim/v1"), option.WithAPIKey("x"),
		option.WithMaxRetries(0), option.WithHTTPClient(hc))
	return client, hc, func() {
		tr.CloseIdleConnections()
		_ = srv.Shutdown(context.Background())
		wg.Wait()
	}
}

// A prompt sent again is served from the cache: usage reports its cached
// tokens (all full blocks but the one holding the last token) and its
// first token comes sooner, for vLLM's and SGLang's flavours, read by the
// OpenAI SDK.
func TestPrefixCacheRepeatedPrompt(t *testing.T) {
	for _, c := range []struct {
		fl     Flavor
		cached int64
	}{{FlavorVLLM, 192}, {FlavorSGLang, 196}} { // 200 tokens: 12 blocks of 16, 49 of 4
		t.Run(string(c.fl), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := startSim(t, Config{Profile: prefixProfile(), Flavor: c.fl})
				client, _, stop := pipeClient(t, s)
				defer stop()
				ask := func() (time.Duration, openai.CompletionUsage) {
					start := time.Now()
					var ttft time.Duration
					stream := client.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
						Model:         "kneecap/tiny",
						Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt("a", 200))},
						MaxTokens:     openai.Int(4),
						StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
					}, option.WithJSONSet("ignore_eos", true))
					acc := openai.ChatCompletionAccumulator{}
					for stream.Next() {
						ch := stream.Current()
						if ttft == 0 && len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
							ttft = time.Since(start)
						}
						acc.AddChunk(ch)
					}
					if err := stream.Err(); err != nil {
						t.Fatal(err)
					}
					return ttft, acc.Usage
				}
				cold, u1 := ask()
				warm, u2 := ask()
				if u1.PromptTokensDetails.CachedTokens != 0 || u2.PromptTokensDetails.CachedTokens != c.cached || u2.PromptTokens != 200 {
					t.Fatalf("cached tokens %d then %d of %d, want 0 then %d", u1.PromptTokensDetails.CachedTokens,
						u2.PromptTokensDetails.CachedTokens, u2.PromptTokens, c.cached)
				}
				// Tiny prefills at 2 us a token: the warm TTFT skips that many.
				if saved := cold - warm; saved != time.Duration(c.cached)*Tiny.StepPerPrefillToken {
					t.Fatalf("TTFT %v cold, %v warm: want %v less", cold, warm, time.Duration(c.cached)*Tiny.StepPerPrefillToken)
				}
			})
		})
	}
}

// llama.cpp's flavour reports the reuse in timings: cache_n tokens taken
// from the cache, prompt_n processed; vLLM's answer that is not streamed
// in prompt_tokens_details.
func TestPrefixCacheReportedInAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, fl := range []Flavor{FlavorLlamaCpp, FlavorVLLM} {
			s := startSim(t, Config{Profile: prefixProfile(), Flavor: fl})
			_, hc, stop := pipeClient(t, s)
			var got []string
			for range 2 {
				resp, err := hc.Post("http://sim/v1/chat/completions", "application/json",
					strings.NewReader(`{"max_tokens":2,"messages":[{"role":"user","content":"`+prompt("b", 40)+`"}]}`))
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var v struct {
					Usage   json.RawMessage `json:"usage"`
					Timings json.RawMessage `json:"timings"`
				}
				if err := json.Unmarshal(b, &v); err != nil {
					t.Fatalf("%s: %v: %s", fl, err, b)
				}
				got = append(got, string(v.Usage)+" "+string(v.Timings))
			}
			want := []string{
				`{"prompt_tokens":40,"total_tokens":42,"completion_tokens":2} {"cache_n":0,"prompt_n":40}`,
				`{"prompt_tokens":40,"total_tokens":42,"completion_tokens":2} {"cache_n":32,"prompt_n":8}`,
			}
			if fl == FlavorVLLM {
				want = []string{
					`{"prompt_tokens":40,"total_tokens":42,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":0}} `,
					`{"prompt_tokens":40,"total_tokens":42,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":32}} `,
				}
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("%s answer %d: %s, want %s", fl, i+1, got[i], want[i])
				}
			}
			stop()
		}
	})
}

// metricValue reads one series of reg (the first of its family).
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name || len(f.GetMetric()) == 0 {
			continue
		}
		m := f.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("no series %s", name)
	return 0
}

// Conversations sent in turn, one request at a time: while their prompts
// fit the KV capacity every round after the first is served from the
// cache; when they do not, least-recently-freed eviction drops most of
// each before its turn comes back and the hit rate falls. The engine's own
// metric names say so.
func TestPrefixCacheEvictsBeyondCapacity(t *testing.T) {
	hitRate := func(convs int) (float64, float64, int) {
		var vllmRate, sglRate float64
		var cached int
		for _, fl := range []Flavor{FlavorVLLM, FlavorSGLang} {
			synctest.Test(t, func(t *testing.T) {
				reg := prometheus.NewRegistry()
				s := startSim(t, Config{Profile: prefixProfile(), Flavor: fl, Registry: reg})
				_, hc, stop := pipeClient(t, s)
				defer stop()
				for range 3 {
					for c := range convs {
						resp, err := hc.Post("http://sim/v1/completions", "application/json",
							strings.NewReader(`{"max_tokens":1,"prompt":"`+prompt(string(rune('a'+c)), 1000)+`"}`))
						if err != nil {
							t.Fatal(err)
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
				resp, err := hc.Get("http://sim/metrics") // the names a scraper sees
				if err != nil {
					t.Fatal(err)
				}
				page, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				names := map[Flavor][]string{FlavorVLLM: {"vllm:prefix_cache_queries_total{", "vllm:prefix_cache_hits_total{"},
					FlavorSGLang: {"sglang:cache_hit_rate{"}}[fl]
				for _, n := range names {
					if !strings.Contains(string(page), "\n"+n) {
						t.Errorf("%s: /metrics has no %s", fl, n)
					}
				}
				if fl == FlavorSGLang {
					sglRate = metricValue(t, reg, "sglang:cache_hit_rate") // the last request's
					return
				}
				vllmRate = metricValue(t, reg, "vllm:prefix_cache_hits_total") / metricValue(t, reg, "vllm:prefix_cache_queries_total")
				cached = s.Stats().CachedTokens
			})
		}
		return vllmRate, sglRate, cached
	}
	// Tiny holds 4096 tokens: 3 prompts of 1000 fit, 5 do not.
	fitV, fitS, fitCached := hitRate(3)
	overV, overS, overCached := hitRate(5)
	if fitV < 0.6 || fitS < 0.99 || fitCached != 3*992 {
		t.Errorf("3 conversations: vLLM hit rate %.2f (want 2/3 of the prompts' tokens), SGLang's last %.2f, %d tokens cached (want 3 x 992)", fitV, fitS, fitCached)
	}
	// What is left of a prompt whose tail went first still hits: a
	// little, never the whole.
	if overV > fitV/4 || overS > 0.25 || overCached > Tiny.KVCacheTokens {
		t.Errorf("5 conversations: vLLM hit rate %.2f (3: %.2f), SGLang's last %.2f, %d tokens cached: want the rate fallen below a quarter and at most the capacity cached",
			overV, fitV, overS, overCached)
	}
}

// Blocks held by running sequences are never evicted, and every block is
// given back when its sequences end or are preempted.
func TestPrefixCacheAccounting(t *testing.T) {
	p := testProfile() // KV 100 tokens, 2 sequences, budget 10
	p.PrefixCaching, p.PrefixBlockTokens = true, 4
	e := newEngine(p, nil)
	e.pc = newPrefixCache(4)
	now := time.Unix(0, 0)
	blocks := func(n int) []uint64 {
		h := newPrefixHasher(4)
		for i := range n {
			h.token(uint64(i))
		}
		return h.out
	}
	a := newSeq(20, 3, "length", now)
	a.blocks = blocks(20)
	e.add(a)
	b := newSeq(20, 3, "length", now)
	b.blocks = blocks(20)
	e.add(b)
	runToEnd(t, e, a)
	runToEnd(t, e, b)
	// a computed all 5 blocks; b, admitted in the same step, found none yet
	// and computed its own copy, shared once registered.
	if e.kvUsed != 0 || e.pc.pinned != 0 || e.pc.free != 20 || len(e.pc.blocks) != 5 {
		t.Fatalf("after both: kv %d pinned %d free %d blocks %d; want 0 0 20 5", e.kvUsed, e.pc.pinned, e.pc.free, len(e.pc.blocks))
	}
	c := newSeq(20, 3, "length", now)
	c.blocks = blocks(20)
	e.add(c)
	step(t, e, now)
	// c finds 4 blocks (the last token is always computed), computes the
	// fifth again and shares the cached copy once it has.
	if c.cached != 16 || e.pc.pinned != 20 || e.pc.free != 0 || e.kvUsed != 0 {
		t.Fatalf("c: cached %d pinned %d free %d kv %d; want 16 20 0 0", c.cached, e.pc.pinned, e.pc.free, e.kvUsed)
	}
	e.preemptLast()
	if len(c.refs) != 0 || e.pc.pinned != 0 || e.kvUsed != 0 {
		t.Fatalf("preempted: refs %d pinned %d kv %d; want all given back", len(c.refs), e.pc.pinned, e.kvUsed)
	}
	if n := e.flush(); n != 20 || len(e.pc.blocks) != 0 {
		t.Fatalf("flush dropped %d tokens, %d blocks left; want 20, 0", n, len(e.pc.blocks))
	}
}

func TestPrefixCachingValidate(t *testing.T) {
	p := prefixProfile()
	p.PrefixBlockTokens = -1
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "prefix_block_tokens") {
		t.Fatalf("a negative block size: %v, want an error naming it", err)
	}
}

// With the unified cache, llama.cpp's reuse: a prompt goes to the idle
// slot whose previous prompt shares the longest prefix with it (not the
// slot idle longest) and keeps those cells; timings say how many.
func TestPrefixCacheLlamaCppSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := Tiny
		p.MaxNumSeqs, p.PrefixCacheTokens, p.UnifiedCache, p.PrefixCaching = 2, 4096, true, true
		s := startSim(t, Config{Profile: p, Flavor: FlavorLlamaCpp})
		_, hc, stop := pipeClient(t, s)
		defer stop()
		cacheN := func(text string) int {
			resp, err := hc.Post("http://sim/v1/completions", "application/json", strings.NewReader(`{"max_tokens":2,"ignore_eos":true,"prompt":"`+text+`"}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var v struct {
				Timings struct {
					CacheN  int `json:"cache_n"`
					PromptN int `json:"prompt_n"`
				} `json:"timings"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
				t.Fatal(err)
			}
			return v.Timings.CacheN
		}
		got := []int{cacheN(prompt("a", 40)), cacheN(prompt("b", 40)), cacheN(prompt("b", 40)), cacheN(prompt("a", 40)), cacheN(prompt("c", 40))}
		// b's second turn takes b's slot although a's was idle longer, so
		// a's cells are still there for a's second turn; c shares nothing.
		if want := []int{0, 0, 32, 32, 0}; !slices.Equal(got, want) {
			t.Fatalf("cache_n %v, want %v", got, want)
		}
	})
}

// A conversation's next turn (its prompt, the answer, a new question)
// finds the answer's blocks cached too, as vLLM caches generated tokens'
// blocks: the answer's words, sent back, name the same blocks.
func TestPrefixCacheConversation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := startSim(t, Config{Profile: prefixProfile()})
		client, _, stop := pipeClient(t, s)
		defer stop()
		first, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
			Model:     "kneecap/tiny",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt("a", 40))},
			MaxTokens: openai.Int(20),
		}, option.WithJSONSet("ignore_eos", true))
		if err != nil {
			t.Fatal(err)
		}
		answer := first.Choices[0].Message.Content
		second, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
			Model: "kneecap/tiny",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt("a", 40)),
				openai.AssistantMessage(answer), openai.UserMessage(prompt("q", 10))},
			MaxTokens: openai.Int(2),
		})
		if err != nil {
			t.Fatal(err)
		}
		// 40 prompt words, 20 tokens that read back as 18 words, 10 more:
		// the first 58 words are known, 3 blocks of 16.
		if n := countWords(answer, nil); n != 18 || second.Usage.PromptTokens != 68 || second.Usage.PromptTokensDetails.CachedTokens != 48 {
			t.Fatalf("answer of %d words; second turn %d prompt tokens, %d cached; want 18, 68, 48",
				n, second.Usage.PromptTokens, second.Usage.PromptTokensDetails.CachedTokens)
		}
	})
}
