package proxy

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/proxy/proxytest"
	"github.com/kneecap/kneecap/slo"
)

type countObserver struct{ n int }

func (c *countObserver) FirstChunk(FirstChunk) {}
func (c *countObserver) Chunk(Chunk)           { c.n++ }
func (c *countObserver) Done(slo.Record)       {}

// BenchmarkRelayStream relays one stream of 256 output chunks (vLLM shape)
// per op through the full generation handler: admission, include_usage
// injection, one wire.Inspect per event, flush per event, observers. Divide
// allocs/op by 259 events for the per-event cost.
func BenchmarkRelayStream(b *testing.B) {
	benchmarkRelay(b, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
}

// BenchmarkRelayReassembled is BenchmarkRelayStream for a request that is
// not streamed: the same 259 events from the engine, each inspected,
// observed and merged into the answer (wire.Assembler), then one JSON body
// to the client. Divide by 259 events (256 tokens) as above.
func BenchmarkRelayReassembled(b *testing.B) {
	benchmarkRelay(b, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
}

func benchmarkRelay(b *testing.B, request string) {
	const chunks = 256
	var sb strings.Builder
	sb.WriteString("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n")
	for range chunks {
		sb.WriteString("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" tok\"},\"finish_reason\":null}]}\n\n")
	}
	sb.WriteString("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n")
	sb.WriteString("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":256,\"total_tokens\":261}}\n\n")
	sb.WriteString("data: [DONE]\n\n")
	up, _ := url.Parse("http://engine")
	obs := &countObserver{}
	p, err := New(Config{
		Upstream: up, Transport: proxytest.MemEngine{Body: []byte(sb.String())},
		Limiter: admission.NewLimiter(admission.Config{Limit: 1}), Observer: obs,
		Targets: slo.Targets{TTFT: 1e9, TPOT: 1e8},
	})
	if err != nil {
		b.Fatal(err)
	}
	h := p // routes POST /v1/chat/completions to the generation handler
	body := []byte(request)
	b.SetBytes(int64(sb.Len()))
	b.ReportAllocs()
	for b.Loop() {
		r, _ := http.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
		h.ServeHTTP(&proxytest.DiscardWriter{H: http.Header{}}, r)
	}
	if obs.n == 0 {
		b.Fatal("no chunks observed")
	}
}
