package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/kneecap/kneecap/sim"
	"github.com/kneecap/kneecap/testengine"
)

// An engine the reassembly is checked against: a test engine process or
// the simulator (in process) in one flavour.
type reEngine struct {
	name string
	url  string
	// vllmOrder: the engine orders its non-streamed answer as its stream
	// (vLLM, SGLang); llama.cpp puts "id" elsewhere in the two forms.
	vllmOrder bool
	// sim: behaviours come from the request body (logprobs, tool_choice),
	// not from the test engines' headers.
	sim bool
	// n: the engine honours "n" (several choices).
	n bool
}

// reCase is one request that is not streamed.
type reCase struct {
	name, path string
	// body is the request for a test engine (behaviour in headers) and
	// simBody the same request for the simulator.
	body, simBody string
	hdr           []string
	needsN        bool
}

const reMessages = `"messages":[{"role":"user","content":"what is the weather in Paris"}]`

var reCases = []reCase{
	{name: "chat", path: "/v1/chat/completions",
		body:    `{"model":"test","max_tokens":12,` + reMessages + `}`,
		simBody: `{"model":"test","max_tokens":12,"ignore_eos":true,` + reMessages + `}`},
	{name: "chat logprobs", path: "/v1/chat/completions",
		body:    `{"model":"test","max_tokens":12,"logprobs":true,"top_logprobs":2,` + reMessages + `}`,
		simBody: `{"model":"test","max_tokens":12,"ignore_eos":true,"logprobs":true,"top_logprobs":2,` + reMessages + `}`,
		hdr:     []string{testengine.HeaderLogprobs, "2"}},
	{name: "chat tool calls", path: "/v1/chat/completions",
		body: `{"model":"test","max_tokens":12,"tools":[{"type":"function","function":{"name":"tool_0","parameters":{}}}],` + reMessages + `}`,
		simBody: `{"model":"test","max_tokens":12,"ignore_eos":true,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{}}}],` +
			`"tool_choice":"required",` + reMessages + `}`,
		hdr: []string{testengine.HeaderToolCalls, "2"}},
	{name: "chat n=2", path: "/v1/chat/completions",
		body:   `{"model":"test","max_tokens":6,"n":2,` + reMessages + `}`,
		needsN: true},
	{name: "completions", path: "/v1/completions",
		body:    `{"model":"test","max_tokens":12,"prompt":"the weather in Paris is"}`,
		simBody: `{"model":"test","max_tokens":12,"ignore_eos":true,"prompt":"the weather in Paris is"}`},
	{name: "completions logprobs", path: "/v1/completions",
		body:    `{"model":"test","max_tokens":12,"logprobs":2,"prompt":"the weather in Paris is"}`,
		simBody: `{"model":"test","max_tokens":12,"ignore_eos":true,"logprobs":2,"prompt":"the weather in Paris is"}`,
		hdr:     []string{testengine.HeaderLogprobs, "2"}},
}

