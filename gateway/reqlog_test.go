package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/kneecap/kneecap/reqlog"
	"github.com/kneecap/kneecap/sim"
)

// TestRequestLog runs the gateway with its request log on in front of the
// real simulator: three requests at once at a cap of one with no queue
// (one served, two refused), then a fourth with the same long system
// prompt. The log has one line each, judged and measured as the gateway
// saw them; the served requests share the fingerprint of their shared
// prefix and differ after it; no prompt text and no raw tenant reach the
// file.
func TestRequestLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	synctest.Test(t, func(t *testing.T) {
		profile, err := sim.LookupProfile("gb10-fp8")
		if err != nil {
			t.Fatal(err)
		}
		client, stop := behindSim(t, sim.Config{Profile: profile, Seed: 3},
			[]string{"KNEECAP_MAX_CONCURRENCY=1", "KNEECAP_MAX_QUEUE=0", "KNEECAP_REQUEST_LOG=" + path,
				"KNEECAP_TENANT_HEADER=x-tenant"}, WithStaticCap())
		system := strings.Repeat("system prompt words ", 600) // 12,000 characters: 5 blocks of 2,048 and a part
		post := func(user string) int {
			body := `{"model":"m","stream":true,"max_tokens":8,"ignore_eos":true,"messages":[{"role":"system","content":"` +
				system + `"},{"role":"user","content":"` + user + `"}]}`
			req, _ := http.NewRequest("POST", "http://gateway/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("x-tenant", "acme-corp")
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return 0
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Go(func() { post(strings.Repeat("question ", 10+i)) })
		}
		wg.Wait()
		if code := post("another question entirely"); code != 200 {
			t.Errorf("fourth request: status %d", code)
		}
		stop()
	})
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "system prompt") || strings.Contains(string(raw), "question") || strings.Contains(string(raw), "acme") {
		t.Fatal("the request log holds prompt text or the raw tenant")
	}
	var lines []reqlog.Line
	for _, s := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var l reqlog.Line
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatalf("line %q: %v", s, err)
		}
		lines = append(lines, l)
	}
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4", len(lines))
	}
	var served []reqlog.Line
	refused := 0
	for _, l := range lines {
		switch l.Outcome {
		case "good", "late":
			served = append(served, l)
			if l.OutputTokens != 8 || l.PromptTokens < 1000 || l.TTFT <= 0 || l.EngineTTFT <= 0 || l.TPOT <= 0 || l.Status != 200 {
				t.Errorf("served line: %+v", l)
			}
		case "refused":
			refused++
			// Refused before its body was read (a full queue is seen from
			// the headers), a request has no prompt estimate.
			if l.Reason != "queue_full" || l.Status != 429 || l.OutputTokens != 0 {
				t.Errorf("refused line: %+v", l)
			}
		default:
			t.Errorf("line with outcome %q: %+v", l.Outcome, l)
		}
		if l.Tenant != reqlog.HashTenant("acme-corp") {
			t.Errorf("tenant %q, want the hash of acme-corp", l.Tenant)
		}
	}
	if len(served) != 2 || refused != 2 {
		t.Fatalf("%d served and %d refused, want 2 and 2", len(served), refused)
	}
	a, b := served[0].Prefix, served[1].Prefix
	if len(a) != 6 || len(b) != 6 {
		t.Fatalf("prefixes of %d and %d blocks, want 6", len(a), len(b))
	}
	for i := range 5 {
		if a[i] != b[i] {
			t.Errorf("block %d of the shared system prompt hashes apart", i)
		}
	}
	if a[5] == b[5] {
		t.Error("the last blocks (different questions) hash alike")
	}
}
