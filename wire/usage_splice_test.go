package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// generalIncludeUsage is EnsureIncludeUsage's general path, to compare with.
func generalIncludeUsage(body []byte) map[string]any {
	var obj map[string]any
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil
	}
	opts, _ := obj["stream_options"].(map[string]any)
	if opts == nil {
		opts = map[string]any{}
	}
	opts["include_usage"] = true
	obj["stream_options"] = opts
	return obj
}

// TestSpliceIncludeUsage: where the splice answers, the body it returns
// decodes to what the general path's does, keeps the client's bytes, and
// asks for usage; where a stream_options member (in any spelling the
// scanner cannot vouch for) or anything odd is there, it leaves the body to
// the general path.
func TestSpliceIncludeUsage(t *testing.T) {
	for _, tc := range []struct {
		body    string
		spliced bool
	}{
		{`{"model":"m","stream":true,"messages":[{"role":"user","content":"<b>&</b>"}]}`, true},
		{`  {}  `, true},
		{"{ \"model\" : \"m\" ,\n\"stream\":true }", true},
		{`{"model":"m","extra":{"stream_options":{"include_usage":false}}}`, true}, // nested: not ours
		{`{"model":"m","messages":[{"content":"stream_options"}]}`, true},
		{`{"model":"m","stream_options":{"continuous_usage_stats":false}}`, false},
		{`{"model":"m","stream_options":null}`, false},
		{`{"model":"m","Stream_Options":{"include_usage":false}}`, false},
		{`{"model":"m","stream\u005foptions":{"include_usage":false}}`, false},
		{`{"model":"m","strëam":1}`, false},
		{`{"model":"m"} x`, false},
		{`{"model":"m"`, false},
		{`[1,2]`, false},
		{`"x"`, false},
		{``, false},
		{`{"a":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`, false}, // deeper than the scanner goes
	} {
		out, ok := spliceIncludeUsage([]byte(tc.body))
		if ok != tc.spliced {
			t.Errorf("spliceIncludeUsage(%q): spliced %v, want %v", tc.body, ok, tc.spliced)
			continue
		}
		got, err := EnsureIncludeUsage([]byte(tc.body))
		if err != nil {
			if json.Valid([]byte(tc.body)) && strings.HasPrefix(strings.TrimSpace(tc.body), "{") {
				t.Errorf("EnsureIncludeUsage(%q): %v", tc.body, err)
			}
			continue
		}
		if ok && string(got) != string(out) {
			t.Errorf("EnsureIncludeUsage(%q) = %s, want the splice %s", tc.body, got, out)
		}
		if want := generalIncludeUsage([]byte(tc.body)); !reflect.DeepEqual(generalIncludeUsage(got), want) {
			t.Errorf("EnsureIncludeUsage(%q) = %s: decodes differently from the general path", tc.body, got)
		}
		if r, err := ParseRequest(got); err != nil || !r.WantsUsage() {
			t.Errorf("EnsureIncludeUsage(%q) = %s: WantsUsage false (%v)", tc.body, got, err)
		}
		if ok && !strings.Contains(string(got), strings.TrimSpace(tc.body)[1:]) {
			t.Errorf("splice of %q lost the client's bytes: %s", tc.body, got)
		}
	}
}

// BenchmarkEnsureIncludeUsage is the rewrite of a 1.1 KiB chat request
// without stream_options (the splice).
func BenchmarkEnsureIncludeUsage(b *testing.B) {
	body := []byte(`{"model":"meta-llama/Llama-3.1-8B-Instruct","stream":true,"max_tokens":256,"messages":[{"role":"system","content":"` +
		strings.Repeat("You are a helpful assistant. ", 20) + `"},{"role":"user","content":"` + strings.Repeat("Tell me about the sea. ", 20) + `"}]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EnsureIncludeUsage(body); err != nil {
			b.Fatal(err)
		}
	}
}
