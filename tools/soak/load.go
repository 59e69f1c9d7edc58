package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kneecap/kneecap/testengine"
)

// behavior is how a client treats its request.
type behavior int

const (
	normal         behavior = iota
	leaveMidStream          // reads 1-5 data events of a stream, then hangs up
	leaveEarly              // gives up after 10-300 ms: usually while queued
	slowStall               // a stream on a tiny socket buffer; reads nothing for 3-4 s, then the rest
	slowTrickle             // a stream on a tiny socket buffer, read 256 bytes per 50 ms; gives up after 8 s
)

// badMix is the share of each bad behaviour among bad clients.
var badMix = [...]struct {
	b     behavior
	share float64
}{{leaveMidStream, 1.0 / 3}, {leaveEarly, 1.0 / 3}, {slowTrickle, 1.0 / 6}, {slowStall, 1.0 / 6}}

var behaviorNames = [...]string{"normal", "leave mid-stream", "leave early", "slow reader (stalls 3-4 s)", "slow reader (trickles)"}

// clientTimeout bounds every request, whatever its client: a request
// without any answer by then is a broken one (the gateway's own bounds are
// 2-5 s).
const clientTimeout = 60 * time.Second

// job is one request and how its client behaves.
type job struct {
	chat, stream, usage, ignoreEOS bool
	prompt, maxTokens              int
	hdr                            [][2]string
	fault                          string // X-Test-Fault, "" for none
	behavior                       behavior
	leaveAfter                     int           // leaveMidStream: data events read first
	timeout                        time.Duration // leaveEarly
	stall                          time.Duration // slowStall
}

// user is one closed-loop client: one request at a time, the next as soon
// as the last one is answered (after a Retry-After, bounded).
type user struct {
	t   *target
	cfg config
	rng *rand.Rand
	rec *recorder
}

func newUser(t *target, i int, cfg config, rec *recorder) *user {
	salt := uint64(len(t.name))<<32 | uint64(t.name[0])<<40
	return &user{t: t, cfg: cfg, rec: rec, rng: rand.New(rand.NewPCG(cfg.seed, salt^uint64(i)*0x9e3779b97f4a7c15))}
}

// loop sends requests until ctx ends. A request in flight when it ends is
// finished, not cancelled: stopping the load must not look like clients
// leaving.
func (u *user) loop(ctx context.Context) {
	for ctx.Err() == nil {
		j := u.t.draw(u)
		res := u.do(j)
		u.rec.add(u.t.name, j, res)
		pause := time.Duration(0)
		switch {
		case res.retryAfter > 0:
			pause = min(res.retryAfter, u.t.retryMax)
		case res.status == http.StatusBadGateway || res.status == http.StatusServiceUnavailable:
			pause = 100 * time.Millisecond // the engine is down or restarting
		case res.class != classComplete:
			pause = 20 * time.Millisecond
		}
		if pause > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
		}
	}
}

// between draws uniformly from [lo, hi].
func (u *user) between(lo, hi int) int { return lo + u.rng.IntN(hi-lo+1) }

// chance is true with probability p.
func (u *user) chance(p float64) bool { return u.rng.Float64() < p }

// badBehavior draws a bad client's behaviour with probability cfg.badRate.
func (u *user) badBehavior(j *job) {
	if !u.chance(u.cfg.badRate) {
		return
	}
	x := u.rng.Float64()
	for _, m := range badMix {
		if j.behavior = m.b; x < m.share {
			break
		}
		x -= m.share
	}
	switch j.behavior {
	case leaveMidStream:
		j.stream, j.leaveAfter = true, u.between(1, 5)
	case leaveEarly:
		j.timeout = time.Duration(u.between(10, 300)) * time.Millisecond
	case slowStall:
		j.stream, j.stall = true, time.Duration(u.between(3000, 4000))*time.Millisecond
	case slowTrickle:
		j.stream = true
	}
}

// simJob is the simulator's mix: chat and completions, 75 % streamed,
// prompts of 200-4,800 tokens (the demo's workload is 4,000), 16-256
// output tokens, half with ignore_eos (else the simulator draws the length).
func simJob(u *user) job {
	j := job{chat: u.chance(0.5), stream: u.chance(0.75), prompt: u.between(200, 4800), maxTokens: u.between(16, 256), ignoreEOS: u.chance(0.5)}
	u.badBehavior(&j)
	if j.behavior == slowStall || j.behavior == slowTrickle {
		j.prompt, j.maxTokens, j.ignoreEOS = u.between(100, 500), u.between(1000, 3000), true
	}
	j.usage = j.stream && u.chance(0.3)
	return j
}

// uvicornJob is the uvicorn engine's mix: chat and completions, 75 %
// streamed, 4-64 tokens 5-25 ms apart after a first delay of 0-50 ms; a
// normal client's request carries a random fault with cfg.faultRate.
func uvicornJob(u *user) job {
	n := u.between(4, 64)
	j := job{chat: u.chance(0.5), stream: u.chance(0.75), prompt: u.between(10, 200), maxTokens: n}
	gap, first := u.between(5, 25), u.between(0, 50)
	u.badBehavior(&j)
	if j.behavior == slowStall || j.behavior == slowTrickle {
		// Half of the stalled readers ask for more than the kernel buffers
		// between the gateway and them hold (about 2.8 MB, some 16,000
		// chunks of the uvicorn engine): the gateway's write to them blocks
		// and it must cut them after KNEECAP_CLIENT_WRITE_TIMEOUT.
		n, gap, first = u.between(500, 2000), 0, 0
		if j.behavior == slowStall && u.chance(0.5) {
			n = u.between(20000, 24000)
		}
		j.maxTokens = n
	}
	j.usage = j.stream && u.chance(0.3)
	j.hdr = [][2]string{
		{testengine.HeaderTokens, strconv.Itoa(n)},
		{testengine.HeaderGap, strconv.Itoa(gap)},
		{testengine.HeaderFirstDelay, strconv.Itoa(first)},
	}
	if j.behavior == normal && u.chance(u.cfg.faultRate) {
		j.fault = testengine.Faults[u.rng.IntN(len(testengine.Faults))]
		j.hdr = append(j.hdr, [2]string{testengine.HeaderFault, j.fault})
	}
	return j
}

