package demo

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A very short demo over real sockets: both runs happen, the comparison and
// the plot are written, and nothing is left running.
func TestShortDemo(t *testing.T) {
	var out, progress bytes.Buffer
	plot := filepath.Join(t.TempDir(), "demo.svg")
	err := Run(t.Context(), Config{
		TimeScale: 50, Levels: []float64{1, 4}, Warmup: 5 * time.Second, Window: 20 * time.Second,
		PromptTokens: 100, OutputTokens: 20, Plot: plot, Stdout: &out, Progress: &progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"engine alone", "through kneecap", "TPOT p50", "kneecap gateway at http://127.0.0.1:",
		"engine alone: knee:", "plot written to " + plot} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(progress.String(), "level 2/2") {
		t.Errorf("progress %q", progress.String())
	}
	if svg, err := os.ReadFile(plot); err != nil || !bytes.Contains(svg, []byte("through kneecap goodput")) {
		t.Fatalf("plot: %v", err)
	}
}

func TestChooseController(t *testing.T) {
	if c, err := chooseController(benchReport(nil)); err != nil || c.Cap != 0 || !strings.Contains(c.Why, "adaptive") {
		t.Fatalf("not the adaptive controller: %+v, %v", c, err)
	}
	if c := staticAtKnee(benchReport(nil)); c.Cap != 1 {
		t.Fatalf("no good level: %+v", c)
	}
	if c := staticAtKnee(benchReport([]float64{0.2, 0.5, 0.1})); c.Cap != 2 || !strings.Contains(c.Why, "static cap 2") {
		t.Fatalf("knee at level 2: %+v", c)
	}
}
