package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kneecap/kneecap/proxy/proxytest"
)

// syncBuffer is a log sink safe for the gateway's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func postWith(t *testing.T, u string, h http.Header) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", u+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"a","stream":true}`))
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestClassesTenantsAndTheKeyNeverShown sends requests of two classes with
// an API key and checks that the classes and the key's tenant show in the
// records, /status and /metrics, and the key itself nowhere (logs at
// debug included).
func TestClassesTenantsAndTheKeyNeverShown(t *testing.T) {
	const key = "sk-very-secret-0123456789"
	logs := &syncBuffer{}
	recs := &windowlessRecorder{}
	cfg := Config{Classes: "chat:ttft=2s;batch:ttft=0,tpot=0", DefaultClass: "chat", ClassHeader: "x-kneecap-class",
		TenantMetrics: 10, LogLevel: slog.LevelDebug}
	h := start(t, &proxytest.Engine{}, cfg, WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))), WithObserver(recs))
	for _, class := range []string{"", "batch", "no-such-class"} {
		hdr := http.Header{"Authorization": {"Bearer " + key}}
		if class != "" {
			hdr.Set("X-Kneecap-Class", class)
		}
		if resp, body := postWith(t, h.traffic, hdr); resp.StatusCode != 200 {
			t.Fatalf("class %q: %d %s", class, resp.StatusCode, body)
		}
	}
	tenant := KeyTenant("Bearer " + key)
	if !strings.HasPrefix(tenant, "key:") || strings.Contains(tenant, key) {
		t.Fatalf("tenant %q", tenant)
	}
	recs.mu.Lock()
	var got []string
	for _, r := range recs.recs {
		got = append(got, fmt.Sprintf("%s/%v/%v", r.Class, r.Targets.TTFT, r.Targets.TPOT))
		if r.Tenant != tenant {
			t.Errorf("record tenant %q, want %q", r.Tenant, tenant)
		}
		if b, _ := json.Marshal(r); strings.Contains(string(b), key) {
			t.Errorf("record holds the key: %s", b)
		}
	}
	recs.mu.Unlock()
	// No header and an unknown class both go to the default class, chat.
	if want := "chat/2s/100ms batch/0s/0s chat/2s/100ms"; strings.Join(got, " ") != want {
		t.Errorf("classes %v, want %s", got, want)
	}
	_, status := get(t, h.admin+"/status")
	_, metrics := get(t, h.admin+"/metrics")
	var st Status
	if err := json.Unmarshal([]byte(status), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Classes) != 2 || st.Classes[0].Name != "chat" || st.Classes[0].Granted != 2 || st.Classes[1].Granted != 1 {
		t.Errorf("/status classes %+v", st.Classes)
	}
	if len(st.Tenants) != 3 || st.Tenants[0].Tenant != tenant || st.Tenants[2].Tenant != "other" {
		t.Errorf("/status tenants %+v", st.Tenants)
	}
	for _, series := range []string{
		`kneecap_class_requests_total{class="batch",outcome="good"} 1`,
		`kneecap_class_granted_total{class="chat"} 2`,
		`kneecap_tenant_served_tokens{class="chat",tenant="` + tenant + `"}`,
	} {
		if !strings.Contains(metrics, series) {
			t.Errorf("series %q missing from /metrics", series)
		}
	}
	for what, s := range map[string]string{"/status": status, "/metrics": metrics, "logs": logs.String()} {
		if strings.Contains(s, key) || strings.Contains(s, "very-secret") {
			t.Errorf("%s shows the API key", what)
		}
	}
	if !strings.Contains(logs.String(), "completions") {
		t.Errorf("no debug log of the requests (the check of the logs checked nothing): %q", logs.String())
	}
}

func TestTenantHeaderIsBounded(t *testing.T) {
	h := start(t, &proxytest.Engine{}, Config{TenantHeader: "x-team"})
	for _, v := range []string{strings.Repeat("a", 65), "team a", "key:forged"} {
		resp, body := postWith(t, h.traffic, http.Header{"X-Team": {v}})
		if resp.StatusCode != 400 || !strings.Contains(body, `"type":"invalid_request_error"`) {
			t.Errorf("tenant %q: %d %s, want 400 with an OpenAI error", v, resp.StatusCode, body)
		}
	}
	if resp, body := postWith(t, h.traffic, http.Header{"X-Team": {"team-a"}}); resp.StatusCode != 200 {
		t.Errorf("valid tenant: %d %s", resp.StatusCode, body)
	}
}

func TestParseClassesAndTenants(t *testing.T) {
	cs, err := ParseClasses(" chat:ttft=1s,tpot=100ms ; batch:ttft=0,tpot=0,e2e=30m,queue=0.5;")
	if err != nil || len(cs) != 2 || cs[1].Name != "batch" || !cs[1].Set.TTFT || cs[1].Targets.TTFT != 0 || cs[1].Targets.E2E.Minutes() != 30 || cs[1].QueueShare != 0.5 || cs[0].Set.E2E {
		t.Fatalf("classes %+v, %v", cs, err)
	}
	cs, err = ParseClasses("chat:wait=2s;batch:ttft=0,wait=30m;bulk:wait=0")
	if err != nil || len(cs) != 3 || cs[0].MaxWait != 2*time.Second || cs[1].MaxWait != 30*time.Minute || cs[2].MaxWait != 0 || cs[0].Set.TTFT {
		t.Fatalf("classes %+v, %v", cs, err)
	}
	for in, want := range map[string]string{
		"batch:wait=25h":       `class "batch": wait="25h": want a duration between 0 and 24h`,
		"batch:wait=-1s":       `class "batch": wait="-1s": want a duration between 0 and 24h`,
		"batch:wait=soon":      `class "batch": wait="soon": want a duration between 0 and 24h`,
		"batch:wait=":          `class "batch": wait="": want a duration between 0 and 24h`,
		"batch:ttft=0,speed=9": `class "batch": unknown key "speed" (want ttft, tpot, e2e, queue, wait)`,
	} {
		if _, err := ParseClasses(in); err == nil || err.Error() != want {
			t.Errorf("ParseClasses(%q): %v, want %s", in, err, want)
		}
	}
	ts, err := ParseTenants("team-a:weight=2;team-b;key:0123456789abcdef:weight=0.5,class=batch")
	if err != nil || len(ts) != 3 || ts[0].Weight != 2 || ts[2].Name != "key:0123456789abcdef" || ts[2].Class != "batch" {
		t.Fatalf("tenants %+v, %v", ts, err)
	}
}

func FuzzParseClasses(f *testing.F) {
	f.Add("chat:ttft=1s,tpot=100ms;batch:ttft=0,queue=0.5")
	f.Add(";;a:;b:queue=1")
	f.Add("a:wait=2s;b:ttft=0,wait=0")
	f.Fuzz(func(t *testing.T, s string) {
		cs, err := ParseClasses(s)
		if err != nil {
			return
		}
		for _, c := range cs {
			if !validLabel(c.Name) || c.QueueShare < 0 || c.QueueShare > 1 || c.MaxWait < 0 || c.MaxWait > 24*time.Hour {
				t.Fatalf("accepted %+v from %q", c, s)
			}
		}
	})
}
