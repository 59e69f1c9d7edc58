package wire

import (
	"reflect"
	"strings"
	"testing"
)

// requestSeeds are request bodies for the fast path's differential test:
// common shapes, every field's types, repeated and case-folded names,
// escapes, and malformed bodies.
var requestSeeds = []string{
	`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"user","content":"<b>\u00e9\n</b>"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":100000}`,
	` { "model" : "m" , "stream" : false , "n" : 2 , "max_completion_tokens" : 2.56e2 } `,
	`{"model":null,"stream":null,"stream_options":null,"max_tokens":null,"n":null}`,
	`{"model":"a","model":"b","model":null}`,
	`{"stream":true,"stream":false}`,
	`{"stream_options":{"include_usage":true},"stream_options":{"continuous_usage_stats":true}}`,
	`{"stream_options":{"include_usage":true},"stream_options":null,"stream_options":{}}`,
	`{"stream_options":{"include_usage":null,"Include_Usage":true,"x":[1,{"y":2}]}}`,
	`{"MODEL":"m","Stream":true,"Max_Tokens":7,"N":3}`,
	`{"max_tokens":256.0,"n":1e0,"max_completion_tokens":-0.0}`,
	`{"max_tokens":256.5}`, `{"max_tokens":"256"}`, `{"max_tokens":true}`, `{"max_tokens":{}}`, `{"max_tokens":[]}`,
	`{"max_tokens":99999999999999999999999}`, `{"n":0}`, `{"n":129}`,
	`{"model":"m\"q"}`, `{"model":"caf\u00e9"}`, "{\"model\":\"caf\xc3\xa9\"}", "{\"model\":\"\xff\"}",
	`{"mod\u0065l":"m"}`, `{"model":1}`, `{"stream":"yes"}`, `{"stream_options":3}`, `{"stream_options":[]}`,
	`{"stream_options":{"include_usage":1}}`, `{}`, `[]`, `null`, `"x"`, `{"model":"m"} {}`, `{"model":"m",}`,
	`{"model" "m"}`, `{"a":` + strings.Repeat("[", 250) + strings.Repeat("]", 250) + `}`, ``, `{`,
}

// checkParseFast compares the fast path with encoding/json on body: where
// the fast path answers, its fields are encoding/json's exactly.
func checkParseFast(t *testing.T, body []byte) {
	fast, ok := parseOpenAIFast(body)
	if !ok {
		return
	}
	var slow openAIRequest
	if err := decodeBody(body, &slow); err != nil {
		t.Fatalf("fast path answered %+v for %q, encoding/json failed: %v", fast, body, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("fast path %+v, encoding/json %+v for %q", fast, slow, body)
	}
}

func TestParseRequestFastMatchesDecoder(t *testing.T) {
	answered := 0
	for _, b := range requestSeeds {
		checkParseFast(t, []byte(b))
		if _, ok := parseOpenAIFast([]byte(b)); ok {
			answered++
		}
	}
	if answered < 15 {
		t.Errorf("the fast path answered only %d of %d seeds", answered, len(requestSeeds))
	}
	if _, ok := parseOpenAIFast([]byte(requestSeeds[0])); !ok {
		t.Error("the fast path gave up on a plain chat request")
	}
}

func FuzzParseRequestFast(f *testing.F) {
	for _, b := range requestSeeds {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkParseFast(t, body) })
}
