package testengine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ---- helpers

// newClient opens a connection per request: the httplib engine closes a
// connection after every streamed response, and a pooled one may be handed
// out before its close is seen (the race the gateway's retry covers; see
// TestClientReuse). Tests of reuse build their own transports.
func newClient(t *testing.T) *http.Client {
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

func post(ctx context.Context, c *http.Client, e *Engine, path, body string, hdr ...string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL().String()+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return c.Do(req)
}

func mustPost(t *testing.T, c *http.Client, e *Engine, path, body string, hdr ...string) *http.Response {
	t.Helper()
	resp, err := post(context.Background(), c, e, path, body, hdr...)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// readEvents reads SSE data payloads until the body ends. err is nil at a
// clean end of the body and the read error otherwise; seen is called with
// each payload as it arrives.
func readEvents(body io.Reader, seen func(string)) (datas []string, err error) {
	br := bufio.NewReaderSize(body, 64<<10)
	var data []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" && len(data) == 0 {
				return datas, nil
			}
			if err == io.EOF {
				return datas, fmt.Errorf("stream ended inside an event: %q", line)
			}
			return datas, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if len(data) > 0 {
				d := strings.Join(data, "\n")
				datas = append(datas, d)
				if seen != nil {
					seen(d)
				}
				data = data[:0]
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int                        `json:"index"`
		Delta        map[string]json.RawMessage `json:"delta"`
		Text         *string                    `json:"text"`
		Message      struct{ Content string }   `json:"message"`
		FinishReason *string                    `json:"finish_reason"`
	} `json:"choices"`
	Usage   *usage          `json:"usage"`
	Timings json.RawMessage `json:"timings"`
}

func decodeChunk(t *testing.T, data string) chunk {
	t.Helper()
	var c chunk
	if err := json.Unmarshal([]byte(data), &c); err != nil {
		t.Fatalf("chunk %q: %v", data, err)
	}
	return c
}

// content returns the output a chunk carries and whether it carries any.
func (c chunk) content() (string, bool) {
	if len(c.Choices) == 0 {
		return "", false
	}
	ch := c.Choices[0]
	if ch.Text != nil {
		return *ch.Text, *ch.Text != ""
	}
	raw, ok := ch.Delta["content"]
	if !ok {
		return "", false
	}
	var s string
	_ = json.Unmarshal(raw, &s)
	return s, s != ""
}

func (c chunk) finish() string {
	if len(c.Choices) == 0 || c.Choices[0].FinishReason == nil {
		return ""
	}
	return *c.Choices[0].FinishReason
}

func waitIdle(t *testing.T, e *Engine) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, active := e.Stats(t)
		if active == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s engine still serves %d requests", e.Kind(), active)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func forKinds(t *testing.T, f func(t *testing.T, k Kind)) {
	t.Parallel()
	for _, k := range Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			f(t, k)
		})
	}
}

const chatBody = `{"model":"m1","stream":true,"max_tokens":5.0,"stream_options":{"include_usage":true},` +
	`"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"one two three"}]}`

// ---- streams and bodies

