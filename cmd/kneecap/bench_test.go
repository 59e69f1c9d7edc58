package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// streamEngine answers every chat request with three tokens, 5 ms apart.
func streamEngine(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for range 3 {
			time.Sleep(5 * time.Millisecond)
			fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n")
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":3,\"total_tokens\":7}}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestBenchCommand(t *testing.T) {
	srv := streamEngine(t)
	dir := t.TempDir()
	jsonFile, plotFile := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.svg")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"bench", "--base-url", srv.URL, "--concurrency", "1,2",
		"--warmup", "50ms", "--duration", "300ms", "--input-len", "4", "--output-len", "3",
		"--json", jsonFile, "--plot", plotFile}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out.String(), errb.String())
	}
	for _, want := range []string{"out tok/s", "definitions (vLLM's)", "knee: highest goodput", "plot written to " + plotFile} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(errb.String(), "level 2/2") {
		t.Errorf("no progress lines on stderr: %q", errb.String())
	}
	raw, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Levels []map[string]any `json:"levels"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil || len(rep.Levels) != 2 || rep.Levels[1]["max_concurrency"] != 2.0 ||
		rep.Levels[0]["completed"].(float64) < 1 {
		t.Fatalf("JSON %v: %s", err, raw)
	}
	if svg, _ := os.ReadFile(plotFile); !bytes.Contains(svg, []byte("<svg")) {
		t.Fatal("no SVG written")
	}
}

func TestBenchBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"bench"},
		{"bench", "--base-url", "http://x", "--concurrency", "1", "--rate", "1"},
		{"bench", "--base-url", "http://x", "--goodput", "ttft=soon"},
		{"bench", "--base-url", "http://x", "--plot", "out.jpg"},
		{"bench", "--base-url", "http://x", "--input-len", "many"},
		{"bench", "--base-url", "http://x", "--time-scale", "0"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %s)", args, code, errb.String())
		}
	}
}

func TestBenchOpenLoop(t *testing.T) {
	srv := streamEngine(t)
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"bench", "--base-url", srv.URL, "--rate", "40,80", "--arrivals", "constant",
		"--warmup", "0s", "--duration", "250ms", "--quiet"}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "80/s") || !strings.Contains(out.String(), "due (scheduled arrival)") || errb.Len() != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out.String(), errb.String())
	}
}
