package proxy

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kneecap/kneecap/proxy/proxytest"
	"github.com/kneecap/kneecap/slo"
)

// gatedObserver will not return from an observation of an output chunk
// until the client has read that chunk. A relay that told its observers
// before the chunk was on its way would wait for it in vain.
type gatedObserver struct {
	clientRead chan struct{}
	timedOut   atomic.Int32
	seen       atomic.Int32
}

func (g *gatedObserver) wait() {
	g.seen.Add(1)
	select {
	case <-g.clientRead:
	case <-time.After(5 * time.Second):
		g.timedOut.Add(1)
	}
}

func (g *gatedObserver) FirstChunk(FirstChunk) { g.wait() }
func (g *gatedObserver) Chunk(Chunk)           { g.wait() }
func (g *gatedObserver) Done(slo.Record)       {}

// TestObserversDoNotDelayClients: a slow observer (an adaptive controller
// busy refitting) never holds back a chunk from the client.
func TestObserversDoNotDelayClients(t *testing.T) {
	for _, gap := range []time.Duration{0, 5 * time.Millisecond} { // chunks arriving together, and paced
		t.Run(gap.String(), func(t *testing.T) {
			engine := httptest.NewServer(&proxytest.Engine{Flavor: proxytest.VLLM, Chunks: 4, Gap: gap})
			defer engine.Close()
			u, _ := url.Parse(engine.URL)
			obs := &gatedObserver{clientRead: make(chan struct{}, 16)}
			p, err := New(Config{Upstream: u, Observer: obs, Targets: slo.Targets{TTFT: time.Hour, TPOT: time.Hour}})
			if err != nil {
				t.Fatal(err)
			}
			gw := httptest.NewServer(p)
			defer gw.Close()

			resp, err := http.Post(gw.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			outputs := 0
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if line := sc.Text(); strings.HasPrefix(line, "data: ") && strings.Contains(line, `"content":"tok`) {
					outputs++
					obs.clientRead <- struct{}{}
				}
			}
			if outputs != 4 {
				t.Fatalf("client read %d output chunks, want 4", outputs)
			}
			if n := obs.timedOut.Load(); n != 0 {
				t.Fatalf("%d observations waited for a chunk the client never got: the relay told observers before the chunk was sent", n)
			}
			if n := obs.seen.Load(); n != 4 {
				t.Fatalf("observers heard of %d output chunks, want 4", n)
			}
		})
	}
}