func TestStreamShape(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		e := Start(t, k)
		c := newClient(t)

		resp := mustPost(t, c, e, "/v1/chat/completions", chatBody)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		datas, err := readEvents(resp.Body, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(datas) == 0 || datas[len(datas)-1] != "[DONE]" {
			t.Fatalf("stream does not end in [DONE]: %q", datas)
		}
		var chunks []chunk
		for _, d := range datas[:len(datas)-1] {
			c := decodeChunk(t, d)
			if c.Object != "chat.completion.chunk" || c.Model != "m1" || !strings.HasPrefix(c.ID, "chatcmpl-") || c.Created == 0 {
				t.Errorf("chunk header: %s", d)
			}
			chunks = append(chunks, c)
		}
		want := usage{PromptTokens: 5, CompletionTokens: 5, TotalTokens: 10}
		var contents []chunk
		switch k {
		case Uvicorn: // role, 5 x content, finish, usage
			if len(chunks) != 8 {
				t.Fatalf("%d chunks, want 8: %q", len(chunks), datas)
			}
			if string(chunks[0].Choices[0].Delta["role"]) != `"assistant"` || string(chunks[0].Choices[0].Delta["content"]) != `""` {
				t.Errorf("first chunk is not vLLM's role chunk: %s", datas[0])
			}
			contents = chunks[1:6]
			if fin := chunks[6]; fin.finish() != "length" || fin.Usage != nil {
				t.Errorf("finish chunk: %s", datas[6])
			}
			if u := chunks[7]; u.Choices == nil || len(u.Choices) != 0 || u.Usage == nil || *u.Usage != want {
				t.Errorf("usage chunk: %s", datas[7])
			}
		case HTTPLib: // 5 x content, finish with usage
			if len(chunks) != 6 {
				t.Fatalf("%d chunks, want 6: %q", len(chunks), datas)
			}
			if _, ok := chunks[0].Choices[0].Delta["role"]; ok {
				t.Errorf("llama.cpp sends no role: %s", datas[0])
			}
			contents = chunks[:5]
			last := chunks[5]
			if last.finish() != "length" || len(last.Choices[0].Delta) != 0 || last.Usage == nil || *last.Usage != want || last.Timings == nil {
				t.Errorf("last chunk: %s", datas[5])
			}
		}
		for i, c := range contents {
			if s, ok := c.content(); !ok || s != "tok " || c.finish() != "" || c.Usage != nil {
				t.Errorf("content chunk %d: %+v", i, c)
			}
		}

		// No include_usage: vLLM sends no usage; llama.cpp still does.
		// X-Test-Tokens overrides max_tokens.
		resp = mustPost(t, c, e, "/v1/completions", `{"prompt":"a b c d","stream":true,"max_tokens":9}`, HeaderTokens, "2")
		datas, err = readEvents(resp.Body, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(datas) != 4 || datas[3] != "[DONE]" {
			t.Fatalf("completions stream: %q", datas)
		}
		for i, d := range datas[:2] {
			if c := decodeChunk(t, d); c.Object != "text_completion" || c.Choices[0].Text == nil || *c.Choices[0].Text != "tok " {
				t.Errorf("completion chunk %d: %s", i, d)
			}
		}
		last := decodeChunk(t, datas[2])
		if last.finish() != "length" {
			t.Errorf("no finish: %s", datas[2])
		}
		if gotUsage := last.Usage != nil; gotUsage != (k == HTTPLib) {
			t.Errorf("usage on the last chunk: %v, want %v", gotUsage, k == HTTPLib)
		} else if gotUsage && *last.Usage != (usage{PromptTokens: 4, CompletionTokens: 2, TotalTokens: 6}) {
			t.Errorf("usage: %+v", *last.Usage)
		}
		if n, _ := e.Stats(t); n != 2 {
			t.Errorf("requests = %d, want 2", n)
		}
	})
}

func TestDelays(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		e := Start(t, k)
		c := newClient(t)
		start := time.Now()
		resp := mustPost(t, c, e, "/v1/chat/completions", `{"stream":true,"max_tokens":4}`,
			HeaderFirstDelay, "400", HeaderGap, "100")
		headers := time.Since(start)
		var times []time.Duration
		_, err := readEvents(resp.Body, func(d string) {
			if d != "[DONE]" {
				if _, ok := decodeChunk(t, d).content(); ok {
					times = append(times, time.Since(start))
				}
			}
		})
		if err != nil || len(times) != 4 {
			t.Fatalf("%d content chunks, err %v", len(times), err)
		}
		// Both stacks send the head at once, before the first output: a head
		// held back for the first delay would come after 400ms.
		if headers >= 400*time.Millisecond {
			t.Errorf("head after %v: not before the first delay", headers)
		}
		if times[0] < 400*time.Millisecond {
			t.Errorf("first content after %v, want >= 400ms", times[0])
		}
		// The engine sleeps between writes, so the i-th output cannot arrive
		// before the first delay plus i gaps; a late chunk on a busy machine
		// only shortens the gap after it, so gaps are checked as sums.
		for i := 1; i < len(times); i++ {
			if want := 400*time.Millisecond + time.Duration(i)*100*time.Millisecond; times[i] < want-5*time.Millisecond {
				t.Errorf("output %d after %v, want >= %v (100ms gaps)", i, times[i], want)
			}
		}
	})
}

