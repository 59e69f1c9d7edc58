package wire

import (
	"strings"
	"testing"
)

func intp(v int) *int { return &v }

func eqIntp(a, b *int) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func sameRequest(a, b Request) bool {
	return a.Model == b.Model && a.Stream == b.Stream && a.WantsUsage() == b.WantsUsage() &&
		eqIntp(a.MaxTokens, b.MaxTokens) && eqIntp(a.MaxCompletionTokens, b.MaxCompletionTokens) && a.N == b.N
}

// TestParseRequestLenient checks that the integer fields take what vLLM's
// pydantic models take: any whole JSON number.
func TestParseRequestLenient(t *testing.T) {
	tests := []struct {
		body string
		want Request
	}{
		{`{"max_tokens":256}`, Request{MaxTokens: intp(256)}},
		{`{"max_tokens":256.0}`, Request{MaxTokens: intp(256)}},
		{`{"max_tokens":2.56e2}`, Request{MaxTokens: intp(256)}},
		{`{"max_tokens":2560E-1}`, Request{MaxTokens: intp(256)}},
		{`{"max_tokens":1e3}`, Request{MaxTokens: intp(1000)}},
		{`{"max_tokens":-0.0}`, Request{MaxTokens: intp(0)}},
		{`{"max_tokens":null}`, Request{}},
		{`{"max_tokens":5,"max_tokens":null}`, Request{}},
		{`{"max_tokens":1.5,"max_tokens":7}`, Request{MaxTokens: intp(7)}}, // the last key wins, as in Python
		{`{"max_completion_tokens":64.0}`, Request{MaxCompletionTokens: intp(64)}},
		{`{"max_tokens":9223372036854775807}`, Request{MaxTokens: intp(9223372036854775807)}},
		{`{"n":2}`, Request{N: 2}},
		{`{"n":2.0}`, Request{N: 2}},
		{`{"n":1}`, Request{N: 1}},
		{`{"n":128}`, Request{N: 128}},
		{`{"n":1.28e2}`, Request{N: 128}},
		{`{"n":null}`, Request{}},
		{`{}`, Request{}},
		{`null`, Request{}},
		// Unknown fields, however shaped, are ignored.
		{`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"temperature":0.7,` +
			`"logit_bias":{"50256":-100},"x-vendor":{"deep":[1,{"n":"not ours"}]},"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`,
			Request{Model: "m", Stream: true, StreamOptions: &StreamOptions{IncludeUsage: true}}},
	}
	for _, tt := range tests {
		got, err := ParseRequest([]byte(tt.body))
		if err != nil || !sameRequest(got, tt.want) {
			t.Errorf("ParseRequest(%s) = %+v, %v; want %+v", tt.body, got, err, tt.want)
		}
	}
}

// TestParseRequestRejects checks the errors and their messages.
func TestParseRequestRejects(t *testing.T) {
	tests := []struct{ body, err string }{
		{`{"max_tokens":256.5}`, `field "max_tokens" must be a whole number, not 256.5`},
		{`{"max_tokens":2.565e2}`, `field "max_tokens" must be a whole number, not 2.565e2`},
		{`{"max_tokens":1e-3}`, `field "max_tokens" must be a whole number, not 1e-3`},
		{`{"max_tokens":"256"}`, `field "max_tokens" must be an integer, not a string`},
		{`{"max_tokens":true}`, `field "max_tokens" must be an integer, not a boolean`},
		{`{"max_tokens":{}}`, `field "max_tokens" must be an integer, not an object`},
		{`{"max_tokens":[256]}`, `field "max_tokens" must be an integer, not an array`},
		{`{"max_tokens":9223372036854775808}`, `field "max_tokens" is out of range: 9223372036854775808`},
		{`{"max_tokens":1e19}`, `field "max_tokens" is out of range: 1e19`},
		{`{"max_tokens":1e400}`, `field "max_tokens" is out of range: 1e400`},
		{`{"max_tokens":0.` + strings.Repeat("5", 100) + `}`, `field "max_tokens" must be a whole number, not 0.` + strings.Repeat("5", 30) + `...`},
		{`{"max_completion_tokens":0.5}`, `field "max_completion_tokens" must be a whole number, not 0.5`},
		{`{"n":2.5}`, `field "n" must be a whole number, not 2.5`},
		{`{"n":"2"}`, `field "n" must be an integer, not a string`},
		{`{"n":-1}`, `n must be between 1 and 128`},
		{`{"n":0}`, `n must be between 1 and 128`},
		{`{"n":129}`, `n must be between 1 and 128`},
		{`{"n":1.29e2}`, `n must be between 1 and 128`},
		// Other fields keep encoding/json's type check.
		{`{"stream":"yes"}`, `field "stream" must be of type bool`},
		{`{"model":5}`, `field "model" must be of type string`},
		{`{"stream":"yes","max_tokens":1.5}`, `field "stream" must be of type bool`},
		{`[1]`, `request body must be a JSON object`},
		{`{"max_tokens":1.}`, `request body is not valid JSON`},
	}
	for _, tt := range tests {
		_, err := ParseRequest([]byte(tt.body))
		if err == nil || err.Error() != tt.err {
			t.Errorf("ParseRequest(%.60s): err = %v, want %q", tt.body, err, tt.err)
		}
	}
}

