package wire

import "testing"

// The cached prompt tokens an engine reports: vLLM's and OpenAI's
// usage.prompt_tokens_details.cached_tokens, llama.cpp's timings.cache_n;
// each case also agrees with the encoding/json path (sameAnswer).
func TestInspectCachedTokens(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       int
	}{
		{"vllm", `{"choices":[],"usage":{"prompt_tokens":900,"completion_tokens":5,"total_tokens":905,"prompt_tokens_details":{"cached_tokens":768}}}`, 768},
		{"llama.cpp", `{"choices":[{"finish_reason":"length","index":0,"delta":{}}],"usage":{"completion_tokens":2,"prompt_tokens":512,"total_tokens":514},"timings":{"cache_n":500,"prompt_n":12,"prompt_ms":3.5}}`, 500},
		{"timings before usage", `{"timings":{"cache_n":7},"usage":{"prompt_tokens":9}}`, 7},
		{"details win", `{"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":4}},"timings":{"cache_n":7}}`, 4},
		{"none", `{"usage":{"prompt_tokens":9}}`, 0},
		{"details null", `{"usage":{"prompt_tokens":9,"prompt_tokens_details":null}}`, 0},
		{"cached null", `{"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":null}}}`, 0},
		{"not a number", `{"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":"4"}}}`, 0},
		{"a fraction", `{"usage":{"prompt_tokens":9},"timings":{"cache_n":4.5}}`, 0},
		{"negative", `{"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":-4}}}`, 0},
		{"key case", `{"Usage":{"prompt_tokens":9,"Prompt_Tokens_Details":{"CACHED_TOKENS":3}}}`, 3},
		{"repeated member", `{"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":3,"cached_tokens":5}}}`, 5},
		{"repeated details", `{"usage":{"prompt_tokens_details":{"cached_tokens":3},"prompt_tokens_details":{"audio_tokens":1}}}`, 0},
		{"usage merged", `{"usage":{"prompt_tokens_details":{"cached_tokens":3}},"usage":{"prompt_tokens":9}}`, 3},
		{"usage reset", `{"usage":{"prompt_tokens_details":{"cached_tokens":3}},"usage":null,"usage":{"prompt_tokens":9}}`, 0},
		{"timings without usage", `{"choices":[],"timings":{"cache_n":7}}`, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info, err := Inspect([]byte(tc.data))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want < 0 && info.Usage != nil:
				t.Errorf("usage %+v, want none", *info.Usage)
			case tc.want >= 0 && (info.Usage == nil || info.Usage.CachedTokens != tc.want):
				t.Errorf("usage %+v, want %d cached tokens", info.Usage, tc.want)
			}
			if diff := sameAnswer([]byte(tc.data)); diff != "" {
				t.Error(diff)
			}
		})
	}
}
