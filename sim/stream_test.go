package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kneecap/kneecap/wire"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// events reads a whole SSE body into inspected chunks; done reports a
// final [DONE].
func events(t *testing.T, body []byte) (infos []wire.ChunkInfo, done bool) {
	t.Helper()
	r := wire.NewEventReader(bytes.NewReader(body))
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return infos, done
		}
		if err != nil {
			t.Fatal(err)
		}
		if done {
			t.Fatalf("event after [DONE]: %q", ev.Raw)
		}
		if ev.IsDone() {
			done = true
			continue
		}
		if !json.Valid(ev.Data) {
			t.Fatalf("invalid JSON chunk %q", ev.Data)
		}
		info, err := wire.Inspect(ev.Data)
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, info)
	}
}

func TestFlavorStreamShapes(t *testing.T) {
	const out = 5
	for _, fl := range Flavors() {
		for _, chat := range []bool{true, false} {
			for _, usage := range []bool{true, false} {
				name := string(fl) + map[bool]string{true: "/chat", false: "/completions"}[chat] + map[bool]string{true: "/usage", false: ""}[usage]
				t.Run(name, func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						s := startSim(t, Config{Profile: quietProfile(), Flavor: fl})
						path, prompt := "/v1/completions", `"prompt":"a b c"`
						if chat {
							path, prompt = "/v1/chat/completions", `"messages":[{"role":"user","content":"a b c"}]`
						}
						body := `{"model":"m","stream":true,"max_tokens":5,"ignore_eos":true,` + prompt
						if usage {
							body += `,"stream_options":{"include_usage":true}`
						}
						rec := httptest.NewRecorder()
						s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body+"}")))
						if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/event-stream" {
							t.Fatalf("status %d, content type %q", rec.Code, rec.Header().Get("Content-Type"))
						}
						infos, done := events(t, rec.Body.Bytes())
						checkShape(t, fl, chat, usage, infos, done, out)
					})
				})
			}
		}
	}
}

func checkShape(t *testing.T, fl Flavor, chat, usage bool, infos []wire.ChunkInfo, done bool, out int) {
	t.Helper()
	if !done {
		t.Fatal("no [DONE]")
	}
	i := 0
	if chat && fl != FlavorLlamaCpp {
		if infos[0].HasOutput || infos[0].Finished || infos[0].Usage != nil {
			t.Fatalf("first chunk is not role-only: %+v", infos[0])
		}
		i++
	}
	outputs := 0
	for ; i < len(infos) && infos[i].HasOutput; i++ {
		outputs++
		if infos[i].Usage != nil {
			t.Fatalf("usage on an output chunk: %+v", infos[i])
		}
		last := outputs == out
		if fl == FlavorVLLM && infos[i].Finished != last {
			t.Fatalf("vllm: finish_reason on chunk %d of %d", outputs, out)
		}
		if fl != FlavorVLLM && infos[i].Finished {
			t.Fatalf("%s: finish_reason on an output chunk", fl)
		}
	}
	if outputs != out {
		t.Fatalf("%d output chunks, want %d (no merging at one token per step)", outputs, out)
	}
	rest := infos[i:]
	if fl != FlavorVLLM {
		if len(rest) == 0 || !rest[0].Finished || rest[0].HasOutput {
			t.Fatalf("%s: no separate finish chunk: %+v", fl, rest)
		}
		if fl == FlavorLlamaCpp && (rest[0].Usage == nil || rest[0].UsageOnly || rest[0].Usage.CompletionTokens != out) {
			t.Fatalf("llamacpp: finish chunk without usage: %+v", rest[0])
		}
		rest = rest[1:]
	}
	wantUsageChunk := usage && fl != FlavorLlamaCpp
	if wantUsageChunk {
		if len(rest) != 1 || !rest[0].UsageOnly || rest[0].Usage.CompletionTokens != out || rest[0].Usage.PromptTokens != 3 {
			t.Fatalf("want one usage-only chunk, got %+v", rest)
		}
		rest = rest[1:]
	}
	if len(rest) != 0 {
		t.Fatalf("unexpected chunks at the end: %+v", rest)
	}
}

