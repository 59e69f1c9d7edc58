package loadtest

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// The gateway's log of a run keeps its first records whole, one per line,
// within its bound, and counts the rest.
func TestLogTailKeepsTheStartAndCountsTheRest(t *testing.T) {
	tail := &logTail{}
	log := slog.New(slog.NewTextHandler(tail, &slog.HandlerOptions{Level: slog.LevelWarn}))
	log.Info("info record")
	log.Warn("http: panic serving 127.0.0.1:1: boom\ngoroutine 1 [running]:")
	for i := range 2000 {
		log.Error("engine unreachable", "try", i)
	}
	lines := tail.lines()
	if len(lines) < 3 || !strings.Contains(lines[0], "panic serving") || !strings.Contains(lines[0], `boom\ngoroutine`) {
		t.Fatalf("first lines %q: want the panic's record first, on one line", lines[:min(len(lines), 2)])
	}
	kept := strings.Join(lines, "\n")
	if len(kept) > logTailBytes+100 || strings.Contains(kept, "info record") {
		t.Errorf("kept %d bytes (bound %d), or a record below warn", len(kept), logTailBytes)
	}
	last := lines[len(lines)-1]
	if want := fmt.Sprintf("(%d more records not kept)", 2001-(len(lines)-1)); last != want {
		t.Errorf("last line %q, want %q", last, want)
	}
}
