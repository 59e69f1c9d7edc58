package bench

import (
	"os"
	"strings"
)

// LoadAverage is the machine's load average over 1, 5 and 15 minutes, as
// /proc/loadavg gives it ("1.02 0.80 0.75"), or "?" where there is none:
// a measurement made in real time says how loaded its machine was.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
