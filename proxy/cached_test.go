package proxy

import (
	"fmt"
	"net/http"
	"testing"
)

// The prompt tokens an engine served from its prefix cache reach the
// record: vLLM's usage.prompt_tokens_details.cached_tokens in a stream,
// llama.cpp's timings.cache_n in its last chunk, and the usage of a
// request that is not streamed; and the prefix fingerprint is computed only when
// asked for.
func TestCachedPromptTokensAndPrefix(t *testing.T) {
	last := map[string]string{
		"vllm":     `{"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":2,"total_tokens":42,"prompt_tokens_details":{"cached_tokens":32}}}`,
		"llamacpp": `{"choices":[{"index":0,"delta":{},"finish_reason":"length"}],"usage":{"prompt_tokens":40,"completion_tokens":2,"total_tokens":42},"timings":{"cache_n":24,"prompt_n":16}}`,
	}
	for _, name := range []string{"vllm", "llamacpp"} {
		for _, blocks := range []int{0, 512} {
			t.Run(fmt.Sprintf("%s/prefix-%d", name, blocks), func(t *testing.T) {
				engine := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "text/event-stream")
					fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
					fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\n")
					fmt.Fprint(w, "data: "+last[name]+"\n\ndata: [DONE]\n\n")
				})
				s := newSetup(t, engine, Config{PrefixBlockTokens: blocks})
				readAll(t, post(t, s.gateway.URL, "/v1/chat/completions", chatBodyUsage))
				rec := s.rec.last(t)
				want := map[string]int{"vllm": 32, "llamacpp": 24}[name]
				if rec.CachedPromptTokens != want || rec.PromptTokens != 40 {
					t.Errorf("cached %d of %d prompt tokens, want %d of 40", rec.CachedPromptTokens, rec.PromptTokens, want)
				}
				if (blocks > 0) != (len(rec.Prefix) == 1) {
					t.Errorf("PrefixBlockTokens %d: prefix %x", blocks, rec.Prefix)
				}
			})
		}
	}
	t.Run("whole", func(t *testing.T) {
		engine := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ab"},"finish_reason":"length"}],"usage":{"prompt_tokens":40,"completion_tokens":2,"total_tokens":42,"prompt_tokens_details":{"cached_tokens":16}}}`)
		})
		s := newSetup(t, engine, Config{})
		readAll(t, post(t, s.gateway.URL, "/v1/chat/completions", `{"model":"m","n":1,"logit_bias":{"1":1},"messages":[{"role":"user","content":"hi"}]}`))
		if rec := s.rec.last(t); rec.CachedPromptTokens != 16 {
			t.Errorf("not streamed: cached %d, want 16 (record %+v)", rec.CachedPromptTokens, rec)
		}
	})
}

// Admission is charged a prompt's uncached part: after requests whose
// prompts the engine served 90 % from its prefix cache, the next one is
// charged about a tenth of its estimate, and, when the hit rate falls to
// nothing, its whole estimate again; with NoCachedCost always the whole.
func TestChargedPromptFollowsHitRate(t *testing.T) {
	cached := 36
	engine := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":1,\"total_tokens\":41,\"prompt_tokens_details\":{\"cached_tokens\":%d}}}\n\ndata: [DONE]\n\n", cached)
	})
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoCachedCost=%v", off), func(t *testing.T) {
			s := newSetup(t, engine, Config{NoCachedCost: off})
			charged := func(n int) (got, est int) {
				for range n {
					readAll(t, post(t, s.gateway.URL, "/v1/chat/completions", chatBodyUsage))
				}
				rec := s.rec.last(t)
				return rec.PromptCharged, rec.PromptEstimate
			}
			cached = 36
			charged(60)
			got, est := charged(1)
			if want := est; off && got != want {
				t.Fatalf("90%% cached, NoCachedCost: charged %d, want the estimate %d", got, want)
			} else if !off && (got*5 > est || got < 1) {
				t.Fatalf("90%% cached: charged %d of an estimate of %d, want about a tenth", got, est)
			}
			cached = 0
			got, est = charged(200)
			if got*10 < est*9 {
				t.Fatalf("hit rate fell to 0: charged %d of %d, want nearly all", got, est)
			}
		})
	}
}
