package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// assemble runs chunks through an Assembler.
func assemble(t testing.TB, limit int, chunks ...string) ([]byte, error) {
	t.Helper()
	a := NewAssembler(limit)
	for _, c := range chunks {
		if err := a.Add([]byte(c)); err != nil {
			return nil, err
		}
	}
	return a.Body(), nil
}

func TestAssembler(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		want   string
	}{
		{
			// vLLM: a role chunk, content, the finish with stop_reason, the
			// usage-only chunk (chunks as vLLM sends them, exclude_unset).
			name: "vllm chat",
			chunks: []string{
				`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
				`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}]}`,
				`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":" \"world\"\n"},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}`,
				`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3}}`,
			},
			want: `{"id":"chatcmpl-1","object":"chat.completion","created":7,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello \"world\"\n"},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3}}`,
		},
		{
			// vLLM's tool parser streams a call's id, type and name first,
			// then its arguments in pieces; two calls; finish "tool_calls".
			name: "vllm tool calls",
			chunks: []string{
				`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
				`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"id":"chatcmpl-tool-a","type":"function","index":0,"function":{"name":"get_weather","arguments":""}}]},"logprobs":null,"finish_reason":null}]}`,
				`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\": "}}]},"logprobs":null,"finish_reason":null}]}`,
				`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]},"logprobs":null,"finish_reason":null}]}`,
				`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"id":"chatcmpl-tool-b","type":"function","index":1,"function":{"name":"get_time","arguments":"{}"}}]},"logprobs":null,"finish_reason":null}]}`,
				`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"tool_calls","stop_reason":null}]}`,
				`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":9,"total_tokens":29,"completion_tokens":20}}`,
			},
			want: `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"chatcmpl-tool-a","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}},{"id":"chatcmpl-tool-b","type":"function","function":{"name":"get_time","arguments":"{}"}}]},"logprobs":null,"finish_reason":"tool_calls","stop_reason":null}],"usage":{"prompt_tokens":9,"total_tokens":29,"completion_tokens":20}}`,
		},
		{
			// Chat logprobs: each chunk's content list, concatenated.
			name: "chat logprobs",
			chunks: []string{
				`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
				`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a"},"logprobs":{"content":[{"token":"a","logprob":-0.5,"bytes":[97],"top_logprobs":[{"token":"a","logprob":-0.5,"bytes":[97]}]}]},"finish_reason":null}]}`,
				`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"b"},"logprobs":{"content":[{"token":"b","logprob":-1.0,"bytes":[98],"top_logprobs":[]}]},"finish_reason":"length","stop_reason":null}]}`,
			},
			want: `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ab"},"logprobs":{"content":[{"token":"a","logprob":-0.5,"bytes":[97],"top_logprobs":[{"token":"a","logprob":-0.5,"bytes":[97]}]},{"token":"b","logprob":-1.0,"bytes":[98],"top_logprobs":[]}]},"finish_reason":"length","stop_reason":null}]}`,
		},
		{
			// Text completions with logprobs (vLLM's four lists, the text
			// offsets continuing from chunk to chunk) and n = 2
			// interleaved.
			name: "completions n=2 with logprobs",
			chunks: []string{
				`{"id":"cmpl-1","object":"text_completion","created":3,"model":"m","choices":[{"index":1,"text":" x","logprobs":{"text_offset":[0],"token_logprobs":[-0.1],"tokens":[" x"],"top_logprobs":[{" x":-0.1}]},"finish_reason":null,"stop_reason":null}]}`,
				`{"id":"cmpl-1","object":"text_completion","created":3,"model":"m","choices":[{"index":0,"text":" y","logprobs":{"text_offset":[0],"token_logprobs":[-0.2],"tokens":[" y"],"top_logprobs":[{" y":-0.2}]},"finish_reason":null,"stop_reason":null}]}`,
				`{"id":"cmpl-1","object":"text_completion","created":3,"model":"m","choices":[{"index":0,"text":" z","logprobs":{"text_offset":[2],"token_logprobs":[-0.3],"tokens":[" z"],"top_logprobs":[{" z":-0.3}]},"finish_reason":"length","stop_reason":null}]}`,
				`{"id":"cmpl-1","object":"text_completion","created":3,"model":"m","choices":[{"index":1,"text":"","logprobs":null,"finish_reason":"stop","stop_reason":"\n"}]}`,
				`{"id":"cmpl-1","object":"text_completion","created":3,"model":"m","choices":[],"usage":{"prompt_tokens":2,"total_tokens":5,"completion_tokens":3}}`,
			},
			want: `{"id":"cmpl-1","object":"text_completion","created":3,"model":"m","choices":[{"index":0,"text":" y z","logprobs":{"text_offset":[0,2],"token_logprobs":[-0.2,-0.3],"tokens":[" y"," z"],"top_logprobs":[{" y":-0.2},{" z":-0.3}]},"finish_reason":"length","stop_reason":null},{"index":1,"text":" x","logprobs":{"text_offset":[0],"token_logprobs":[-0.1],"tokens":[" x"],"top_logprobs":[{" x":-0.1}]},"finish_reason":"stop","stop_reason":"\n"}],"usage":{"prompt_tokens":2,"total_tokens":5,"completion_tokens":3}}`,
		},
		{
			// llama.cpp: no role chunk, choices first, the last chunk
			// with usage and timings; created per chunk (the last wins).
			name: "llamacpp chat",
			chunks: []string{
				`{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"Hi"}}],"created":10,"id":"chatcmpl-x","model":"g","system_fingerprint":"b1","object":"chat.completion.chunk"}`,
				`{"choices":[{"finish_reason":"length","index":0,"delta":{}}],"created":11,"id":"chatcmpl-x","model":"g","system_fingerprint":"b1","object":"chat.completion.chunk","usage":{"completion_tokens":1,"prompt_tokens":3,"total_tokens":4},"timings":{"prompt_n":3}}`,
			},
			want: `{"choices":[{"finish_reason":"length","index":0,"message":{"role":"assistant","content":"Hi"}}],"created":11,"id":"chatcmpl-x","model":"g","system_fingerprint":"b1","object":"chat.completion","usage":{"completion_tokens":1,"prompt_tokens":3,"total_tokens":4},"timings":{"prompt_n":3}}`,
		},
		{
			// SGLang: "usage": null on every chunk, matched_stop, a
			// separate finish chunk; reasoning before the content; a
			// surrogate pair split over two chunks stays one character.
			name: "sglang chat with reasoning",
			chunks: []string{
				`{"id":"s","object":"chat.completion.chunk","created":5,"model":"q","choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}`,
				`{"id":"s","object":"chat.completion.chunk","created":5,"model":"q","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":"think","tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}`,
				`{"id":"s","object":"chat.completion.chunk","created":5,"model":"q","choices":[{"index":0,"delta":{"role":null,"content":"\ud83d","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}`,
				`{"id":"s","object":"chat.completion.chunk","created":5,"model":"q","choices":[{"index":0,"delta":{"role":null,"content":"\ude00","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}`,
				`{"id":"s","object":"chat.completion.chunk","created":5,"model":"q","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":"stop","matched_stop":151645}],"usage":null}`,
				`{"id":"s","object":"chat.completion.chunk","created":5,"model":"q","choices":[],"usage":{"prompt_tokens":4,"total_tokens":7,"completion_tokens":3}}`,
			},
			want: `{"id":"s","object":"chat.completion","created":5,"model":"q","choices":[{"index":0,"message":{"role":"assistant","content":"\ud83d\ude00","tool_calls":null,"reasoning_content":"think"},"logprobs":null,"finish_reason":"stop","matched_stop":151645}],"usage":{"prompt_tokens":4,"total_tokens":7,"completion_tokens":3}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := assemble(t, 0, tt.chunks...)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tt.want)
			}
			if !json.Valid(got) {
				t.Fatal("not valid JSON")
			}
		})
	}
}

func TestAssemblerSurrogatePair(t *testing.T) {
	got, err := assemble(t, 0,
		`{"choices":[{"index":0,"delta":{"content":"\ud83d"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"\ude00"}}]}`)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		}
	}
	if err := json.Unmarshal(got, &v); err != nil || v.Choices[0].Message.Content != "\U0001F600" {
		t.Fatalf("content %q (%v), want one emoji", v.Choices[0].Message.Content, err)
	}
}

func TestAssemblerBound(t *testing.T) {
	chunk := `{"choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", 100) + `"}}]}`
	a := NewAssembler(1000)
	var err error
	for i := 0; i < 20 && err == nil; i++ {
		err = a.Add([]byte(chunk))
	}
	if !errors.Is(err, ErrAnswerTooLarge) {
		t.Fatalf("err = %v, want ErrAnswerTooLarge", err)
	}
	if a.Held() <= 1000 {
		t.Fatalf("held %d", a.Held())
	}
}

