package sim

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

// childEnv makes the test binary serve a simulator instead of running
// tests: the overhead benchmark measures the simulator in a process of its
// own. The value is "profile,time-scale".
const childEnv = "KNEECAP_SIM_OVERHEAD_CHILD"

func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		os.Exit(serveChild(v))
	}
	goleak.VerifyTestMain(m)
}

// serveChild serves a Sim on 127.0.0.1:0, prints the address, and stops
// when stdin closes.
func serveChild(spec string) int {
	var name string
	var scale float64
	if _, err := fmt.Sscanf(spec, "%s", &name); err != nil {
		return 2
	}
	for i := range name {
		if name[i] == ',' {
			scale, _ = strconv.ParseFloat(name[i+1:], 64)
			name = name[:i]
			break
		}
	}
	p, err := LookupProfile(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s, err := New(Config{Profile: p, TimeScale: scale, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(l.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		cancel()
	}()
	srv := &http.Server{Handler: s.Handler()}
	go func() { _ = srv.Serve(l) }()
	_ = s.Run(ctx)
	_ = srv.Close()
	return 0
}