// reEngines starts every engine of the comparison.
func reEngines(t *testing.T) []reEngine {
	var out []reEngine
	for _, k := range testengine.Kinds {
		e := testengine.Start(t, k)
		out = append(out, reEngine{name: string(k), url: e.URL().String(), vllmOrder: k == testengine.Uvicorn, n: k == testengine.Uvicorn})
	}
	for _, f := range sim.Flavors() {
		s, err := sim.New(sim.Config{Profile: sim.Tiny, Flavor: f, Seed: 1, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(func() {
			srv.Close()
			cancel()
			<-done
		})
		out = append(out, reEngine{name: "sim-" + string(f), url: srv.URL, vllmOrder: f != sim.FlavorLlamaCpp, sim: true})
	}
	return out
}

// TestReassembledMatchesEngine sends each request that is not streamed to
// the engine directly and through the gateway, which streams it from the
// engine and reassembles the answer, and compares the two field by field:
// text, tool calls, logprobs, usage, finish reasons and every other field,
// with ids and timestamps (the engine's own, two requests apart) checked
// for form only. A field the engine's non-streamed answer has only as
// null (vLLM's refusal, audio, prompt_logprobs, kv_transfer_params, ...) or
// as an empty tool_calls list is absent from the stream and so from the
// reassembled answer: null and absent are read alike. For vLLM-ordered
// engines the fields also come in the same order. Then the openai-go
// client reads each reassembled answer.
func TestReassembledMatchesEngine(t *testing.T) {
	for _, e := range reEngines(t) {
		t.Run(e.name, func(t *testing.T) {
			h := startGatewayURL(t, nil, []string{"KNEECAP_UPSTREAM=" + e.url, "KNEECAP_MAX_CONCURRENCY=4", "KNEECAP_SLO_TTFT=10s", "KNEECAP_SLO_TPOT=1s"})
			c := &http.Client{Transport: &http.Transport{}}
			t.Cleanup(c.CloseIdleConnections)
			for _, tc := range reCases {
				if tc.needsN && !e.n {
					continue
				}
				if e.sim && tc.simBody == "" {
					continue
				}
				t.Run(tc.name, func(t *testing.T) {
					body := tc.body
					if e.sim {
						body = tc.simBody
					}
					direct := postJSON(t, c, e.url+tc.path, body, tc.hdr)
					// The case's feature is in the engine's answer (the
					// simulator's other flavours answer with text alone).
					if !e.sim || e.name == "sim-vllm" {
						switch {
						case strings.Contains(tc.name, "tool") && !bytes.Contains(direct, []byte(`"tool_calls":[{`)),
							strings.Contains(tc.name, "logprobs") && !bytes.Contains(direct, []byte(`"logprobs":{`)):
							t.Fatalf("the engine's answer has no %s: %s", tc.name, direct)
						}
					}
					via := postJSON(t, c, h.traffic+tc.path, body, tc.hdr)
					compareAnswers(t, direct, via, e.vllmOrder)
					readWithOpenAI(t, h.traffic, tc, body, direct)
				})
			}
			settle(t, h, nil)
			// Every one of them was reassembled: measured as a stream.
			if n := h.counter(t, "kneecap_requests_total", "outcome", "good"); n == 0 {
				t.Errorf("no request counted good")
			}
		})
	}
}

func postJSON(t *testing.T, c *http.Client, url, body string, hdr []string) []byte {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("%s: status %d, %s, %v: %s", url, resp.StatusCode, resp.Header.Get("Content-Type"), err, b)
	}
	return b
}

// compareAnswers holds the reassembled answer to the engine's own.
func compareAnswers(t *testing.T, direct, via []byte, ordered bool) {
	t.Helper()
	var d, v any
	if err := json.Unmarshal(direct, &d); err != nil {
		t.Fatalf("engine's answer: %v: %s", err, direct)
	}
	if err := json.Unmarshal(via, &v); err != nil {
		t.Fatalf("gateway's answer: %v: %s", err, via)
	}
	for _, a := range []any{d, v} {
		m := a.(map[string]any)
		id, _ := m["id"].(string)
		created, _ := m["created"].(float64)
		if !(strings.HasPrefix(id, "chatcmpl-") || strings.HasPrefix(id, "cmpl-")) || time.Since(time.Unix(int64(created), 0)).Abs() > time.Hour {
			t.Errorf("id %q, created %v: not the engine's", id, m["created"])
		}
	}
	dm, vm := d.(map[string]any), v.(map[string]any)
	if strings.SplitN(dm["id"].(string), "-", 2)[0] != strings.SplitN(vm["id"].(string), "-", 2)[0] {
		t.Errorf("ids %v and %v of different forms", dm["id"], vm["id"])
	}
	for _, m := range []map[string]any{dm, vm} {
		delete(m, "id")
		delete(m, "created")
	}
	d, v = normalize(d), normalize(v)
	if !reflect.DeepEqual(d, v) {
		var diffs []string
		diff("", d, v, &diffs)
		t.Errorf("the reassembled answer differs from the engine's:\n  %s\nengine:     %s\nreassembled: %s", strings.Join(diffs, "\n  "), direct, via)
	}
	if ordered {
		if do, vo := keyOrder(t, direct), keyOrder(t, via); !reflect.DeepEqual(common(do, vo), common(vo, do)) {
			t.Errorf("fields in another order:\nengine:      %v\nreassembled: %v", common(do, vo), common(vo, do))
		}
	}
}

// normalize drops what is read alike either way: null fields, empty
// tool_calls lists, and tool call ids (checked for presence, they differ
// from request to request).
func normalize(a any) any {
	switch x := a.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, v := range x {
			if v == nil {
				continue
			}
			if l, ok := v.([]any); ok && len(l) == 0 && k == "tool_calls" {
				continue
			}
			out[k] = normalize(v)
		}
		if f, ok := out["function"].(map[string]any); ok && f["name"] != nil {
			if id, _ := out["id"].(string); id != "" {
				out["id"] = "<tool call id>"
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, v := range x {
			out[i] = normalize(v)
		}
		return out
	}
	return a
}

func diff(path string, a, b any, out *[]string) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		names := make([]string, 0, len(keys))
		for k := range keys {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			diff(path+"."+k, am[k], bm[k], out)
		}
		return
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok && bok && len(al) == len(bl) {
		for i := range al {
			diff(fmt.Sprintf("%s[%d]", path, i), al[i], bl[i], out)
		}
		return
	}
	if !reflect.DeepEqual(a, b) {
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		*out = append(*out, fmt.Sprintf("%s: engine %.200s, reassembled %.200s", path, ja, jb))
	}
}

// keyOrder lists, per object path, its keys with non-null values in order.
func keyOrder(t *testing.T, raw []byte) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var walk func(path string) error
	walk = func(path string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			out[path] = []string{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				var v json.RawMessage
				if err := dec.Decode(&v); err != nil {
					return err
				}
				if string(v) != "null" {
					out[path] = append(out[path], k.(string))
				}
				sub := json.NewDecoder(bytes.NewReader(v))
				saved := dec
				dec = sub
				if err := walk(path + "." + k.(string)); err != nil {
					return err
				}
				dec = saved
			}
			_, err = dec.Token()
			return err
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				if err := walk(fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		}
		return nil
	}
	if err := walk(""); err != nil {
		t.Fatal(err)
	}
	return out
}