// TestOpenAIClientReadsStreams streams through the official Go client over
// a real socket, for every flavour.
func TestOpenAIClientReadsStreams(t *testing.T) {
	for _, fl := range Flavors() {
		t.Run(string(fl), func(t *testing.T) {
			s := startSim(t, Config{Profile: Tiny, Flavor: fl, TimeScale: 10})
			srv := httptest.NewServer(s.Handler())
			defer srv.Close()
			client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("x"), option.WithMaxRetries(0))

			stream := client.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
				Model:         "kneecap/tiny",
				Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("one two three four")},
				MaxTokens:     openai.Int(7),
				StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
			}, option.WithJSONSet("ignore_eos", true))
			acc := openai.ChatCompletionAccumulator{}
			for stream.Next() {
				acc.AddChunk(stream.Current())
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if acc.Usage.CompletionTokens != 7 || acc.Usage.PromptTokens != 4 || len(acc.Choices) != 1 ||
				acc.Choices[0].FinishReason != "length" || acc.Choices[0].Message.Content == "" {
				t.Fatalf("accumulated %+v", acc.ChatCompletion)
			}

			cs := client.Completions.NewStreaming(t.Context(), openai.CompletionNewParams{
				Model:     "kneecap/tiny",
				Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("a b")},
				MaxTokens: openai.Int(4),
			}, option.WithJSONSet("ignore_eos", true))
			var text strings.Builder
			for cs.Next() {
				for _, c := range cs.Current().Choices {
					text.WriteString(c.Text)
				}
			}
			if err := cs.Err(); err != nil || countWords(text.String(), nil) != 4 {
				t.Fatalf("completions stream: %q, %v", text.String(), err)
			}
		})
	}
}

