package fleet

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The balancers' configurations are the files docs/fleet.md shows
// (deploy/fleet); the test changes only what a machine with every replica
// on 127.0.0.1 must: the listen port, each server's address and, for
// HAProxy, each server's check and agent ports.
const (
	nginxConf   = "../deploy/fleet/nginx.conf"
	haproxyConf = "../deploy/fleet/haproxy.cfg"
)

// balancer is nginx or HAProxy running as a child process.
type balancer struct {
	name string
	addr string // host:port it listens on
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	once sync.Once
}

// lookBalancer finds a balancer's binary: in PATH or /usr/sbin (Debian
// installs both there). Without it the test skips, except under CI, where
// scripts/deps installs both and a missing one fails.
func lookBalancer(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p := "/usr/sbin/" + name; isExec(p) {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not installed (scripts/deps installs it)", name)
	}
	t.Skipf("%s is not installed (scripts/deps installs it from Debian's packages)", name)
	return ""
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode()&0o111 != 0
}

// serverLine matches a server line of either file: nginx's "server ADDR
// opts;" inside the upstream block and HAProxy's "server NAME ADDR opts".
var (
	nginxServer   = regexp.MustCompile(`(?m)^([ \t]*server[ \t]+)([^\s;{]+)((?:[ \t][^\n{]*)?;)[ \t]*$`)
	nginxListen   = regexp.MustCompile(`(?m)^([ \t]*listen[ \t]+)\d+;`)
	haproxyServer = regexp.MustCompile(`(?m)^([ \t]*server[ \t]+\S+[ \t]+)(\S+)(.*)$`)
	haproxyBind   = regexp.MustCompile(`(?m)^([ \t]*bind[ \t]+):\d+`)
)

// renderNginx returns the documented nginx configuration with listen and
// one server line per replica (the options of the documented lines kept;
// the first line's repeated for replicas beyond the example's).
func renderNginx(t testing.TB, listen string, reps []*replica) string {
	t.Helper()
	src := readFile(t, nginxConf)
	lines := nginxServer.FindAllStringSubmatch(src, -1)
	if len(lines) == 0 || !nginxListen.MatchString(src) {
		t.Fatalf("%s: no server or listen line", nginxConf)
	}
	var b strings.Builder
	for _, r := range reps {
		fmt.Fprintf(&b, "%s%s%s\n", lines[0][1], r.traffic, lines[0][3])
	}
	first := true
	out := nginxServer.ReplaceAllStringFunc(src, func(string) string {
		if first {
			first = false
			return strings.TrimSuffix(b.String(), "\n")
		}
		return ""
	})
	return nginxListen.ReplaceAllString(out, "${1}"+listen+";")
}

// renderHAProxy returns the documented HAProxy configuration bound to
// listen, with one server line per replica, each with its own check port
// (the admin listener) and agent port.
func renderHAProxy(t testing.TB, listen string, reps []*replica) string {
	t.Helper()
	src := readFile(t, haproxyConf)
	lines := haproxyServer.FindAllStringSubmatch(src, -1)
	if len(lines) == 0 || !haproxyBind.MatchString(src) {
		t.Fatalf("%s: no server or bind line", haproxyConf)
	}
	var b strings.Builder
	for i, r := range reps {
		fmt.Fprintf(&b, "    server kneecap-%d %s%s port %s", i+1, r.traffic, lines[0][3], port(r.admin))
		if r.agent != "" {
			fmt.Fprintf(&b, " agent-port %s", port(r.agent))
		}
		b.WriteString("\n")
	}
	first := true
	out := haproxyServer.ReplaceAllStringFunc(src, func(string) string {
		if first {
			first = false
			return strings.TrimSuffix(b.String(), "\n")
		}
		return ""
	})
	return haproxyBind.ReplaceAllString(out, "${1}"+listen)
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// startNginx runs nginx with the documented configuration in front of reps
// and stops it in t.Cleanup.
func startNginx(t testing.TB, reps []*replica) *balancer {
	t.Helper()
	bin := lookBalancer(t, "nginx")
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		// Workers drop to "nobody", which must be able to read the prefix.
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	addr := freeAddr(t)
	conf := filepath.Join(dir, "nginx.conf")
	writeFile(t, conf, renderNginx(t, addr, reps))
	errLog := filepath.Join(dir, "error.log")
	cmd := exec.Command(bin, "-p", dir, "-c", conf, "-e", errLog,
		"-g", "daemon off; master_process on; pid "+filepath.Join(dir, "nginx.pid")+"; error_log "+errLog+" warn;")
	return startBalancer(t, "nginx", addr, cmd)
}

// startHAProxy runs HAProxy with the documented configuration in front of
// reps and stops it in t.Cleanup.
func startHAProxy(t testing.TB, reps []*replica) *balancer {
	t.Helper()
	bin := lookBalancer(t, "haproxy")
	dir := t.TempDir()
	addr := freeAddr(t)
	conf := filepath.Join(dir, "haproxy.cfg")
	writeFile(t, conf, renderHAProxy(t, addr, reps))
	// -db: foreground, no daemon; -W: master-worker, so that the master's
	// exit on SIGTERM ends its worker.
	cmd := exec.Command(bin, "-db", "-W", "-f", conf)
	return startBalancer(t, "haproxy", addr, cmd)
}

func writeFile(t testing.TB, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func startBalancer(t testing.TB, name, addr string, cmd *exec.Cmd) *balancer {
	t.Helper()
	b := &balancer{name: name, addr: addr, cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = b.out, b.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); close(b.done) }()
	t.Cleanup(func() { b.stop(t) })
	deadline := time.Now().Add(10 * time.Second)
	for !dials(addr) {
		select {
		case <-b.done:
			t.Fatalf("%s exited at start: %s", name, b.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not listen on %s: %s", name, addr, b.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return b
}

// stop ends the balancer's process group (SIGTERM, then SIGKILL after 5 s).
func (b *balancer) stop(t testing.TB) {
	b.once.Do(func() {
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			<-b.done
		}
	})
}

// syncBuffer collects a child's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 1<<20 {
		return len(p), nil
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
