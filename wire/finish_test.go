package wire

import (
	"slices"
	"testing"
)

func TestFinish(t *testing.T) {
	for _, tc := range []struct {
		data    string
		model   string
		reasons []string
	}{
		{`{"id":"x","model":"qwen","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`, "qwen", []string{"length"}},
		{`{"model":"q\u0077en","choices":[{"finish_reason":"stop"},{"finish_reason":null},{"text":"x","finish_reason":"tool_calls"}]}`, "qwen", []string{"stop", "tool_calls"}},
		{`{"choices":[],"usage":{"prompt_tokens":1}}`, "", nil},
		{`{"model":7,"choices":{"finish_reason":"stop"}}`, "", nil},
		{`[1,2]`, "", nil},
	} {
		model, reasons := Finish([]byte(tc.data), nil, 16)
		if model != tc.model || !slices.Equal(reasons, tc.reasons) {
			t.Errorf("%s: %q %q, want %q %q", tc.data, model, reasons, tc.model, tc.reasons)
		}
	}
	if _, r := Finish([]byte(`{"choices":[{"finish_reason":"a"},{"finish_reason":"b"}]}`), []string{"x"}, 2); !slices.Equal(r, []string{"x", "a"}) {
		t.Errorf("bound: %q", r)
	}
}
