package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/kneecap/kneecap/proxy/proxytest"
)

// A refusal tells the wait in milliseconds too (Retry-After-Ms, which the
// OpenAI SDKs read first), and the official Go client, retrying as it does
// by default, comes back with the same request: the gateway knows it again
// and counts its return.
func TestSDKClientComesBack(t *testing.T) {
	eng := &proxytest.Engine{Flavor: proxytest.VLLM, Chunks: 10, FirstDelay: 100 * time.Millisecond, Gap: 100 * time.Millisecond}
	h := start(t, eng, Config{MaxConcurrency: 1, MaxQueueWait: 200 * time.Millisecond})
	stream := func(c openai.Client) error {
		s := c.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
			Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
		})
		for s.Next() {
		}
		return s.Err()
	}
	holder := make(chan error, 1)
	go func() {
		holder <- stream(openai.NewClient(option.WithBaseURL(h.traffic+"/v1"), option.WithAPIKey("a"), option.WithMaxRetries(0)))
	}()
	waitFor(t, func() bool { return h.g.Limiter().Running() == 1 })

	// A request that finds the slot held waits its bound, then is refused
	// with both headers.
	req, _ := http.NewRequest(http.MethodPost, h.traffic+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"other"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ms, err := strconv.Atoi(resp.Header.Get("Retry-After-Ms"))
	if resp.StatusCode != http.StatusTooManyRequests || err != nil || ms < 1 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("refusal %d, Retry-After %q, Retry-After-Ms %q", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Retry-After-Ms"))
	}

	// The SDK's client, with its default two retries.
	if err := stream(openai.NewClient(option.WithBaseURL(h.traffic+"/v1"), option.WithAPIKey("b"))); err != nil {
		t.Fatalf("the retrying client failed: %v", err)
	}
	if err := <-holder; err != nil {
		t.Fatal(err)
	}
	o := h.g.Limiter().Outside()
	if o.Returned < 1 || o.GaveUp != 0 {
		t.Fatalf("outside %+v, want the SDK's request seen back and nobody given up", o)
	}
	_, body := get(t, h.admin+"/status")
	var st Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if st.Admission.Outside.Returned != o.Returned {
		t.Fatalf("/status admission.outside %+v, want %d returns", st.Admission.Outside, o.Returned)
	}
}