func TestNonStreamed(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		e := Start(t, k)
		c := newClient(t)
		for _, tc := range []struct{ path, body, object string }{
			{"/v1/chat/completions", `{"model":"m2","max_tokens":3,"messages":[{"role":"user","content":[{"type":"text","text":"a b"}]}]}`, "chat.completion"},
			{"/v1/completions", `{"model":"m2","max_tokens":3,"prompt":"a b","stream":false}`, "text_completion"},
		} {
			resp := mustPost(t, c, e, tc.path, tc.body)
			var got chunk
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != 200 {
				t.Fatalf("%s: status %d, %v", tc.path, resp.StatusCode, err)
			}
			text := got.Choices[0].Message.Content
			if got.Choices[0].Text != nil {
				text = *got.Choices[0].Text
			}
			if got.Object != tc.object || got.Model != "m2" || got.finish() != "length" || text != "tok tok tok " ||
				got.Usage == nil || *got.Usage != (usage{PromptTokens: 2, CompletionTokens: 3, TotalTokens: 5}) {
				t.Errorf("%s: %+v", tc.path, got)
			}
		}

		resp := mustPost(t, c, e, "/v1/chat/completions", `{"stream":true,`)
		var eb struct {
			Error struct {
				Message string
				Type    string
				Code    int
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil || resp.StatusCode != 400 ||
			eb.Error.Type != "invalid_request_error" || eb.Error.Code != 400 || eb.Error.Message == "" {
			t.Errorf("bad JSON: status %d, %+v, %v", resp.StatusCode, eb, err)
		}

		for _, path := range []string{"/health", "/v1/models"} {
			resp, err := c.Get(e.URL().String() + path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != 200 || (path == "/v1/models" && !bytes.Contains(b, []byte(`"id":"test"`))) {
				t.Errorf("GET %s: %d %s", path, resp.StatusCode, b)
			}
		}
		if n, active := e.Stats(t); n != 3 || active != 0 {
			t.Errorf("stats = %d, %d; want 3, 0", n, active)
		}
	})
}

// ---- faults that leave the engine running

func TestFaults(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		e := Start(t, k)
		// A connection per request: the httplib engine closes a connection
		// after a streamed response, and a concurrent request may already
		// have taken it from the pool (see TestClientReuse).
		c := newClient(t)
		const stream = `{"stream":true,"max_tokens":8,"stream_options":{"include_usage":true}}`
		const plain = `{"max_tokens":8}`

		t.Run("group", func(t *testing.T) {
			for _, status := range []int{500, 400, 503} {
				t.Run(fmt.Sprint("status-", status), func(t *testing.T) {
					t.Parallel()
					resp := mustPost(t, c, e, "/v1/chat/completions", stream, HeaderFault, fmt.Sprint("status-", status))
					var eb struct{ Error struct{ Message string } }
					err := json.NewDecoder(resp.Body).Decode(&eb)
					if resp.StatusCode != status || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") ||
						err != nil || eb.Error.Message == "" {
						t.Errorf("status %d %q, %+v, %v", resp.StatusCode, resp.Header.Get("Content-Type"), eb, err)
					}
				})
			}
			for _, tc := range []struct {
				fault  string
				status int
				body   string
			}{{FaultNonJSON500, 500, "Internal Server Error"}, {FaultNonJSON200, 200, "hello"}} {
				t.Run(tc.fault, func(t *testing.T) {
					t.Parallel()
					for _, body := range []string{stream, plain} {
						resp := mustPost(t, c, e, "/v1/completions", body, HeaderFault, tc.fault)
						b, err := io.ReadAll(resp.Body)
						if resp.StatusCode != tc.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") ||
							err != nil || string(b) != tc.body {
							t.Errorf("%d %q %q %v", resp.StatusCode, resp.Header.Get("Content-Type"), b, err)
						}
					}
				})
			}
			t.Run(FaultBrokenSSE, func(t *testing.T) {
				t.Parallel()
				resp := mustPost(t, c, e, "/v1/chat/completions", stream, HeaderFault, FaultBrokenSSE)
				datas, err := readEvents(resp.Body, nil)
				if err != nil || len(datas) == 0 || datas[len(datas)-1] != "{not json" {
					t.Fatalf("%q, %v", datas, err)
				}
				if _, ok := decodeChunk(t, datas[len(datas)-2]).content(); !ok {
					t.Errorf("no content chunk before the broken one: %q", datas)
				}
			})
			t.Run(FaultHugeLine, func(t *testing.T) {
				t.Parallel()
				resp := mustPost(t, c, e, "/v1/chat/completions", stream, HeaderFault, FaultHugeLine)
				datas, err := readEvents(resp.Body, nil)
				if err != nil || len(datas) < 3 || datas[len(datas)-1] != "[DONE]" {
					t.Fatalf("%d events, %v", len(datas), err)
				}
				if huge := datas[len(datas)-2]; len(huge) != 4<<20 || strings.Trim(huge, "x") != "" {
					t.Errorf("huge line of %d bytes", len(huge))
				}
			})
			t.Run(FaultTruncated, func(t *testing.T) {
				t.Parallel()
				resp := mustPost(t, c, e, "/v1/chat/completions", stream, HeaderFault, FaultTruncated)
				datas, err := readEvents(resp.Body, nil)
				if err != nil {
					t.Fatal(err) // a clean end
				}
				n := 0
				for _, d := range datas {
					if d == "[DONE]" {
						t.Fatalf("[DONE] in a truncated stream: %q", datas)
					}
					ch := decodeChunk(t, d)
					if ch.finish() != "" || ch.Usage != nil {
						t.Errorf("finish or usage in a truncated stream: %s", d)
					}
					if _, ok := ch.content(); ok {
						n++
					}
				}
				if n != 3 {
					t.Errorf("%d content chunks, want 3", n)
				}
			})
			hang := func(t *testing.T, fault, body string, wantHead bool, wantContent int) {
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				defer cancel()
				start := time.Now()
				resp, err := post(ctx, c, e, "/v1/chat/completions", body, HeaderFault, fault)
				if !wantHead {
					if err == nil {
						_ = resp.Body.Close()
						t.Fatalf("a response (%d) despite %s", resp.StatusCode, fault)
					}
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Fatalf("error %v, want the client's deadline", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("no head: %v", err)
				}
				defer func() { _ = resp.Body.Close() }()
				if resp.StatusCode != 200 {
					t.Fatalf("head: status %d after %v", resp.StatusCode, time.Since(start))
				}
				if _, active := e.Stats(t); active < 1 {
					t.Errorf("a hanging request is not active: %d", active)
				}
				if body == plain {
					if resp.ContentLength <= 0 {
						t.Errorf("Content-Length %d", resp.ContentLength)
					}
					b, err := io.ReadAll(resp.Body)
					if err == nil || len(b) != 0 {
						t.Errorf("body %q, %v: want nothing until the deadline", b, err)
					}
					return
				}
				n := 0
				datas, err := readEvents(resp.Body, nil)
				for _, d := range datas {
					if _, ok := decodeChunk(t, d).content(); ok {
						n++
					}
				}
				if err == nil || n != wantContent || time.Since(start) < 450*time.Millisecond {
					t.Errorf("%d content chunks then %v after %v; want %d then the deadline", n, err, time.Since(start), wantContent)
				}
				if k == Uvicorn && (len(datas) == 0 || !strings.Contains(datas[0], `"role":"assistant"`)) {
					t.Errorf("no role chunk first: %q", datas)
				}
			}
			t.Run(FaultHangBeforeHeaders, func(t *testing.T) {
				t.Parallel()
				hang(t, FaultHangBeforeHeaders, stream, false, 0)
			})
			t.Run(FaultHangAfterHeaders+"/plain", func(t *testing.T) {
				t.Parallel()
				hang(t, FaultHangAfterHeaders, plain, true, 0)
			})
			t.Run(FaultHangAfterHeaders+"/stream", func(t *testing.T) {
				t.Parallel()
				hang(t, FaultHangAfterHeaders, stream, true, 0)
			})
			t.Run(FaultHangMidStream, func(t *testing.T) {
				t.Parallel()
				hang(t, FaultHangMidStream, stream, true, 3)
			})
		})
		// Every hang ended when its client went away.
		waitIdle(t, e)
		if n, _ := e.Stats(t); n != 14 {
			t.Errorf("requests = %d, want 14", n)
		}
		if e.Exited() {
			t.Error("engine exited")
		}
	})
}

