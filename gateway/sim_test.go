package gateway

import (
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/kneecap/kneecap/proxy/proxytest"
	"github.com/kneecap/kneecap/sim"
	"github.com/kneecap/kneecap/slo"
	"github.com/kneecap/kneecap/wire"
)

// TestAgainstSimulator runs the gateway in front of the real simulator,
// one flavour at a time, in a synctest bubble: 12 streamed requests at a
// cap of 4, of which the simulator cuts some mid-stream. Every completed
// request must carry the exact token count from the usage report (never an
// estimate), no usage-only chunk may reach a client that did not ask, and
// every cut stream must end with an SSE error event and count as an engine
// error.
func TestAgainstSimulator(t *testing.T) {
	for _, flavor := range sim.Flavors() {
		t.Run(string(flavor), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { runAgainstSim(t, flavor) })
		})
	}
}

func runAgainstSim(t *testing.T, flavor sim.Flavor) {
	profile, err := sim.LookupProfile("gb10-fp8")
	if err != nil {
		t.Fatal(err)
	}
	var rec windowlessRecorder
	client, stop := behindSim(t, sim.Config{Profile: profile, Flavor: flavor, Seed: 7, Faults: sim.Faults{CutRate: 0.25}},
		[]string{"KNEECAP_MAX_CONCURRENCY=4", "KNEECAP_SLO_TTFT=60s", "KNEECAP_SLO_TPOT=1s"}, WithStaticCap(), WithObserver(&rec))
	var mu sync.Mutex
	var bodies []string
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() {
			body := `{"model":"m","stream":true,"max_tokens":20,"ignore_eos":true,"messages":[{"role":"user","content":"one two three four"}]}`
			resp, err := client.Post("http://gateway/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			mu.Lock()
			bodies = append(bodies, string(b))
			mu.Unlock()
		})
	}
	wg.Wait()

	cut := 0
	for _, b := range bodies {
		evs := proxytest.Events(b)
		for _, e := range evs {
			if info, err := wire.Inspect([]byte(e)); err == nil && info.UsageOnly {
				t.Fatalf("usage-only chunk reached a client that did not ask: %s", e)
			}
		}
		if len(evs) > 0 && strings.Contains(evs[len(evs)-1], `"code":"stream_broken"`) {
			cut++
		}
	}
	rec.mu.Lock()
	recs := rec.recs
	rec.mu.Unlock()
	engineErrors := 0
	for _, r := range recs {
		switch {
		case r.Outcome.Completed():
			if r.Estimated || r.OutputTokens != 20 || r.PromptTokens == 0 || r.TTFT <= 0 {
				t.Errorf("completed record %+v", r)
			}
		case r.Outcome == slo.EngineError && r.Reason == "stream_broken":
			engineErrors++
		default:
			t.Errorf("record %+v", r)
		}
	}
	if len(recs) != 12 || cut != engineErrors || cut == 0 || cut == 12 {
		t.Fatalf("%d records, %d streams ended with an error event, %d engine errors (want some, not all)", len(recs), cut, engineErrors)
	}

	stop()
}
