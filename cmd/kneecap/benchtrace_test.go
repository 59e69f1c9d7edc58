package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBenchTrace(t *testing.T) {
	srv := streamEngine(t)
	dir := t.TempDir()
	traceFile, plotFile := filepath.Join(dir, "t.jsonl"), filepath.Join(dir, "t.svg")
	lines := `{"timestamp": 0, "input_length": 4, "output_length": 3, "hash_ids": [0]}
{"timestamp": 100, "input_length": 4, "output_length": 3, "hash_ids": [0]}
{"timestamp": 150, "input_length": 4, "output_length": 3, "hash_ids": [1]}
{"timestamp": 400, "input_length": 4, "output_length": 3, "hash_ids": [2]}
`
	if err := os.WriteFile(traceFile, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"bench", "--base-url", srv.URL, "--trace", traceFile,
		"--trace-start", "100ms", "--goodput", "ttft=5s,tpot=1s", "--plot", plotFile, "--quiet"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out.String(), errb.String())
	}
	for _, want := range []string{"trace " + traceFile + " (mooncake): 3 requests over 300ms, window from 100ms", "over time", "offered/s", "plot written to " + plotFile} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, out.String())
		}
	}
	if svg, _ := os.ReadFile(plotFile); !bytes.Contains(svg, []byte("Offered load and outcomes over time")) {
		t.Error("no timeline plot written")
	}
}

func TestBenchTraceBadInput(t *testing.T) {
	dir := t.TempDir()
	unsorted := filepath.Join(dir, "u.csv")
	os.WriteFile(unsorted, []byte("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,3,4\n2023-11-16 18:15:46,3,4\n"), 0o644)
	long := filepath.Join(dir, "l.jsonl")
	os.WriteFile(long, []byte(`{"timestamp": 0, "input_length": 5000, "output_length": 3}`+"\n"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--trace", unsorted}, "trace " + unsorted + ":3: field TIMESTAMP"},
		{[]string{"--trace", long, "--max-model-len", "4096"}, "trace " + long + ":1: field length: prompt 5000 + output 3"},
		{[]string{"--trace", long, "--rate", "1"}, "give no --concurrency or --rate"},
		{[]string{"--trace", long, "--trace-speed", "0"}, "--trace-speed must be positive"},
		{[]string{"--trace", filepath.Join(dir, "none.jsonl")}, "none.jsonl: open"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{"bench", "--base-url", "http://127.0.0.1:1", "--quiet"}, tc.args...), &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, code, errb.String(), tc.want)
		}
	}
}