// Many choices of empty deltas (distinct indices) count to the bound too.
func TestAssemblerBoundsIndices(t *testing.T) {
	a := NewAssembler(10000)
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		err = a.Add([]byte(`{"choices":[{"index":` + strconv.Itoa(i) + `,"delta":{}}]}`))
	}
	if !errors.Is(err, ErrAnswerTooLarge) {
		t.Fatalf("err = %v after 1000 choices, want ErrAnswerTooLarge", err)
	}
}

func TestAssemblerRefuses(t *testing.T) {
	for _, c := range []string{`[1,2]`, `{"a":`, `"x"`, `null`} {
		if _, err := assemble(t, 0, c); err == nil {
			t.Errorf("Add(%s) = nil, want an error", c)
		}
	}
}

func TestAsStream(t *testing.T) {
	out, whole, err := AsStream([]byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}],"logprobs":true,"n":2,"echo":false}`))
	if err != nil || whole != "" {
		t.Fatalf("AsStream: %v %q", err, whole)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"model": "m", "stream": true, "stream_options": map[string]any{"include_usage": true},
		"messages": []any{map[string]any{"role": "user", "content": "hi"}}, "logprobs": true, "n": 2.0, "echo": false}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	for body, reason := range map[string]string{
		`{"stream_options":{"include_usage":true}}`:        "stream_options",
		`{"prompt_logprobs":0}`:                            "prompt_logprobs",
		`{"return_token_ids":true}`:                        "return_token_ids",
		`{"kv_transfer_params":{"do_remote_decode":true}}`: "kv_transfer_params",
		`{"use_beam_search":true}`:                         "beam_search",
		`{"best_of":3}`:                                    "best_of",
		`{"echo":true}`:                                    "echo",
		`{"return_hidden_states":true}`:                    "return_hidden_states",
		`{"response_fields":["content"]}`:                  "response_fields",
	} {
		out, whole, err := AsStream([]byte(body))
		if err != nil || whole != reason || out != nil {
			t.Errorf("AsStream(%s) = %s, %q, %v; want whole %q", body, out, whole, err, reason)
		}
	}
	for _, body := range []string{`{"best_of":1}`, `{"use_beam_search":false}`, `{"prompt_logprobs":null}`} {
		if _, whole, err := AsStream([]byte(body)); err != nil || whole != "" {
			t.Errorf("AsStream(%s): whole %q, %v; want reassembled", body, whole, err)
		}
	}
}

// FuzzAssembler holds the Assembler to two things on any chunks: its body
// is valid JSON, and a choice's content is the concatenation of the
// chunks' contents. The check reads keys as the Assembler and the engines
// do, case and all (encoding/json's structs match "Choices" to
// "choices"), and follows no chunk with a key twice in one object (JSON
// leaves what that means open).
func FuzzAssembler(f *testing.F) {
	f.Add(`{"choices":[{"index":0,"delta":{"role":"assistant","content":"a"}}]}`, `{"choices":[{"index":0,"delta":{"content":"b\n"},"finish_reason":"stop"}],"usage":{"x":1}}`)
	f.Add(`{"choices":[{"index":1,"text":"x","logprobs":{"tokens":["x"]}}]}`, `{"choices":[{"index":1,"text":"y","logprobs":{"tokens":[]}}]}`)
	f.Add(`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}`, `{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"}"}}]}}]}`)
	f.Add(`{"choices":null,"\u0069d":1}`, `{"choices":[{"index":"0","delta":"x"}]}`)
	f.Add(`{"Choices":[{"Delta":{"Content":"000"}}]}`, `{"choices":[{"delta":{"content":"0"},"delta":{"content":"1"}}]}`)
	f.Add(`{"choices":[{"delta":{"content":"a"}}]}`, `{"choices":[{"d\u0065lta":{"cont\u0065nt":"b"}}]}`)
	f.Fuzz(func(t *testing.T, c1, c2 string) {
		a := NewAssembler(1 << 20)
		var want strings.Builder
		for _, c := range []string{c1, c2} {
			if err := a.Add([]byte(c)); err != nil {
				return
			}
			if duplicateKeys([]byte(c)) {
				return
			}
			var chunk map[string]json.RawMessage
			if json.Unmarshal([]byte(c), &chunk) != nil {
				return
			}
			var choices []map[string]json.RawMessage
			if raw, ok := chunk["choices"]; ok && json.Unmarshal(raw, &choices) != nil {
				return // a type the check below cannot follow
			}
			for _, ch := range choices {
				var delta map[string]json.RawMessage
				if _, ok := ch["index"]; ok || json.Unmarshal(ch["delta"], &delta) != nil || delta == nil {
					return // only single-choice content is followed
				}
				var content *string
				if json.Unmarshal(delta["content"], &content) != nil || content == nil {
					return
				}
				want.WriteString(*content)
			}
		}
		body := a.Body()
		if !json.Valid(body) {
			t.Fatalf("not valid JSON: %s", body)
		}
		if want.Len() == 0 {
			return
		}
		var top map[string]json.RawMessage
		var choices []map[string]json.RawMessage
		var message map[string]json.RawMessage
		if json.Unmarshal(body, &top) != nil || json.Unmarshal(top["choices"], &choices) != nil || len(choices) != 1 ||
			json.Unmarshal(choices[0]["message"], &message) != nil {
			t.Fatalf("body %s: want one choice with a message", body)
		}
		var content string
		if err := json.Unmarshal(message["content"], &content); err != nil {
			t.Fatalf("body %s: message content: %v", body, err)
		}
		if content != want.String() && !strings.ContainsRune(want.String(), '\uFFFD') {
			t.Fatalf("content %q, want %q", content, want.String())
		}
	})
}

// duplicateKeys reports whether some object in the valid JSON data has a
// key twice.
func duplicateKeys(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		object bool
		seen   map[string]bool
		key    bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if s, ok := tok.(string); ok && top != nil && top.object && top.key {
			if top.seen[s] {
				return true
			}
			top.seen[s], top.key = true, false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, seen: map[string]bool{}, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: in an object the next token is a key.
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].key = true
		}
	}
}
