package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// ProgressPrinter returns a Config.Progress callback that writes to w: on a
// terminal one bar redrawn in place, otherwise one plain line per level
// phase change and about every 10 seconds.
func ProgressPrinter(w io.Writer, terminal bool, mode Mode) func(Progress) {
	var lastLine time.Duration
	lastPhase := ""
	return func(p Progress) {
		name := fmt.Sprintf("level %d/%d (%s %s)", p.Level+1, p.Levels, mode, level(mode, p.Value))
		frac := 0.0
		switch {
		case p.Phase == "done":
			frac = 1
		case p.Phase == "measure" && p.Total > 0:
			frac = float64(p.Done) / float64(p.Total)
		case p.Phase == "measure" && p.Window > 0:
			frac = float64(p.Elapsed) / float64(p.Window)
		}
		if p.Phase == "measure" && p.Total > 0 && p.Window > 0 {
			frac = max(frac, float64(p.Elapsed)/float64(p.Window))
		}
		frac = min(max(frac, 0), 1)
		status := fmt.Sprintf("%s %s: %d ended, %d good, %s", name, p.Phase, p.Done, p.Good, p.Elapsed.Truncate(time.Second))
		if terminal {
			const width = 30
			n := int(frac * width)
			fmt.Fprintf(w, "\r\033[K[%s%s] %3.0f%% %s", strings.Repeat("=", n), strings.Repeat(" ", width-n), frac*100, status)
			if p.Phase == "done" {
				fmt.Fprintln(w)
			}
			return
		}
		if p.Phase != lastPhase || p.Elapsed-lastLine >= 10*time.Second || p.Phase == "done" {
			fmt.Fprintln(w, status)
			lastPhase, lastLine = p.Phase, p.Elapsed
		}
	}
}
