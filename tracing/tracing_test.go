package tracing_test

import (
	"context"
	"net"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/kneecap/kneecap/tracing"
	"github.com/kneecap/kneecap/tracing/otlptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start runs the tracer of env until the returned stop is called.
func start(t testing.TB, env map[string]string) (*tracing.Tracer, func()) {
	t.Helper()
	cfg, err := tracing.FromEnv(env)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracing.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = tr.Run(ctx); close(done) }()
	return tr, func() { cancel(); <-done }
}

// TestExportOTLP: spans reach a real OTLP/HTTP receiver (protobuf, and
// gzip), with the resource of OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES; Run's end flushes what is left and closes
// every connection (goleak).
func TestExportOTLP(t *testing.T) {
	for _, gz := range []string{"none", "gzip"} {
		t.Run(gz, func(t *testing.T) {
			rcv := otlptest.NewReceiver(t)
			tr, stop := start(t, map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.URL(), "OTEL_EXPORTER_OTLP_COMPRESSION": gz,
				"OTEL_SERVICE_NAME": "kn-test", "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test",
				"OTEL_BSP_SCHEDULE_DELAY": "20", "OTEL_TRACES_SAMPLER": "always_on",
			})
			_, s := tr.Tracer().Start(context.Background(), "one", trace.WithSpanKind(trace.SpanKindServer))
			s.End()
			got := rcv.Wait(t, 1, 10*time.Second)
			if got[0].Name != "one" || got[0].Kind != "SPAN_KIND_SERVER" || got[0].Resource["service.name"] != "kn-test" ||
				got[0].Resource["deployment.environment"] != "test" || got[0].Scope != tracing.ScopeName {
				t.Errorf("%+v", got[0])
			}
			_, s = tr.Tracer().Start(context.Background(), "two")
			s.End()
			stop() // flushed at the end, within the delay
			if n := len(rcv.Spans()); n != 2 || tr.Exported() != 2 || tr.Dropped() != 0 {
				t.Errorf("received %d, exported %d, dropped %d", n, tr.Exported(), tr.Dropped())
			}
		})
	}
}

// TestCollectorHangs: a collector that accepts and never answers holds
// nothing but the exporter: ending spans never waits, Run ends within
// ShutdownTimeout of its context, and the spans are counted as dropped.
func TestCollectorHangs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(conns)
				return
			}
			conns <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for c := range conns {
			c.Close()
		}
	})
	tr, stop := start(t, map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + ln.Addr().String(), "OTEL_BSP_SCHEDULE_DELAY": "10",
		"OTEL_BSP_MAX_QUEUE_SIZE": "8", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "2", "OTEL_BSP_EXPORT_TIMEOUT": "60000",
		"OTEL_EXPORTER_OTLP_TIMEOUT": "60000",
	})
	began := time.Now()
	for range 100 {
		_, s := tr.Tracer().Start(context.Background(), "s")
		s.End()
	}
	if took := time.Since(began); took > time.Second {
		t.Errorf("100 spans took %v to end", took)
	}
	time.Sleep(100 * time.Millisecond)
	began = time.Now()
	stop()
	if took := time.Since(began); took > tracing.ShutdownTimeout+2*time.Second {
		t.Errorf("Run took %v to end after its context", took)
	}
	if tr.Dropped() != 100 || tr.Exported() != 0 {
		t.Errorf("dropped %d, exported %d", tr.Dropped(), tr.Exported())
	}
}