func TestParseRequestAs(t *testing.T) {
	tests := []struct {
		shape Shape
		body  string
		want  Request
	}{
		// The OpenAI shape is ParseRequest.
		{ShapeOpenAI, `{"model":"m","stream":true,"max_tokens":8.0,"n":2}`, Request{Model: "m", Stream: true, MaxTokens: intp(8), N: 2}},

		// vLLM's /v1/responses.
		{ShapeResponses, `{"model":"Qwen/Qwen3-8B","input":"What is the capital of France?","max_output_tokens":64,"stream":true,"reasoning":{"effort":"low"}}`,
			Request{Model: "Qwen/Qwen3-8B", Stream: true, MaxTokens: intp(64)}},
		{ShapeResponses, `{"input":[{"role":"user","content":"hi"}],"max_output_tokens":6.4e1,"max_tokens":5,"n":3}`, Request{MaxTokens: intp(64)}},
		{ShapeResponses, `{"model":null,"input":"x","stream":null,"max_output_tokens":null}`, Request{}},

		// llama.cpp's native /completion: json_value's defaults for the wrong type.
		{ShapeLlamaCpp, `{"prompt":"Once upon a time","n_predict":128,"stream":true,"cache_prompt":true}`, Request{Stream: true, MaxTokens: intp(128)}},
		{ShapeLlamaCpp, `{"prompt":"x","n_predict":-1}`, Request{MaxTokens: intp(-1)}},
		{ShapeLlamaCpp, `{"prompt":"x","n_predict":256.9,"stream":"yes"}`, Request{MaxTokens: intp(256)}},
		{ShapeLlamaCpp, `{"prompt":"x","n_predict":-2.5}`, Request{MaxTokens: intp(-2)}},
		{ShapeLlamaCpp, `{"prompt":"x","n_predict":true}`, Request{MaxTokens: intp(1)}},
		{ShapeLlamaCpp, `{"prompt":"x","n_predict":"12","max_tokens":7}`, Request{MaxTokens: intp(7)}},
		{ShapeLlamaCpp, `{"prompt":"x","n_predict":null,"max_completion_tokens":9,"max_tokens":7}`, Request{MaxTokens: intp(9)}},
		{ShapeLlamaCpp, `{"prompt":"x","n_predict":1e300}`, Request{}},
		{ShapeLlamaCpp, `{"prompt":"x","model":"qwen","stream":1,"n":2}`, Request{Model: "qwen", N: 2}},
		{ShapeLlamaCpp, `{"prompt":"x","model":7,"n_cmpl":3,"n":2}`, Request{N: 3}},
		{ShapeLlamaCpp, `{"prompt":"x","n_cmpl":"3","n":2.7}`, Request{N: 2}},

		// SGLang's native /generate.
		{ShapeSGLang, `{"text":"The capital of France is","sampling_params":{"max_new_tokens":32,"temperature":0},"stream":true}`,
			Request{Stream: true, MaxTokens: intp(32)}},
		{ShapeSGLang, `{"input_ids":[791,6864,315,9822,374],"sampling_params":{"max_new_tokens":32.0,"n":2}}`, Request{MaxTokens: intp(32), N: 2}},
		{ShapeSGLang, `{"text":"x","sampling_params":{"max_new_tokens":null}}`, Request{}},
		{ShapeSGLang, `{"text":"x","sampling_params":null,"model":"default"}`, Request{Model: "default"}},
		{ShapeSGLang, `{"text":"x","model":{"name":"ignored"}}`, Request{}},
		{ShapeSGLang, `{"text":["a","b"],"sampling_params":[{"max_new_tokens":8,"n":2},null,{"max_new_tokens":16,"n":2}]}`,
			Request{MaxTokens: intp(16), N: 2}},
		{ShapeSGLang, `{"text":"x","max_tokens":5,"max_new_tokens":6}`, Request{}},
	}
	for _, tt := range tests {
		got, err := ParseRequestAs(tt.shape, []byte(tt.body))
		if err != nil || !sameRequest(got, tt.want) {
			t.Errorf("ParseRequestAs(%v, %s) = %+v, %v; want %+v", tt.shape, tt.body, got, err, tt.want)
		}
	}
}

