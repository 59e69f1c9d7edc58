package demo

import (
	"time"

	"github.com/kneecap/kneecap/bench"
)

// benchReport is a closed-loop report at levels 1, 2, 4, ... with the given
// goodputs.
func benchReport(goodputs []float64) bench.Report {
	rep := bench.Report{Mode: bench.Closed, Targets: bench.Targets{TTFT: time.Second}, MinAttainment: 0.9}
	for i, g := range goodputs {
		lv := bench.Level{Index: i, Value: float64(int(1) << i)}
		lv.Summary = bench.Summary{Goodput: g, Good: int(g * 100), Completed: 100, Attainment: 1}
		rep.Levels = append(rep.Levels, lv)
	}
	return rep
}
