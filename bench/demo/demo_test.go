package demo

import (
	"bytes"
	"io"
	"net/http"
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
	var progress bytes.Buffer
	out := &pageFetcher{t: t}
	plot := filepath.Join(t.TempDir(), "demo.svg")
	err := Run(t.Context(), Config{
		TimeScale: 50, Levels: []float64{1, 4}, Warmup: 5 * time.Second, Window: 20 * time.Second,
		PromptTokens: 100, OutputTokens: 20, Plot: plot, Stdout: out, Progress: &progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !out.served {
		t.Error("the live page's URL was not printed, or did not serve the page")
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

// pageFetcher is the demo's output: when the line with the live page's
// URL is written, it fetches the page from it.
type pageFetcher struct {
	t *testing.T
	bytes.Buffer
	served bool
}

func (p *pageFetcher) Write(b []byte) (int, error) {
	if _, url, ok := strings.Cut(string(b), "live page, served while the demo runs: "); ok {
		url, _, _ = strings.Cut(url, " ")
		c := &http.Client{Timeout: 10 * time.Second}
		resp, err := c.Get(url)
		if err != nil {
			p.t.Errorf("GET %s: %v", url, err)
		} else {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			p.served = resp.StatusCode == 200 && bytes.Contains(body, []byte("live/page.js"))
			c.CloseIdleConnections()
		}
	}
	return p.Buffer.Write(b)
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
