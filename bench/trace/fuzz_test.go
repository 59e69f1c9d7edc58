package trace_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/kneecap/kneecap/bench/trace"
)

// FuzzRead: any input is either an *Error or a trace whose arrivals start
// at 0 and never go back, with positive prompts and no negative output.
func FuzzRead(f *testing.F) {
	for _, s := range []string{
		`{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0, 1]}`,
		"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50,3,4\n",
		`{"arrival":"2026-01-02T03:04:05Z","outcome":"good","prompt_tokens":3,"output_tokens":2,"prefix":["00000000000000aa"]}`,
		`{"arrival":"2026-01-02T03:04:05Z","outcome":"refused"}`,
		"", "\n", "{", "TIMESTAMP\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		tr, err := trace.Read("fuzz", strings.NewReader(data), trace.Auto)
		if err != nil {
			var te *trace.Error
			if !errors.As(err, &te) || !strings.HasPrefix(err.Error(), "trace fuzz") {
				t.Fatalf("error %q is not a trace.Error naming the file", err)
			}
			return
		}
		if len(tr.Requests) == 0 || tr.Requests[0].At != 0 {
			t.Fatalf("%d requests, the first at %v", len(tr.Requests), tr.Requests[0].At)
		}
		for i, r := range tr.Requests {
			if (i > 0 && r.At < tr.Requests[i-1].At) || r.Prompt < 1 || r.Output < 0 {
				t.Fatalf("request %d: %+v", i, r)
			}
		}
	})
}
