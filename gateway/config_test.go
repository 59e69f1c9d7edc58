package gateway

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	c, err := ConfigFromEnv([]string{"KNEECAP_UPSTREAM=http://127.0.0.1:8000", "UNRELATED=1"})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Listen: ":8080", AdminListen: ":9090", SLOTTFT: time.Second, SLOTPOT: 100 * time.Millisecond,
		SLOWindow: time.Minute, MaxQueue: 1024, FirstTokenTimeout: time.Minute, MaxBodyBytes: 16 << 20,
		ResponseTimeout: 10 * time.Minute, StreamIdleTimeout: time.Minute, ClientWriteTimeout: 30 * time.Second,
		UpstreamIdleTimeout: 4 * time.Second, ClientHeaderTimeout: 10 * time.Second, ClientReadTimeout: time.Minute,
		ClientIdleTimeout: 2 * time.Minute,
		DrainTimeout:      30 * time.Second, UpstreamHealthPath: "/health", LogFormat: "text",
		SLOPercentile: 0.9, MinCap: 1, PrefillPacing: true}
	want.Upstream = c.Upstream
	if c != want || c.Upstream.String() != "http://127.0.0.1:8000" || c.Limit() != DefaultMaxConcurrency {
		t.Fatalf("got %+v\nwant %+v", c, want)
	}
}

func TestConfigErrorsNameTheVariable(t *testing.T) {
	up := "KNEECAP_UPSTREAM=http://127.0.0.1:8000"
	tests := []struct {
		name    string
		env     []string
		wantVar string
	}{
		{"missing upstream", nil, "KNEECAP_UPSTREAM"},
		{"upstream without scheme", []string{"KNEECAP_UPSTREAM=localhost:8000"}, "KNEECAP_UPSTREAM"},
		{"bad duration", []string{up, "KNEECAP_SLO_TTFT=fast"}, "KNEECAP_SLO_TTFT"},
		{"bad int", []string{up, "KNEECAP_MAX_CONCURRENCY=lots"}, "KNEECAP_MAX_CONCURRENCY"},
		{"negative cap", []string{up, "KNEECAP_MAX_CONCURRENCY=-1"}, "KNEECAP_MAX_CONCURRENCY"},
		{"tiny window", []string{up, "KNEECAP_SLO_WINDOW=10ms"}, "KNEECAP_SLO_WINDOW"},
		{"bad level", []string{up, "KNEECAP_LOG_LEVEL=loud"}, "KNEECAP_LOG_LEVEL"},
		{"bad format", []string{up, "KNEECAP_LOG_FORMAT=xml"}, "KNEECAP_LOG_FORMAT"},
		{"bad health path", []string{up, "KNEECAP_UPSTREAM_HEALTH_PATH=health"}, "KNEECAP_UPSTREAM_HEALTH_PATH"},
		{"percentile out of range", []string{up, "KNEECAP_SLO_PERCENTILE=90"}, "KNEECAP_SLO_PERCENTILE"},
		{"percentile not a number", []string{up, "KNEECAP_SLO_PERCENTILE=p90"}, "KNEECAP_SLO_PERCENTILE"},
		{"max cap below min cap", []string{up, "KNEECAP_MIN_CAP=4", "KNEECAP_MAX_CAP=2"}, "KNEECAP_MAX_CAP"},
		{"zero body bound", []string{up, "KNEECAP_MAX_BODY_BYTES=0"}, "KNEECAP_MAX_BODY_BYTES"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ConfigFromEnv(tt.env)
			var se *SettingError
			if !errors.As(err, &se) || se.Var != tt.wantVar {
				t.Fatalf("err = %v, want a SettingError naming %s", err, tt.wantVar)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, tt.wantVar+": ") || strings.Contains(msg, "\n") {
				t.Fatalf("message %q is not one line naming %s", msg, tt.wantVar)
			}
		})
	}
}
