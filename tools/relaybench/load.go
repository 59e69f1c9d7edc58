package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// requestBody is a streamed chat request that asks for the usage report, as
// vLLM's benchmark client does; relays that add include_usage themselves
// (kneecap) then have nothing to strip.
const requestBody = `{"model":"relaybench","messages":[{"role":"user","content":"hello"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":100000}`

// wholeBody is the same request not streamed, as the OpenAI SDKs send it by
// default: kneecap streams it from the engine and reassembles the answer;
// the others relay it whole.
const wholeBody = `{"model":"relaybench","messages":[{"role":"user","content":"hello"}],"max_tokens":100000}`

// workload is what one round asks of a target.
type workload struct {
	streams   int           // concurrent streams (closed loop: one worker per stream)
	perWorker int           // streams each worker runs back to back
	chunks    int           // output chunks per stream
	interval  time.Duration // gap between chunks; 0 = unpaced
	stagger   time.Duration // worker i starts at i*stagger/streams
	timeout   time.Duration // bound on the whole round
	// steadyFrom is the first of each worker's streams that counts as
	// steady state: with stagger equal to one stream's duration, every
	// stream from the second on starts while streams-1 others are running.
	steadyFrom int
	// whole sends the requests not streamed (mode whole).
	whole bool
}

// streamResult is what the client saw of one stream.
type streamResult struct {
	ttfc   time.Duration // request start to the first output chunk's bytes
	e2e    time.Duration // request start to the end of the stream
	steady bool          // started with the full concurrency running
	events int           // SSE data events received (chunks, finish, usage, [DONE])
	broken bool
	reason string
}

// newClientTransport returns a client transport for one target with a pool
// large enough that every worker keeps its own keep-alive connection.
func newClientTransport() *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     5 * time.Minute,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
}

// runRound runs w against base (http://host:port) and returns one result per
// stream, in no particular order.
func runRound(ctx context.Context, client *http.Client, base string, w workload) []streamResult {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	results := make([]streamResult, w.streams*w.perWorker)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range w.streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if w.stagger > 0 {
				sleepCtx(ctx, time.Until(start.Add(time.Duration(i)*w.stagger/time.Duration(w.streams))))
			}
			for j := range w.perWorker {
				r := oneStream(ctx, client, base, w)
				r.steady = j >= w.steadyFrom
				results[i*w.perWorker+j] = r
			}
		}()
	}
	wg.Wait()
	return results
}

func oneStream(ctx context.Context, client *http.Client, base string, w workload) streamResult {
	body := requestBody
	if w.whole {
		body = wholeBody
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return streamResult{broken: true, reason: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(hdrChunks, strconv.Itoa(w.chunks))
	req.Header.Set(hdrInterval, w.interval.String())
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return streamResult{broken: true, reason: "request: " + shortErr(err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		reason := "status " + strconv.Itoa(resp.StatusCode)
		if why := resp.Header.Get("X-Kneecap-Reason"); why != "" {
			reason += " (" + why + ")" // a refusal by kneecap's admission, not a relay failure
		}
		return streamResult{broken: true, reason: reason}
	}
	if w.whole {
		return oneWhole(resp, t0, w)
	}
	var res streamResult
	br := bufio.NewReaderSize(resp.Body, 4096)
	done := false
	for {
		line, err := br.ReadSlice('\n')
		if payload, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			if res.events == 0 {
				res.ttfc = time.Since(t0)
			}
			res.events++
			if bytes.HasPrefix(bytes.TrimSpace(payload), []byte("[DONE]")) {
				done = true
			}
		}
		if err != nil {
			if err.Error() != "EOF" {
				res.broken, res.reason = true, "read: "+shortErr(err)
			}
			break
		}
	}
	res.e2e = time.Since(t0)
	switch {
	case res.broken:
	case !done:
		res.broken, res.reason = true, "no [DONE]"
	case res.events < w.chunks+2: // chunks + finish + [DONE] (+ usage)
		res.broken, res.reason = true, fmt.Sprintf("%d of %d events", res.events, w.chunks+2)
	}
	return res
}

func shortErr(err error) string {
	s := err.Error()
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// oneWhole reads the answer of a request that is not streamed: its first
// byte is its TTFC, and it counts as the chunks its stream would have had
// (chunks + finish + usage + [DONE]), so that CPU per chunk reads per token
// as for the streams.
func oneWhole(resp *http.Response, t0 time.Time, w workload) streamResult {
	var res streamResult
	br := bufio.NewReaderSize(resp.Body, 4096)
	if _, err := br.Peek(1); err != nil {
		return streamResult{broken: true, reason: "read: " + shortErr(err), e2e: time.Since(t0)}
	}
	res.ttfc = time.Since(t0)
	body, err := io.ReadAll(br)
	res.e2e = time.Since(t0)
	switch {
	case err != nil:
		res.broken, res.reason = true, "read: "+shortErr(err)
	case !bytes.Contains(body, []byte(`"object":"chat.completion"`)) || bytes.Count(body, []byte(" tok")) != w.chunks:
		res.broken, res.reason = true, fmt.Sprintf("not the whole answer: %.120s", body)
	default:
		res.events = w.chunks + 3
	}
	return res
}