func TestParseRequestAsRejects(t *testing.T) {
	tests := []struct {
		shape     Shape
		body, err string
	}{
		{ShapeResponses, `{"input":"x","max_output_tokens":64.5}`, `field "max_output_tokens" must be a whole number, not 64.5`},
		{ShapeResponses, `{"input":"x","max_output_tokens":"64"}`, `field "max_output_tokens" must be an integer, not a string`},
		{ShapeResponses, `{"input":"x","stream":"true"}`, `field "stream" must be of type bool`},
		{ShapeResponses, `{"input":"x","model":1}`, `field "model" must be of type string`},
		{ShapeSGLang, `{"text":"x","sampling_params":{"max_new_tokens":12.5}}`, `field "sampling_params.max_new_tokens" must be a whole number, not 12.5`},
		{ShapeSGLang, `{"text":"x","sampling_params":{"n":"2"}}`, `field "sampling_params.n" must be an integer, not a string`},
		{ShapeSGLang, `{"text":["a","b"],"sampling_params":[{},{"max_new_tokens":"8"}]}`, `field "sampling_params[1].max_new_tokens" must be an integer, not a string`},
		{ShapeSGLang, `{"text":"x","sampling_params":"greedy"}`, `field "sampling_params" must be an object or a list of objects`},
		{ShapeSGLang, `{"text":"x","sampling_params":[1]}`, `field "sampling_params" must be an object or a list of objects`},
		{ShapeSGLang, `{"text":"x","stream":1}`, `field "stream" must be of type bool`},
		{ShapeLlamaCpp, `["prompt"]`, `request body must be a JSON object`},
		{Shape(9), `{}`, `wire: unknown shape 9`},
	}
	for _, tt := range tests {
		_, err := ParseRequestAs(tt.shape, []byte(tt.body))
		if err == nil || err.Error() != tt.err {
			t.Errorf("ParseRequestAs(%v, %s): err = %v, want %q", tt.shape, tt.body, err, tt.err)
		}
	}
	for _, s := range []Shape{ShapeOpenAI, ShapeResponses, ShapeLlamaCpp, ShapeSGLang} {
		for _, bad := range []string{``, `{"a":`, `{"a":1}x`, "\x00"} {
			if _, err := ParseRequestAs(s, []byte(bad)); err == nil || err.Error() != "request body is not valid JSON" {
				t.Errorf("ParseRequestAs(%v, %q): err = %v, want the not-valid-JSON error", s, bad, err)
			}
		}
		if _, err := ParseRequestAs(s, []byte(`"x"`)); err != ErrNotObject {
			t.Errorf("ParseRequestAs(%v, string): err = %v, want ErrNotObject", s, err)
		}
	}
}

func TestShapeString(t *testing.T) {
	for s, want := range map[Shape]string{ShapeOpenAI: "openai", ShapeResponses: "responses",
		ShapeLlamaCpp: "llamacpp", ShapeSGLang: "sglang", Shape(7): "Shape(7)"} {
		if got := s.String(); got != want {
			t.Errorf("Shape(%d).String() = %q, want %q", uint8(s), got, want)
		}
	}
}