// ---- faults that kill the engine; Kill and Restart

func TestKillFaults(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		e := Start(t, k)
		c := newClient(t)
		url := e.URL().String()
		const stream = `{"stream":true,"max_tokens":8}`
		expectDeath := func(t *testing.T) {
			t.Helper()
			done := make(chan error, 1)
			go func() { done <- e.Wait() }()
			select {
			case err := <-done:
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Errorf("Wait = %v, want killed by SIGKILL", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("engine still running")
			}
			// Exited and Wait from many goroutines at once.
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					if !e.Exited() || e.Wait() == nil {
						t.Error("Exited false or Wait nil after the engine died")
					}
				})
			}
			wg.Wait()
			if conn, err := net.Dial("tcp", e.Addr()); err == nil {
				_ = conn.Close()
				t.Error("dead engine's port accepts connections")
			}
			e.Restart(t)
			if e.Exited() || e.URL().String() != url {
				t.Fatalf("after Restart: exited %v, URL %s (was %s)", e.Exited(), e.URL(), url)
			}
			if n, _ := e.Stats(t); n != 0 {
				t.Errorf("fresh process counts %d requests", n)
			}
		}

		t.Run(FaultKillBeforeHeaders, func(t *testing.T) {
			resp, err := post(context.Background(), c, e, "/v1/chat/completions", stream, HeaderFault, FaultKillBeforeHeaders)
			if err == nil {
				_ = resp.Body.Close()
				t.Fatalf("a response (%d)", resp.StatusCode)
			}
			expectDeath(t)
		})
		for _, body := range []string{stream, `{"max_tokens":8}`} {
			name := FaultKillAfterHeaders + "/stream"
			if !strings.Contains(body, "stream") {
				name = FaultKillAfterHeaders + "/plain"
			}
			t.Run(name, func(t *testing.T) {
				resp := mustPost(t, c, e, "/v1/chat/completions", body, HeaderFault, FaultKillAfterHeaders)
				b, err := io.ReadAll(resp.Body)
				if resp.StatusCode != 200 || !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("status %d, body %q, %v; want 200 then unexpected EOF", resp.StatusCode, b, err)
				}
				if body != stream && resp.ContentLength <= 0 {
					t.Errorf("Content-Length %d", resp.ContentLength)
				}
				expectDeath(t)
			})
		}
		t.Run(FaultKillMidStream, func(t *testing.T) {
			resp := mustPost(t, c, e, "/v1/chat/completions", stream, HeaderFault, FaultKillMidStream)
			n := 0
			_, err := readEvents(resp.Body, func(d string) {
				if _, ok := decodeChunk(t, d).content(); ok {
					n++
				}
			})
			if n != 3 || !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("%d content chunks then %v; want 3 then unexpected EOF", n, err)
			}
			expectDeath(t)
		})
		t.Run("Kill", func(t *testing.T) {
			e.Kill()
			if !e.Exited() {
				t.Fatal("Exited false after Kill")
			}
			e.Kill() // again: nothing
			if _, err := net.Dial("tcp", e.Addr()); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("dial after Kill: %v, want connection refused", err)
			}
			e.Restart(t)
			e.Restart(t) // of a running engine: kills it first
			resp := mustPost(t, c, e, "/v1/completions", `{"max_tokens":1}`)
			if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 {
				t.Fatalf("after Restart: %d %s", resp.StatusCode, b)
			}
		})
	})
}