// pipeListener serves connections made with net.Pipe, so a whole client ->
// server path runs in one testing/synctest bubble.
type pipeListener struct {
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}
func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.UnixAddr{Name: "pipe", Net: "pipe"} }
func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	c, s := net.Pipe()
	select {
	case l.conns <- s:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestOverPipeInSyncTest runs client and simulator over net.Pipe inside a
// synctest bubble, as the scenario suite does, including cut streams.
func TestOverPipeInSyncTest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := startSim(t, Config{Profile: Tiny, Faults: Faults{CutRate: 0.5}, Seed: 3})
		l := newPipeListener()
		srv := &http.Server{Handler: s.Handler()}
		var wg sync.WaitGroup
		wg.Go(func() { _ = srv.Serve(l) })
		tr := &http.Transport{DialContext: l.dial}
		client := &http.Client{Transport: tr}
		full, cut := 0, 0
		for range 20 {
			resp, err := client.Post("http://sim/v1/chat/completions", "application/json",
				strings.NewReader(`{"stream":true,"max_tokens":10,"ignore_eos":true,"messages":[{"content":"x y"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case err == nil && bytes.HasSuffix(b, []byte("data: [DONE]\n\n")):
				full++
			case errors.Is(err, io.ErrUnexpectedEOF) && !bytes.Contains(b, []byte("[DONE]")):
				cut++
			default:
				t.Fatalf("neither whole nor cut: %v %q", err, b)
			}
		}
		if full == 0 || cut == 0 {
			t.Fatalf("full %d cut %d: want both at CutRate 0.5", full, cut)
		}
		tr.CloseIdleConnections()
		_ = srv.Shutdown(context.Background())
		wg.Wait()
	})
}

func TestFaults(t *testing.T) {
	post := func(s *Sim, ctx context.Context) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/completions", strings.NewReader(`{"prompt":"a","max_tokens":3}`))
		s.Handler().ServeHTTP(rec, req)
		return rec
	}
	t.Run("error", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := startSim(t, Config{Profile: Tiny, Faults: Faults{ErrorRate: 1}})
			if rec := post(s, t.Context()); rec.Code != 500 || !strings.Contains(rec.Body.String(), `"type":"server_error"`) {
				t.Fatalf("%d %s", rec.Code, rec.Body.String())
			}
		})
	})
	t.Run("hang until client leaves", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := startSim(t, Config{Profile: Tiny, Faults: Faults{HangRate: 1}})
			ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
			defer cancel()
			start := time.Now()
			if rec := post(s, ctx); rec.Body.Len() != 0 || time.Since(start) != time.Hour {
				t.Fatalf("hang ended after %v with %q", time.Since(start), rec.Body.String())
			}
		})
	})
	t.Run("hang after headers", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := startSim(t, Config{Profile: Tiny, Faults: Faults{HangRate: 1, HangFor: 5 * time.Second, HangAfterHeaders: true}})
			rec := &lockedRecorder{rec: httptest.NewRecorder()}
			req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/completions",
				strings.NewReader(`{"prompt":"a","max_tokens":3,"stream":true}`))
			done := make(chan struct{})
			go func() { s.Handler().ServeHTTP(rec, req); close(done) }()
			time.Sleep(time.Second)
			if flushed, code, body := rec.state(); !flushed || code != 200 || body != "" {
				t.Fatalf("during the hang: flushed %v, code %d, body %q", flushed, code, body)
			}
			<-done
			if _, _, body := rec.state(); !strings.HasSuffix(body, "data: [DONE]\n\n") {
				t.Fatalf("after the hang: %q", body)
			}
		})
	})
	t.Run("hang then answer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := startSim(t, Config{Profile: Tiny, Faults: Faults{HangRate: 1, HangFor: 5 * time.Second}})
			start := time.Now()
			if rec := post(s, t.Context()); rec.Code != 200 || time.Since(start) < 5*time.Second {
				t.Fatalf("%d after %v", rec.Code, time.Since(start))
			}
		})
	})
	t.Run("slow start", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := startSim(t, Config{Profile: Tiny, Faults: Faults{SlowStartRate: 1, SlowStartDelay: 2 * time.Second}})
			start := time.Now()
			if rec := post(s, t.Context()); rec.Code != 200 || time.Since(start) < 2*time.Second {
				t.Fatalf("%d after %v", rec.Code, time.Since(start))
			}
		})
	})
	t.Run("startup delay", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := startSim(t, Config{Profile: Tiny, Faults: Faults{StartupDelay: time.Minute}})
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health", nil))
			if rec.Code != 503 || post(s, t.Context()).Code != 503 {
				t.Fatalf("not 503 while loading: %d", rec.Code)
			}
			time.Sleep(time.Minute)
			rec = httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health", nil))
			if rec.Code != 200 || post(s, t.Context()).Code != 200 {
				t.Fatalf("not ready after the delay: %d", rec.Code)
			}
		})
	})
}

func TestClientCancelFreesEngine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := startSim(t, Config{Profile: Tiny})
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			time.Sleep(50 * time.Millisecond)
			cancel()
		}()
		r := doRequest(ctx, s.Handler(), 10, 1000)
		if r.ok {
			t.Fatal("cancelled request completed")
		}
		time.Sleep(10 * time.Millisecond)
		if st := s.Stats(); st.Running != 0 || st.KVCacheTokens != 0 {
			t.Fatalf("after cancel: %+v", st)
		}
	})
}

func TestRunStopEndsRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, Config{Profile: Tiny})
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() { _ = s.Run(ctx) })
		var r result
		wg.Go(func() { r = doRequest(t.Context(), s.Handler(), 10, 1000) })
		time.Sleep(100 * time.Millisecond)
		cancel()
		wg.Wait()
		if r.ok {
			t.Fatal("request completed on a stopped engine")
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health", nil))
		if rec.Code != 503 {
			t.Fatalf("health after stop: %d", rec.Code)
		}
	})
}

// lockedRecorder lets a test look at a response while its handler runs.
type lockedRecorder struct {
	mu  sync.Mutex
	rec *httptest.ResponseRecorder
}

func (l *lockedRecorder) Header() http.Header { return l.rec.Header() }
func (l *lockedRecorder) WriteHeader(code int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rec.WriteHeader(code)
}
func (l *lockedRecorder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rec.Write(p)
}
func (l *lockedRecorder) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rec.Flush()
}
func (l *lockedRecorder) state() (flushed bool, code int, body string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rec.Flushed, l.rec.Code, l.rec.Body.String()
}

// The finish-only chunk the handler sends when the last token went out
// before the sequence read as finished: no output, the finish reason, in
// vLLM's shape for chat and text completions.
func TestFinishOnlyChunk(t *testing.T) {
	fl, err := lookupFlavor(FlavorVLLM)
	if err != nil {
		t.Fatal(err)
	}
	for _, chat := range []bool{true, false} {
		c := &chunker{fl: fl, chat: chat, id: "x", created: 1, model: []byte(`"m"`), prompt: 3}
		raw := c.tokens(nil, 7, 7, "length")
		ev, err := wire.NewEventReader(bytes.NewReader(raw)).Next()
		if err != nil {
			t.Fatal(err)
		}
		info, err := wire.Inspect(ev.Data)
		if err != nil || info.HasOutput || !info.Finished {
			t.Fatalf("chat %v: %s read as %+v, %v; want a finish with no output", chat, raw, info, err)
		}
	}
}
