package sim

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The simulator must never be the bottleneck: at 1000 running streams its
// own CPU per step must stay well under the step time it simulates. The
// benchmarks below measure the parts; TestOverhead measures the whole, with
// the simulator in a process of its own and 1000 real streams over
// 127.0.0.1. Run it with
//
//	go test ./sim -run Overhead -v -args -overhead
//	go test ./sim -run '^$' -bench . -benchmem

var overhead = flag.Bool("overhead", false, "run the 1000-stream overhead measurement (about a minute)")

func BenchmarkStep1000(b *testing.B) { benchSteps(b, false) }

// BenchmarkStep1000Prefix is BenchmarkStep1000 with the prefix cache on:
// every token is hashed, every 16th completes a block that is cached.
func BenchmarkStep1000Prefix(b *testing.B) { benchSteps(b, true) }

func benchSteps(b *testing.B, prefix bool) {
	p := GB10BF16
	p.KVCacheTokens = 1 << 40 // never preempt: measure 1000 decoding sequences
	e := newEngine(p, nil)
	if prefix {
		e.pc = newPrefixCache(16)
	}
	now := time.Unix(0, 0)
	for i := range 1000 {
		s := newSeq(1000, 1<<30, "length", now)
		if prefix {
			s.hasher = newPrefixHasher(16)
			countWords(fmt.Sprintf("user%d", i)+strings.Repeat(" w", 999), s.hasher)
			s.blocks = s.hasher.out
		}
		e.add(s)
	}
	for e.numWaiting() > 0 || e.running[len(e.running)-1].generated == 0 {
		e.schedule()
		e.commit(now)
	}
	if len(e.running) != 1000 {
		b.Fatalf("%d running", len(e.running))
	}
	b.ResetTimer()
	for b.Loop() {
		e.schedule()
		e.commit(now)
		for _, s := range e.running {
			select { // the handler's side: drain the wake-up
			case <-s.ready:
			default:
			}
		}
	}
}

func BenchmarkChunk(b *testing.B) {
	for _, fl := range Flavors() {
		b.Run(string(fl), func(b *testing.B) {
			f, _ := lookupFlavor(fl)
			c := &chunker{fl: f, chat: true, id: "chatcmpl-sim-1f", created: 1700000000, model: []byte(`"Qwen/Qwen3-30B-A3B"`), prompt: 1000}
			buf := make([]byte, 0, 1024)
			i := 0
			for b.Loop() {
				buf = c.tokens(buf[:0], i, i+1, "")
				_, _ = io.Discard.Write(buf)
				i++
			}
		})
	}
}

// cpuTicks is the user+system CPU time of a process, in clock ticks.
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s, nil
}

// scrape reads the value of one metric series from /metrics.
func scrape(t *testing.T, base, name string) float64 {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			return v
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}

func TestOverhead(t *testing.T) {
	if !*overhead {
		t.Skip("-overhead not set")
	}
	const streams = 1000
	for _, scale := range []float64{1, 10} {
		t.Run(fmt.Sprintf("time-scale-%g", scale), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run", "^$")
			cmd.Env = append(os.Environ(), fmt.Sprintf("%s=gb10-bf16,%g", childEnv, scale))
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { stdin.Close(); _ = cmd.Wait() }()
			addr, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			base := "http://" + strings.TrimSpace(addr)
			tr := &http.Transport{MaxIdleConnsPerHost: streams, MaxConnsPerHost: 0}
			client := &http.Client{Transport: tr}
			defer tr.CloseIdleConnections()
			var wg sync.WaitGroup
			stop := make(chan struct{})
			for range streams {
				wg.Go(func() {
					body := `{"stream":true,"ignore_eos":true,"max_tokens":4000,"messages":[{"content":"` + strings.Repeat("w ", 100) + `"}]}`
					req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
					resp, err := client.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					defer resp.Body.Close()
					go func() { <-stop; resp.Body.Close() }()
					_, _ = io.Copy(io.Discard, resp.Body)
				})
			}
			defer func() { close(stop); wg.Wait() }()
			for scrape(t, base, "vllm:num_requests_running") < streams {
				time.Sleep(100 * time.Millisecond)
			}
			window := 20 * time.Second
			c0, _ := cpuTicks(cmd.Process.Pid)
			n0, s0 := scrape(t, base, "vllm:inter_token_latency_seconds_count"), scrape(t, base, "vllm:inter_token_latency_seconds_sum")
			start := time.Now()
			time.Sleep(window)
			c1, _ := cpuTicks(cmd.Process.Pid)
			n1, s1 := scrape(t, base, "vllm:inter_token_latency_seconds_count"), scrape(t, base, "vllm:inter_token_latency_seconds_sum")
			wall := time.Since(start)
			steps := (n1 - n0) / streams
			cpu := time.Duration(c1-c0) * 10 * time.Millisecond // USER_HZ = 100
			stepWall := time.Duration((s1 - s0) / (n1 - n0) * float64(time.Second))
			perStep := time.Duration(float64(cpu) / steps)
			fmt.Printf("time scale %g: %d streams, %.0f steps in %v; mean step %v wall (%v simulated); simulator CPU %v per step = %.2f %% of the wall step, %.3f %% of the simulated step\n",
				scale, streams, steps, wall.Round(time.Millisecond), stepWall.Round(time.Microsecond),
				time.Duration(float64(stepWall)*scale).Round(time.Millisecond), perStep.Round(time.Microsecond),
				100*float64(perStep)/float64(stepWall), 100*float64(perStep)/(float64(stepWall)*scale))
		})
	}
}