// ---- connection behaviour on the wire

// rawExchange sends one request on conn and reads the whole response.
func rawExchange(t *testing.T, conn net.Conn, br *bufio.Reader, body string) *http.Response {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	req := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(resp.Body); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d, %v", resp.StatusCode, err)
	}
	return resp
}

// closedWithin reports whether the server closes conn within d, and when.
func closedWithin(t *testing.T, conn net.Conn, br *bufio.Reader, d time.Duration) (bool, time.Duration) {
	t.Helper()
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(d))
	n, err := br.Read(make([]byte, 1))
	var ne net.Error
	switch {
	case err == io.EOF:
		return true, time.Since(start)
	case errors.As(err, &ne) && ne.Timeout():
		return false, time.Since(start)
	default:
		t.Fatalf("read after the response: %d bytes, %v", n, err)
		return false, 0
	}
}

func dial(t *testing.T, e *Engine) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", e.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, bufio.NewReader(conn)
}

func TestConnectionAfterStream(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		e := Start(t, k)
		conn, br := dial(t, e)
		resp := rawExchange(t, conn, br, `{"stream":true,"max_tokens":2}`)
		// Neither head announces a close: llama.cpp's says keep-alive.
		if resp.Close || resp.Header.Get("Connection") == "close" {
			t.Errorf("head announces a close: %v", resp.Header)
		}
		closed, after := closedWithin(t, conn, br, time.Second)
		switch k {
		case HTTPLib:
			if !closed { // within the second closedWithin waits: uvicorn keeps it 5 s
				t.Fatalf("httplib: connection not closed right after the stream (closed %v after %v)", closed, after)
			}
		case Uvicorn:
			if closed {
				t.Fatalf("uvicorn: connection closed %v after the stream", after)
			}
			rawExchange(t, conn, br, `{"stream":true,"max_tokens":2}`) // reused
		}
	})
}

