package testengine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
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
