package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestProgressPrinter(t *testing.T) {
	var tty, plain bytes.Buffer
	bar, lines := ProgressPrinter(&tty, true, Closed), ProgressPrinter(&plain, false, Closed)
	for _, p := range []Progress{
		{Level: 0, Levels: 2, Value: 4, Phase: "warmup", Elapsed: time.Second},
		{Level: 0, Levels: 2, Value: 4, Phase: "measure", Elapsed: 5 * time.Second, Window: 10 * time.Second, Done: 7, Good: 6},
		{Level: 0, Levels: 2, Value: 4, Phase: "measure", Elapsed: 6 * time.Second, Window: 10 * time.Second, Done: 8, Good: 7},
		{Level: 0, Levels: 2, Value: 4, Phase: "done", Elapsed: 10 * time.Second, Window: 10 * time.Second, Done: 14, Good: 12},
	} {
		bar(p)
		lines(p)
	}
	if s := tty.String(); !strings.Contains(s, "\r\033[K[===============               ]  50% level 1/2 (concurrency 4) measure") || !strings.HasSuffix(s, "\n") {
		t.Errorf("bar output %q", s)
	}
	// Plain: one line per phase change, not one per tick.
	if got := strings.Count(plain.String(), "\n"); got != 3 || strings.Contains(plain.String(), "\r") {
		t.Errorf("plain output has %d lines: %q", got, plain.String())
	}
}
