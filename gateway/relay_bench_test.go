package gateway_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kneecap/kneecap/gateway"
	"github.com/kneecap/kneecap/proxy/proxytest"
	"github.com/kneecap/kneecap/tracing"
	"github.com/kneecap/kneecap/tracing/otlptest"
)

// BenchmarkGatewayStream relays one stream of 100 output chunks per op
// through the whole traffic handler as kneecap serve wires it: router,
// admission, the gateway's controller (cap fixed, as the relay benchmark
// sets it), the SLO window and the metrics. Events arrive from memory and
// leave to nowhere, so this is the gateway's CPU beyond I/O: divide ns/op
// by 103 events for the cost per event, request setup included.
//
// With KNEECAP_BENCH_TRACING=1 every request is traced and sampled
// (always_on), its span exported over OTLP/HTTP to a receiver on
// 127.0.0.1 that reads and drops it: what tracing costs, exporter
// included. The switch keeps the benchmark's name, so that scripts/bench-ab
// compares it with the same benchmark of a commit without tracing.
//
// With KNEECAP_BENCH_REQUEST_LOG=1 the request log is on (a file in a
// temporary directory, its writer running): what the log costs per
// request, the prompt's fingerprint included (the prompt here is short;
// wire's BenchmarkPromptBlocks prices a long one).
//
// cpu-ns/op is the process's CPU time per op, every goroutine's: the
// tracer's exports run beside the request's goroutine, on another core
// when one is free, where ns/op does not see them.
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
	if os.Getenv("KNEECAP_BENCH_TRACING") != "" {
		if cfg.Tracing, err = tracing.FromEnv(map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": otlptest.Discard(b).URL, "OTEL_TRACES_SAMPLER": "always_on",
		}); err != nil {
			b.Fatal(err)
		}
	}
	if os.Getenv("KNEECAP_BENCH_REQUEST_LOG") != "" {
		cfg.RequestLog = filepath.Join(b.TempDir(), "requests.jsonl")
	}
	g, err := gateway.New(cfg, gateway.WithTransport(proxytest.MemEngine{Body: []byte(sb.String())}),
		gateway.WithRegistry(prometheus.NewRegistry()))
	if err != nil {
		b.Fatal(err)
	}
	if tr := g.Tracing(); tr != nil {
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = tr.Run(ctx); close(done) }()
		defer func() {
			stop()
			<-done
			b.ReportMetric(float64(tr.Dropped()), "dropped")
			b.ReportMetric(float64(tr.Exported()), "exported")
		}()
	}
	if l := g.RequestLog(); l != nil {
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		defer func() {
			stop()
			if err := <-done; err != nil {
				b.Error(err)
			}
			b.ReportMetric(float64(l.Dropped()), "log-dropped")
		}()
	}
	h := g.Handler()
	body := []byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		r, _ := http.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
		r.RemoteAddr = "127.0.0.1:1234"
		h.ServeHTTP(&proxytest.DiscardWriter{H: http.Header{}}, r)
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}