// words is the prompt text: "w w w ...", sliced to length.
var words = strings.Repeat("w ", 5000)

func (j job) path() string {
	if j.chat {
		return "/v1/chat/completions"
	}
	return "/v1/completions"
}

func (j job) body() string {
	var b strings.Builder
	b.Grow(2*j.prompt + 200)
	fmt.Fprintf(&b, `{"model":"soak","stream":%t,"max_tokens":%d`, j.stream, j.maxTokens)
	if j.ignoreEOS {
		b.WriteString(`,"ignore_eos":true`)
	}
	if j.usage {
		b.WriteString(`,"stream_options":{"include_usage":true}`)
	}
	text := words[:2*j.prompt-1]
	if j.chat {
		fmt.Fprintf(&b, `,"messages":[{"role":"user","content":"%s"}]}`, text)
	} else {
		fmt.Fprintf(&b, `,"prompt":"%s"}`, text)
	}
	return b.String()
}

// do sends one request and reads its answer as its client does.
func (u *user) do(j job) result {
	if j.behavior == slowStall || j.behavior == slowTrickle {
		return u.doSlow(j)
	}
	bound, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	ctx := bound
	if j.behavior == leaveEarly {
		var c2 context.CancelFunc
		ctx, c2 = context.WithTimeout(bound, j.timeout)
		defer c2()
	}
	// The client left (its own short timeout), or the answer took longer
	// than any bound of the gateway allows.
	left := func() bool { return j.behavior == leaveEarly && ctx.Err() != nil && bound.Err() == nil }
	timedOut := func() bool { return bound.Err() != nil }
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.t.base+j.path(), strings.NewReader(j.body()))
	if err != nil {
		return broken("building the request: " + err.Error())
	}
	req.Header.Set("Content-Type", "application/json")
	for _, h := range j.hdr {
		req.Header.Set(h[0], h[1])
	}
	resp, err := u.t.client.Do(req)
	if err != nil {
		switch {
		case left():
			return clientSide("left early, before the response headers")
		case timedOut():
			return broken("no response headers within the client's 60 s")
		}
		return broken("transport error before the response: " + errKind(err))
	}
	defer resp.Body.Close()
	res, hungUp := readAnswer(resp, resp.Body, j.leaveAfter)
	switch {
	case hungUp:
		return clientSide("left mid-stream")
	case res.readErr != nil && left():
		return clientSide("left early, after the response headers")
	case res.readErr != nil && timedOut():
		return broken("no end of the answer within the client's 60 s")
	}
	return res
}

// doSlow sends a streamed request on a connection with a 4 KiB receive
// buffer, so that the gateway's writes block when the client does not
// read, and reads the answer slowly.
func (u *user) doSlow(j job) result {
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(u.t.base, "http://"))
	if err != nil {
		return broken("slow reader: dial: " + errKind(err))
	}
	defer conn.Close()
	giveUp := time.Now().Add(clientTimeout)
	if j.behavior == slowTrickle {
		giveUp = time.Now().Add(8 * time.Second)
	}
	_ = conn.SetDeadline(giveUp)
	body := j.body()
	var head strings.Builder
	fmt.Fprintf(&head, "POST %s HTTP/1.1\r\nHost: kneecap\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n", j.path(), len(body))
	for _, h := range j.hdr {
		fmt.Fprintf(&head, "%s: %s\r\n", h[0], h[1])
	}
	head.WriteString("\r\n")
	if _, err := io.WriteString(conn, head.String()+body); err != nil {
		return broken("slow reader: writing the request: " + errKind(err))
	}
	br := bufio.NewReaderSize(conn, 512)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) && j.behavior == slowTrickle {
			return clientSide("slow reader gave up (8 s) before the headers")
		}
		return broken("slow reader: reading the response head: " + errKind(err))
	}
	defer resp.Body.Close()
	var r io.Reader = resp.Body
	if j.behavior == slowStall {
		time.Sleep(j.stall)
	} else {
		r = &trickle{r: resp.Body}
	}
	res, _ := readAnswer(resp, r, 0)
	switch {
	case res.readErr == nil:
		return res
	case errors.Is(res.readErr, os.ErrDeadlineExceeded) && j.behavior == slowTrickle:
		return clientSide("slow reader gave up (8 s)")
	case errors.Is(res.readErr, os.ErrDeadlineExceeded):
		return broken("slow reader: no end of the answer within the client's 60 s")
	}
	// The gateway cut the connection of a client that took no bytes for
	// KNEECAP_CLIENT_WRITE_TIMEOUT: what it must do with a client it can no
	// longer write an error to.
	return clientSide("slow reader cut off by the gateway")
}

// trickle reads at most 256 bytes per 50 ms.
type trickle struct{ r io.Reader }

func (t *trickle) Read(p []byte) (int, error) {
	time.Sleep(50 * time.Millisecond)
	return t.r.Read(p[:min(len(p), 256)])
}

// errKind names an error by its kind, without addresses or ports, so that
// errors of one kind count together.
func errKind(err error) string {
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected EOF"
	case errors.Is(err, io.EOF):
		return "EOF"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe"
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return s
}
