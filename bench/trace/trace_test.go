package trace_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kneecap/kneecap/bench/trace"
)

func write(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadMooncake(t *testing.T) {
	p := write(t, "m.jsonl", `{"timestamp": 1000, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}

{"timestamp": 1500.5, "input_length": 1030, "output_length": 7, "hash_ids": [0, 2, 3]}
`)
	tr, err := trace.ReadFile(p, trace.Auto)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Format != trace.Mooncake || len(tr.Requests) != 2 {
		t.Fatalf("%v, %d requests", tr.Format, len(tr.Requests))
	}
	r := tr.Requests[1]
	if r.At != 500500*time.Microsecond || r.Prompt != 1030 || r.Output != 7 || len(r.Blocks) != 3 || r.Line != 3 {
		t.Errorf("second request %+v", r)
	}
	if tr.Requests[0].At != 0 {
		t.Errorf("first arrival %v, want 0 (re-based)", tr.Requests[0].At)
	}
}

func TestReadAzure(t *testing.T) {
	p := write(t, "azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"+
		"2023-11-16 18:15:46.6805900,374,44\n"+
		"2023-11-16 18:15:50.9951690,396,109\n")
	tr, err := trace.ReadFile(p, trace.Auto)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Format != trace.Azure || len(tr.Requests) != 2 {
		t.Fatalf("%v, %d requests", tr.Format, len(tr.Requests))
	}
	if r := tr.Requests[1]; r.At != 4314579*time.Microsecond || r.Prompt != 396 || r.Output != 109 || r.Line != 3 {
		t.Errorf("second request %+v", r)
	}
}

func TestReadKneecapLog(t *testing.T) {
	// Written as requests end: the second line arrived first. The refused
	// one's lengths were never read; the invalid one is left out.
	p := write(t, "requests.jsonl", strings.Join([]string{
		`{"arrival":"2026-01-02T03:04:06.5Z","route":"chat","streamed":true,"prompt_tokens":900,"output_tokens":30,"outcome":"good","status":200,"prefix":["00000000000000aa","00000000000000bb"]}`,
		`{"arrival":"2026-01-02T03:04:05Z","route":"chat","streamed":true,"prompt_tokens":100,"output_tokens":10,"outcome":"late","missed":"missed_tpot","status":200}`,
		`{"arrival":"2026-01-02T03:04:07Z","route":"chat","streamed":true,"prompt_tokens":0,"output_tokens":0,"outcome":"refused","reason":"queue_full","status":429}`,
		`{"arrival":"2026-01-02T03:04:08Z","route":"chat","streamed":true,"prompt_tokens":0,"output_tokens":0,"outcome":"invalid","status":400}`,
	}, "\n"))
	tr, err := trace.ReadFile(p, trace.Auto)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Format != trace.Kneecap || len(tr.Requests) != 3 {
		t.Fatalf("%v, %d requests", tr.Format, len(tr.Requests))
	}
	a, b, c := tr.Requests[0], tr.Requests[1], tr.Requests[2]
	if a.At != 0 || a.Prompt != 100 || a.Line != 2 || b.At != 1500*time.Millisecond || b.Output != 30 || len(b.Blocks) != 2 || b.Blocks[1] != 0xbb {
		t.Errorf("requests %+v %+v", a, b)
	}
	// The median of {100, 900} (upper) and of the completed outputs {10, 30}.
	if c.At != 2*time.Second || c.Prompt != 900 || c.Output != 30 {
		t.Errorf("refused request %+v: want the medians 900 and 30", c)
	}
}

func TestBadTraces(t *testing.T) {
	for _, tc := range []struct {
		name, file, content string
		format              trace.Format
		want                string
	}{
		{"empty", "e.jsonl", "\n\n", trace.Auto, "e.jsonl: no requests"},
		{"empty csv", "e.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", trace.Auto, "e.csv: no requests"},
		{"unsorted", "u.jsonl", `{"timestamp": 5, "input_length": 1, "output_length": 1}` + "\n" + `{"timestamp": 4, "input_length": 1, "output_length": 1}`, trace.Auto, "u.jsonl:2: field timestamp: 4 ms is before"},
		{"negative", "n.jsonl", `{"timestamp": -1, "input_length": 1, "output_length": 1}`, trace.Mooncake, "n.jsonl:1: field timestamp: negative"},
		{"missing field", "f.jsonl", `{"timestamp": 1, "output_length": 1}`, trace.Auto, "f.jsonl:1: field input_length: missing"},
		{"wrong type", "w.jsonl", `{"timestamp": 1, "input_length": "9", "output_length": 1}`, trace.Auto, "w.jsonl:1: field input_length: want int"},
		{"missing column", "c.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6805900,3\n", trace.Auto, "c.csv:1: field GeneratedTokens: missing column"},
		{"bad datetime", "d.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,3,4\n", trace.Auto, "d.csv:2: field TIMESTAMP"},
		{"unsorted csv", "s.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,3,4\n2023-11-16 18:15:46,3,4\n", trace.Auto, "s.csv:3: field TIMESTAMP"},
		{"bad prefix", "k.jsonl", `{"arrival":"2026-01-02T03:04:05Z","outcome":"good","prefix":["zz"]}`, trace.Auto, "k.jsonl:1: field prefix[0]"},
		{"no arrival", "a.jsonl", `{"route":"chat","outcome":"good"}`, trace.Kneecap, "a.jsonl:1: field arrival: missing"},
		{"unknown", "x.txt", "hello\n", trace.Auto, "x.txt:1: unknown format"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := trace.ReadFile(write(t, tc.file, tc.content), tc.format)
			var te *trace.Error
			if !errors.As(err, &te) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}

func TestWindowScaleAndContext(t *testing.T) {
	p := write(t, "m.jsonl", `{"timestamp": 0, "input_length": 1000, "output_length": 100}
{"timestamp": 10000, "input_length": 2000, "output_length": 200}
{"timestamp": 20000, "input_length": 3000, "output_length": 300}
{"timestamp": 30000, "input_length": 4000, "output_length": 400}
`)
	tr, err := trace.ReadFile(p, trace.Auto)
	if err != nil {
		t.Fatal(err)
	}
	w, err := tr.Window(10*time.Second, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Requests) != 2 || w.Requests[0].At != 0 || w.Requests[1].At != 10*time.Second || w.Requests[1].Line != 3 {
		t.Fatalf("window %+v", w.Requests)
	}
	s := w.Scale(2, 0.25)
	if s.Requests[1].At != 5*time.Second || s.Requests[1].Prompt != 750 || s.Requests[1].Output != 75 {
		t.Errorf("scaled %+v", s.Requests[1])
	}
	if _, err := tr.Window(time.Hour, 0); err == nil || !strings.Contains(err.Error(), "no requests from 1h0m0s") {
		t.Errorf("empty window: %v", err)
	}
	err = tr.CheckContext(4096)
	if err == nil || !strings.Contains(err.Error(), "m.jsonl:4: field length: prompt 4000 + output 400") {
		t.Errorf("context check: %v", err)
	}
}

func TestPromptSharesBlocks(t *testing.T) {
	a := trace.Prompt(trace.Request{Prompt: 25, Blocks: []uint64{7, 8, 9}, Line: 1}, 10)
	b := trace.Prompt(trace.Request{Prompt: 23, Blocks: []uint64{7, 8, 4}, Line: 2}, 10)
	c := trace.Prompt(trace.Request{Prompt: 12, Line: 3}, 10)
	d := trace.Prompt(trace.Request{Prompt: 12, Line: 4}, 10)
	wa, wb, wc := strings.Fields(a), strings.Fields(b), strings.Fields(c)
	if len(wa) != 25 || len(wb) != 23 || len(wc) != 12 {
		t.Fatalf("%d, %d, %d words, want 25, 23, 12", len(wa), len(wb), len(wc))
	}
	if strings.Join(wa[:20], " ") != strings.Join(wb[:20], " ") {
		t.Error("blocks 7 and 8 differ between the prompts that share them")
	}
	if strings.Join(wa[20:23], " ") == strings.Join(wb[20:23], " ") {
		t.Error("blocks 9 and 4 gave the same words")
	}
	if c == d {
		t.Error("two requests without blocks share their prompt")
	}
	if again := trace.Prompt(trace.Request{Prompt: 25, Blocks: []uint64{7, 8, 9}, Line: 1}, 10); again != a {
		t.Error("the prompt is not deterministic")
	}
}