func TestIdleConnectionClose(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		e := Start(t, k)
		conn, br := dial(t, e)
		resp := rawExchange(t, conn, br, `{"max_tokens":2}`)
		if resp.Close {
			t.Fatal("non-streamed response closes the connection")
		}
		// Both close an idle kept-alive connection after 5 s.
		closed, after := closedWithin(t, conn, br, 8*time.Second)
		if !closed || after < 4*time.Second || after > 7*time.Second {
			t.Fatalf("closed %v after %v, want closed after ~5s", closed, after)
		}
	})
}

func TestKeepAliveMaxCount(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		e := Start(t, k)
		conn, br := dial(t, e)
		// cpp-httplib 0.11.4 serves 5 requests on a connection (its default
		// CPPHTTPLIB_KEEPALIVE_MAX_COUNT), says "Connection: close" on the
		// 5th and closes; uvicorn has no limit.
		for i := 1; i <= 5; i++ {
			resp := rawExchange(t, conn, br, `{"max_tokens":1}`)
			if last := k == HTTPLib && i == 5; resp.Close != last {
				t.Fatalf("response %d: Close %v, want %v (%v)", i, resp.Close, last, resp.Header)
			}
		}
		closed, _ := closedWithin(t, conn, br, 300*time.Millisecond)
		if closed != (k == HTTPLib) {
			t.Fatalf("closed after 5 requests: %v", closed)
		}
	})
}

