package wire

import (
	"strings"
	"testing"
)

// inspectCases are Inspect's answers on the chunk shapes that matter most.
var inspectCases = []struct {
	name string
	data string
	want ChunkInfo
}{
	{"vllm role chunk", `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`, ChunkInfo{}},
	{"content", `{"choices":[{"index":0,"delta":{"content":"Hi"}}]}`, ChunkInfo{HasOutput: true}},
	{"reasoning_content", `{"choices":[{"delta":{"reasoning_content":"hm"}}]}`, ChunkInfo{HasOutput: true}},
	{"reasoning", `{"choices":[{"delta":{"reasoning":"hm"}}]}`, ChunkInfo{HasOutput: true}},
	{"tool call", `{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}`, ChunkInfo{HasOutput: true}},
	{"empty tool calls", `{"choices":[{"delta":{"tool_calls":[]}}]}`, ChunkInfo{}},
	{"text completion", `{"object":"text_completion","choices":[{"index":0,"text":" the"}]}`, ChunkInfo{HasOutput: true}},
	{"finish only", `{"choices":[{"delta":{},"finish_reason":"stop"}]}`, ChunkInfo{Finished: true}},
	{"usage only", `{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}`,
		ChunkInfo{UsageOnly: true, Usage: &Usage{5, 7, 12, 0}}},
	{"llama.cpp last chunk", `{"choices":[{"delta":{},"finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}`,
		ChunkInfo{Finished: true, Usage: &Usage{5, 7, 12, 0}}},
	{"null usage", `{"choices":[{"delta":{"content":"a"}}],"usage":null}`, ChunkInfo{HasOutput: true}},
	{"openai error", `{"error":{"message":"boom","type":"server_error"}}`, ChunkInfo{Error: true}},
	{"vllm error object", `{"object":"error","message":"boom"}`, ChunkInfo{Error: true}},
}

func TestInspect(t *testing.T) {
	for _, tt := range inspectCases {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Inspect([]byte(tt.data))
			if err != nil {
				t.Fatal(err)
			}
			if got.HasOutput != tt.want.HasOutput || got.UsageOnly != tt.want.UsageOnly ||
				got.Finished != tt.want.Finished || got.Error != tt.want.Error ||
				(got.Usage == nil) != (tt.want.Usage == nil) || (got.Usage != nil && *got.Usage != *tt.want.Usage) {
				t.Fatalf("Inspect = %+v, want %+v", got, tt.want)
			}
		})
	}
	if _, err := Inspect([]byte("{not json")); err == nil {
		t.Fatal("Inspect accepted malformed JSON")
	}
}

func TestParseRequest(t *testing.T) {
	r, err := ParseRequest([]byte(`{"model":"m","stream":true,"max_tokens":5,"messages":[]}`))
	if err != nil || r.Model != "m" || !r.Stream || r.MaxTokens == nil || *r.MaxTokens != 5 || r.WantsUsage() {
		t.Fatalf("ParseRequest = %+v, %v", r, err)
	}
	for _, bad := range []string{`{"model":`, `[1,2]`, `{"stream":"yes"}`, ``} {
		if _, err := ParseRequest([]byte(bad)); err == nil {
			t.Errorf("ParseRequest(%q) accepted bad input", bad)
		}
	}
	if _, err := ParseRequest([]byte(`[1]`)); err != ErrNotObject {
		t.Errorf("array body: err = %v, want ErrNotObject", err)
	}
	for _, bad := range []string{``, `{"model":`, `{"model":"m"}x`, `{"model":"m",}`, "\x00"} {
		if _, err := ParseRequest([]byte(bad)); err == nil || err.Error() != "request body is not valid JSON" {
			t.Errorf("ParseRequest(%q): err = %v, want the not-valid-JSON error", bad, err)
		}
	}
}

// BenchmarkParseRequest parses a typical chat request of about 1 KiB.
func BenchmarkParseRequest(b *testing.B) {
	body := []byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":256,"messages":[{"role":"system","content":"` +
		strings.Repeat("You are a helpful assistant. ", 12) + `"},{"role":"user","content":"` + strings.Repeat("word ", 120) + `"}]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}

func TestEnsureIncludeUsage(t *testing.T) {
	out, err := EnsureIncludeUsage([]byte(`{"model":"m","stream":true,"stream_options":{"continuous_usage_stats":false},"extra":{"k":[1,2]}}`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseRequest(out)
	if err != nil || !r.WantsUsage() || r.Model != "m" {
		t.Fatalf("after EnsureIncludeUsage: %+v %v", r, err)
	}
	for _, keep := range []string{`"continuous_usage_stats":false`, `"extra":{"k":[1,2]}`} {
		if !strings.Contains(string(out), keep) {
			t.Errorf("lost %s in %s", keep, out)
		}
	}
	if _, err := EnsureIncludeUsage([]byte(`{"stream_options":3}`)); err == nil {
		t.Error("accepted non-object stream_options")
	}
}

func TestErrorBody(t *testing.T) {
	got := string(NewError(TypeRateLimit, "queue_full", "queue is full").JSON())
	want := `{"error":{"message":"queue is full","type":"rate_limit_error","param":null,"code":"queue_full"}}`
	if got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
	if ev := string(ErrorEvent(TypeTimeout, "", "x")); !strings.HasPrefix(ev, `data: {"error":{"message":"x","type":"timeout_error","param":null,"code":null}}`) {
		t.Fatalf("ErrorEvent = %q", ev)
	}
}
