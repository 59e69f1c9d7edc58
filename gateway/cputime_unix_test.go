//go:build unix

package gateway_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time the process has used, every goroutine's (the
// tracer's exports, the garbage collector) included.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