// common keeps, per path in both, the keys of a that b has too, in a's
// order.
func common(a, b map[string][]string) map[string][]string {
	out := map[string][]string{}
	for p, ks := range a {
		other, ok := b[p]
		if !ok {
			continue
		}
		for _, k := range ks {
			if slices.Contains(other, k) {
				out[p] = append(out[p], k)
			}
		}
	}
	return out
}

// readWithOpenAI has the openai-go client read the reassembled answer of
// the same request and checks it against the engine's own.
func readWithOpenAI(t *testing.T, base string, tc reCase, body string, direct []byte) {
	t.Helper()
	var opts []option.RequestOption
	for i := 0; i+1 < len(tc.hdr); i += 2 {
		opts = append(opts, option.WithHeader(tc.hdr[i], tc.hdr[i+1]))
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatal(err)
	}
	for k, v := range raw {
		if k != "model" && k != "messages" && k != "prompt" && k != "max_tokens" {
			opts = append(opts, option.WithJSONSet(k, v))
		}
	}
	client := openai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := context.Background()
	if tc.path == "/v1/completions" {
		var want openai.Completion
		if err := json.Unmarshal(direct, &want); err != nil {
			t.Fatal(err)
		}
		got, err := client.Completions.New(ctx, openai.CompletionNewParams{
			Model: "test", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(raw["prompt"].(string))},
			MaxTokens: openai.Int(int64(raw["max_tokens"].(float64))),
		}, opts...)
		if err != nil {
			t.Fatalf("openai-go: %v", err)
		}
		if len(got.Choices) != len(want.Choices) || got.Usage.CompletionTokens != want.Usage.CompletionTokens || got.Object != "text_completion" {
			t.Fatalf("openai-go read %+v, want %+v", got, want)
		}
		for i, ch := range got.Choices {
			w := want.Choices[i]
			if ch.Text != w.Text || ch.FinishReason != w.FinishReason || len(ch.Logprobs.Tokens) != len(w.Logprobs.Tokens) ||
				!slices.Equal(ch.Logprobs.TokenLogprobs, w.Logprobs.TokenLogprobs) {
				t.Errorf("choice %d: openai-go read %+v, want %+v", i, ch, w)
			}
		}
		return
	}
	var want openai.ChatCompletion
	if err := json.Unmarshal(direct, &want); err != nil {
		t.Fatal(err)
	}
	got, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     "test",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("what is the weather in Paris")},
		MaxTokens: openai.Int(int64(raw["max_tokens"].(float64))),
	}, opts...)
	if err != nil {
		t.Fatalf("openai-go: %v", err)
	}
	if len(got.Choices) != len(want.Choices) || got.Usage.CompletionTokens != want.Usage.CompletionTokens ||
		got.Usage.PromptTokens != want.Usage.PromptTokens || got.Object != "chat.completion" {
		t.Fatalf("openai-go read %+v, want %+v", got, want)
	}
	for i, ch := range got.Choices {
		w := want.Choices[i]
		if ch.Message.Content != w.Message.Content || ch.Message.Role != "assistant" || ch.FinishReason != w.FinishReason ||
			len(ch.Logprobs.Content) != len(w.Logprobs.Content) || len(ch.Message.ToolCalls) != len(w.Message.ToolCalls) {
			t.Errorf("choice %d: openai-go read %+v, want %+v", i, ch, w)
			continue
		}
		for j, lp := range ch.Logprobs.Content {
			if lp.Token != w.Logprobs.Content[j].Token || lp.Logprob != w.Logprobs.Content[j].Logprob || len(lp.TopLogprobs) != len(w.Logprobs.Content[j].TopLogprobs) {
				t.Errorf("choice %d logprob %d: %+v, want %+v", i, j, lp, w.Logprobs.Content[j])
			}
		}
		for j, call := range ch.Message.ToolCalls {
			wc := w.Message.ToolCalls[j]
			if call.ID == "" || call.Type != "function" || call.Function.Name != wc.Function.Name || call.Function.Arguments != wc.Function.Arguments || !json.Valid([]byte(call.Function.Arguments)) {
				t.Errorf("choice %d tool call %d: %+v, want %+v", i, j, call, wc)
			}
		}
	}
}
