package gateway_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kneecap/kneecap/gateway"
	"github.com/kneecap/kneecap/proxy/proxytest"
)

// BenchmarkGatewayStream relays one stream of 100 output chunks per op
// through the whole traffic handler as kneecap serve wires it: router,
// admission, the gateway's controller (cap fixed, as the relay benchmark
// sets it), the SLO window and the metrics. Events arrive from memory and
// leave to nowhere, so this is the gateway's CPU beyond I/O: divide ns/op
// by 103 events for the cost per event, request setup included.
func BenchmarkGatewayStream(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n")
	for range 99 {
		sb.WriteString("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" tok\"},\"finish_reason\":null}]}\n\n")
	}
	sb.WriteString("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n")
	sb.WriteString("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":100,\"total_tokens\":105}}\n\n")
	sb.WriteString("data: [DONE]\n\n")
	cfg, err := gateway.ConfigFromEnv([]string{"KNEECAP_UPSTREAM=http://engine", "KNEECAP_MAX_CONCURRENCY=4096", "KNEECAP_MAX_QUEUE=100000"})
	if err != nil {
		b.Fatal(err)
	}
	g, err := gateway.New(cfg, gateway.WithTransport(proxytest.MemEngine{Body: []byte(sb.String())}),
		gateway.WithRegistry(prometheus.NewRegistry()))
	if err != nil {
		b.Fatal(err)
	}
	h := g.Handler()
	body := []byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	b.ReportAllocs()
	for b.Loop() {
		r, _ := http.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
		r.RemoteAddr = "127.0.0.1:1234"
		h.ServeHTTP(&proxytest.DiscardWriter{H: http.Header{}}, r)
	}
}
