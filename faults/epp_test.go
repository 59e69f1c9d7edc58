package faults

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kneecap/kneecap/testengine"
)

// TestEPPMetricsRouteFaults: with KNEECAP_EPP_METRICS the traffic port's
// GET /metrics fetches the engine's own metrics. In front of each engine,
// with its metrics endpoint answering, missing, hanging 30 s or writing
// 50 MiB of garbage, every scrape is answered with an exposition the
// picker parses and kneecap's waiting series in it, well before the
// hanging engine answers; and ten scrapes at once from a client that
// keeps asking do not hold more than the handler's bound of engine
// fetches (the rest get kneecap's series alone at once). Nothing is left
// behind (goleak when the package ends).
func TestEPPMetricsRouteFaults(t *testing.T) {
	for _, kind := range testengine.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			for _, fault := range []string{"", testengine.MetricsMissing, testengine.MetricsHang, testengine.MetricsHuge} {
				name := fault
				if name == "" {
					name = "none"
				}
				t.Run(name, func(t *testing.T) { runEPPFault(t, kind, fault) })
			}
		})
	}
}

func runEPPFault(t *testing.T, kind testengine.Kind, fault string) {
	var opts []testengine.Option
	if fault != "" {
		opts = append(opts, testengine.WithMetricsFault(fault))
	}
	eng := testengine.Start(t, kind, opts...)
	h := startGateway(t, eng, "KNEECAP_EPP_METRICS=vllm")
	// A client that gives up long before the hanging engine answers (30
	// s): an answer at all says the fetch was bounded.
	c := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(c.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			body, err := get(ctx, c, h.traffic+"/metrics")
			if err != nil {
				t.Errorf("scrape %d: %v", i, err)
				return
			}
			p := expfmt.NewTextParser(model.LegacyValidation)
			fams, err := p.TextToMetricFamilies(strings.NewReader(body))
			if err != nil {
				t.Errorf("scrape %d does not parse: %v", i, err)
				return
			}
			if fams["vllm:num_requests_waiting"] == nil || fams["vllm:num_requests_running"] == nil {
				t.Errorf("scrape %d without kneecap's waiting and running (%d families)", i, len(fams))
			}
		})
	}
	wg.Wait()
	// The traffic port still serves generations.
	if s, err := request(ctx, c, h.traffic, true, 4); err != nil || !s.complete {
		t.Errorf("a stream after the scrapes: %v %s", err, s)
	}
}

func get(ctx context.Context, c *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return string(b), err
}