// TestClientReuse shows what a Go http.Client sees: after a streamed
// response from the httplib engine its next request needs a new connection.
func TestClientReuse(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		e := Start(t, k)
		c := newClient(t)
		c.Transport.(*http.Transport).DisableKeepAlives = false // this test is about reuse
		var reused []bool
		for range 3 {
			var got bool
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				GotConn: func(info httptrace.GotConnInfo) { got = info.Reused },
			})
			resp, err := post(ctx, c, e, "/v1/chat/completions", `{"stream":true,"max_tokens":2}`)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := readEvents(resp.Body, nil); err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			reused = append(reused, got)
			time.Sleep(100 * time.Millisecond) // let the transport see the close
		}
		want := []bool{false, k == Uvicorn, k == Uvicorn}
		if fmt.Sprint(reused) != fmt.Sprint(want) {
			t.Errorf("reused %v, want %v", reused, want)
		}
	})
}

// ---- load

func TestConcurrentStreams(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		e := Start(t, k)
		c := newClient(t)
		const n = 64
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				// Staggered: cpp-httplib listens with a backlog of 5, and
				// a burst of connects overflows it (SYNs are retried 1 s
				// later).
				time.Sleep(time.Duration(i) * 5 * time.Millisecond)
				resp, err := post(context.Background(), c, e, "/v1/chat/completions", `{"stream":true,"max_tokens":12}`, HeaderGap, "150")
				if err != nil {
					errs <- err
					return
				}
				defer func() { _ = resp.Body.Close() }()
				datas, err := readEvents(resp.Body, nil)
				if err == nil && (len(datas) == 0 || datas[len(datas)-1] != "[DONE]") {
					err = fmt.Errorf("no [DONE]: %d events", len(datas))
				}
				if err != nil {
					errs <- err
				}
			})
		}
		peak := 0
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && peak < n; time.Sleep(20 * time.Millisecond) {
			_, active := e.Stats(t)
			peak = max(peak, active)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if peak != n {
			t.Errorf("at most %d streams served at once, want %d", peak, n)
		}
		waitIdle(t, e)
	})
}

// ---- building

func TestWriteOnce(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/f"
	calls := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			err := writeOnce(path, 0o644, func(tmp string) error {
				mu.Lock()
				calls++
				mu.Unlock()
				return os.WriteFile(tmp, []byte("x"), 0o600)
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if b, err := os.ReadFile(path); err != nil || string(b) != "x" || calls != 1 {
		t.Fatalf("%q, %v, %d builds", b, err, calls)
	}
	if err := writeOnce(t.TempDir()+"/g", 0o644, func(string) error { return errors.New("boom") }); err == nil {
		t.Fatal("a failed build is not an error")
	}
}

// TestTraceparentEcho: the uvicorn engine echoes the traceparent a
// generation request came with, streamed or not, and none for a request
// without one.
func TestTraceparentEcho(t *testing.T) {
	e := Start(t, Uvicorn)
	c := newClient(t)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, body := range []string{`{"model":"m","stream":true,"max_tokens":2}`, `{"model":"m","max_tokens":2}`} {
		resp := mustPost(t, c, e, "/v1/completions", body, "Traceparent", parent)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := resp.Header.Get(HeaderTraceparent); got != parent {
			t.Errorf("%s: echoed %q", body, got)
		}
	}
	resp := mustPost(t, c, e, "/v1/completions", `{"model":"m","max_tokens":2}`)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if got, ok := resp.Header[HeaderTraceparent]; ok {
		t.Errorf("echoed %q for a request without one", got)
	}
}
