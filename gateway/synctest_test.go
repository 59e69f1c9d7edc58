package gateway

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kneecap/kneecap/proxy"
	"github.com/kneecap/kneecap/proxy/proxytest"
	"github.com/kneecap/kneecap/slo"
)

// windowlessRecorder keeps finished records.
type windowlessRecorder struct {
	mu   sync.Mutex
	recs []slo.Record
}

func (r *windowlessRecorder) FirstChunk(proxy.FirstChunk) {}
func (r *windowlessRecorder) Chunk(proxy.Chunk)           {}
func (r *windowlessRecorder) Done(rec slo.Record) {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
}

// TestVirtualTime runs client -> gateway -> engine in one process inside a
// synctest bubble over net.Pipe connections: time is virtual, so the
// measurements are exact. This is the harness the scenario suite builds on.
func TestVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		engL := proxytest.NewPipeListener()
		engine := &http.Server{Handler: &proxytest.Engine{Flavor: proxytest.VLLM, Chunks: 11, TokensPerChunk: 1,
			FirstDelay: 300 * time.Millisecond, Gap: 20 * time.Millisecond}}
		go func() { _ = engine.Serve(engL) }()

		gwL, adminL := proxytest.NewPipeListener(), proxytest.NewPipeListener()
		engT := engL.Transport()
		up, _ := url.Parse("http://engine")
		cfg, err := ConfigFromEnv([]string{"KNEECAP_UPSTREAM=" + up.String(), "KNEECAP_MAX_CONCURRENCY=1"})
		if err != nil {
			t.Fatal(err)
		}
		var obs windowlessRecorder
		g, err := New(cfg, WithTransport(engT), WithListeners(gwL, adminL), WithRegistry(prometheus.NewRegistry()), WithStaticCap(), WithObserver(&obs))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		runErr := make(chan error, 1)
		go func() { runErr <- g.Run(ctx) }()

		clientT := gwL.Transport()
		client := &http.Client{Transport: clientT}
		body := `{"model":"m","stream":true,"messages":[]}`
		var wg sync.WaitGroup
		for range 2 { // the second waits for the first: cap 1
			wg.Go(func() {
				resp, err := client.Post("http://gateway/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			})
			synctest.Wait()
		}
		wg.Wait()

		obs.mu.Lock()
		recs := obs.recs
		obs.mu.Unlock()
		if len(recs) != 2 {
			t.Fatalf("%d records", len(recs))
		}
		// First request: TTFT 300 ms, then 10 gaps of 20 ms; E2E 500 ms.
		// Second: queued for the first's 500 ms, so its client TTFT is 800 ms.
		want := []struct{ wait, ttft, engineTTFT, e2e time.Duration }{
			{0, 300 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond},
			{500 * time.Millisecond, 800 * time.Millisecond, 300 * time.Millisecond, time.Second},
		}
		for i, r := range recs {
			w := want[i]
			tpot, _ := r.TPOT()
			if r.QueueWait != w.wait || r.TTFT != w.ttft || r.EngineTTFT != w.engineTTFT || r.E2E != w.e2e ||
				tpot != 20*time.Millisecond || r.OutputTokens != 11 || r.Outcome != slo.Good {
				t.Errorf("record %d: wait %v ttft %v engine %v e2e %v tpot %v tokens %d outcome %v; want %+v",
					i, r.QueueWait, r.TTFT, r.EngineTTFT, r.E2E, tpot, r.OutputTokens, r.Outcome, w)
			}
		}
		if s := g.Window().Stats(time.Now()); s.ITL.P50 < 19*time.Millisecond || s.ITL.P50 > 21*time.Millisecond || s.Good != 2 {
			t.Errorf("window: %+v", s)
		}

		cancel()
		if err := <-runErr; err != nil {
			t.Fatal(err)
		}
		clientT.CloseIdleConnections()
		_ = engine.Close()
		engT.CloseIdleConnections()
	})
}
