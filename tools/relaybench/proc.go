package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clockTick is the unit of utime and stime in /proc/PID/stat. Linux exports
// it to user space as USER_HZ, which is 100 on every architecture Go runs on.
const clockTick = 10 * time.Millisecond

// child is one process the harness started: a relay under test or the engine.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd.Wait returns
	err  error         // cmd.Wait's result, valid after done is closed
	log  *logBuffer    // stderr, for the error message if it dies
}

// startChild starts cmd in its own process group, so that stop can end it and
// everything it forked (nginx's workers), and asks the kernel to kill it if
// the harness dies first.
func startChild(name string, cmd *exec.Cmd) (*child, error) {
	c := &child{name: name, cmd: cmd, done: make(chan struct{}), log: &logBuffer{n: 64 << 10}}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cmd.Stderr == nil {
		cmd.Stderr = c.log
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// pids returns the child's process and, for nginx, its workers: every live
// process whose parent is the child.
func (c *child) pids() []int {
	root := c.cmd.Process.Pid
	out := []int{root}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == root {
			continue
		}
		st, err := readStat(pid)
		if err == nil && st.ppid == root {
			out = append(out, pid)
		}
	}
	return out
}

// cpu returns the user+system CPU time used so far by the child and its
// children that are still running.
func (c *child) cpu() time.Duration {
	var sum time.Duration
	for _, pid := range c.pids() {
		if st, err := readStat(pid); err == nil {
			sum += st.cpu
		}
	}
	return sum
}

// syscalls returns the read-like and write-like system calls made so far by
// the child and its running children (/proc/PID/io syscr and syscw).
func (c *child) syscalls() (r, w int64) {
	for _, pid := range c.pids() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "syscr: "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				r += n
			}
			if v, ok := strings.CutPrefix(line, "syscw: "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				w += n
			}
		}
	}
	return r, w
}

// resetPeakRSS resets the kernel's peak-RSS mark (VmHWM) of every process of
// the child, so that peakRSS reports the peak since this call.
func (c *child) resetPeakRSS() error {
	var errs []error
	for _, pid := range c.pids() {
		errs = append(errs, os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0))
	}
	return errors.Join(errs...)
}

// peakRSS returns the sum of VmHWM over the child's processes: an upper bound
// of the peak of their summed RSS since the last resetPeakRSS.
func (c *child) peakRSS() int64 { return c.sumStatus("VmHWM:") }

// rss returns the sum of the current VmRSS over the child's processes.
func (c *child) rss() int64 { return c.sumStatus("VmRSS:") }

func (c *child) sumStatus(field string) int64 {
	var sum int64
	for _, pid := range c.pids() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				sum += kb << 10
			}
		}
	}
	return sum
}

// alive reports an error if the child has exited.
func (c *child) alive() error {
	select {
	case <-c.done:
		return fmt.Errorf("%s exited: %v: %s", c.name, c.err, lastLines(c.log.String(), 5))
	default:
		return nil
	}
}

// stop sends SIGTERM to the child's process group, waits up to grace, then
// kills the group.
func (c *child) stop(grace time.Duration) {
	pgid := c.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-c.done
	}
	// nginx's workers may outlive their master by a moment.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

type procStat struct {
	ppid int
	cpu  time.Duration
}

// readStat parses /proc/PID/stat: field 4 is ppid, 14 and 15 are utime and
// stime in clock ticks. The command name (field 2) may contain spaces, so
// fields are counted from its closing parenthesis.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3 (state)
	if len(f) < 13 {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	ppid, _ := strconv.Atoi(f[1])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return procStat{ppid: ppid, cpu: time.Duration(ut+st) * clockTick}, nil
}

// waitListening waits until addr accepts a TCP connection, the child dies, or
// ctx ends.
func waitListening(ctx context.Context, c *child, addr string) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		if err := c.alive(); err != nil {
			return err
		}
		conn, err := dialTimeout(addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not listen on %s within 15s: %s", c.name, addr, lastLines(c.log.String(), 5))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// raiseFileLimit lifts the soft limit on open files to the hard limit; the
// children inherit it. 1000 streams through a relay hold about 4000
// descriptors across the processes.
func raiseFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return 0, err
		}
	}
	return lim.Cur, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// logBuffer keeps the first n bytes written to it and drops the rest; it is
// written by exec's copying goroutine and read by the harness.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	n   int
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k := min(len(p), l.n-l.buf.Len()); k > 0 {
		l.buf.Write(p[:k])
	}
	return len(p), nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

func lastLinesN(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
