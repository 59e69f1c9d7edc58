package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// A very short demo through the command: engine alone and through the
// gateway, side by side, and the plot written.
func TestDemoCommand(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "demo.png")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"demo", "--concurrency", "1,2", "--time-scale", "50",
		"--warmup", "5s", "--duration", "10s", "--plot", plot, "--quiet"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out.String(), errb.String())
	}
	for _, want := range []string{"engine alone", "through kneecap", "adaptive cap", "plot written to " + plot} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, out.String())
		}
	}
	if code := run(context.Background(), []string{"demo", "--plot", "x.gif"}, &out, &errb); code != 2 {
		t.Errorf("bad --plot: exit %d, want 2", code)
	}
}
