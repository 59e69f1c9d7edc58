package wire

import (
	"strings"
	"testing"
)

func TestMeasurePrompt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shape Shape
		body  string
		want  PromptSize
	}{
		{"chat string content", ShapeOpenAI,
			`{"model":"m","messages":[{"role":"user","content":"hello world"}],"max_tokens":5}`,
			PromptSize{Chars: len("user") + len("hello world")}},
		{"chat content parts, image skipped", ShapeOpenAI,
			`{"messages":[{"role":"user","content":[{"type":"text","text":"abc"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`,
			PromptSize{Chars: len("user") + len("text") + len("abc") + len("image_url")}},
		{"escapes count once", ShapeOpenAI,
			`{"messages":[{"role":"u","content":"a\nb\u00e9"}]}`,
			PromptSize{Chars: 1 + 4}},
		{"tools are prompt", ShapeOpenAI,
			`{"messages":[],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`,
			PromptSize{Chars: len("function") + len("f") + len("object")}},
		{"completion of token IDs", ShapeOpenAI,
			`{"prompt":[1,2,3,4],"max_tokens":9,"n":1}`,
			PromptSize{Tokens: 4}},
		{"other fields skipped", ShapeOpenAI,
			`{"model":"a long model name","stop":["xyz"],"prompt":"ab","logit_bias":{"1":2}}`,
			PromptSize{Chars: 2}},
		{"responses", ShapeResponses,
			`{"input":"hi","instructions":"be brief","max_output_tokens":3}`,
			PromptSize{Chars: 2 + 8}},
		{"sglang batch of IDs", ShapeSGLang,
			`{"input_ids":[[1,2],[3]],"sampling_params":{"max_new_tokens":4}}`,
			PromptSize{Tokens: 3}},
		{"llama.cpp infill", ShapeLlamaCpp,
			`{"input_prefix":"ab","input_suffix":"c","prompt":"","input_extra":[{"filename":"x","text":"yz"}]}`,
			PromptSize{Chars: 2 + 1 + 1 + 2}},
		{"an odd key is measured whole", ShapeOpenAI,
			`{"m\u0065ssages":[{"content":"` + strings.Repeat("x", 100) + `"}]}`,
			PromptSize{Chars: 134, Whole: true}}, // the body's length
		{"not JSON is measured whole", ShapeOpenAI, `not json`, PromptSize{Chars: 8, Whole: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := MeasurePrompt(tc.shape, []byte(tc.body)); got != tc.want {
				t.Fatalf("MeasurePrompt = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A body nested deeper than the bound is measured whole, not recursed into
// without end.
func TestMeasurePromptDeep(t *testing.T) {
	body := `{"messages":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`
	if got := MeasurePrompt(ShapeOpenAI, []byte(body)); !got.Whole || got.Chars != len(body) {
		t.Fatalf("MeasurePrompt of a deep body = %+v, want the whole body", got)
	}
}

func TestMeasurePromptAllocatesNothing(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("word ", 1000) + `"}]}`)
	if n := testing.AllocsPerRun(100, func() { MeasurePrompt(ShapeOpenAI, body) }); n != 0 {
		t.Fatalf("MeasurePrompt allocated %.0f times per call", n)
	}
}

func FuzzMeasurePrompt(f *testing.F) {
	f.Add(`{"messages":[{"role":"user","content":"hi"}]}`)
	f.Add(`{"prompt":[1,2,3]}`)
	f.Add(`{"input_ids":[[1],[2,3]]}`)
	f.Fuzz(func(t *testing.T, body string) {
		for _, s := range []Shape{ShapeOpenAI, ShapeResponses, ShapeLlamaCpp, ShapeSGLang} {
			m := MeasurePrompt(s, []byte(body))
			if m.Chars < 0 || m.Tokens < 0 || m.Chars > len(body) || m.Tokens > len(body) {
				t.Fatalf("MeasurePrompt(%v, %q) = %+v: outside the body's length", s, body, m)
			}
		}
	})
}
