package gateway

import (
	"errors"
	"reflect"
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
		SLOWindow: time.Minute, MaxQueue: 1024, MaxRetryAfter: time.Minute, FirstTokenTimeout: time.Minute, MaxBodyBytes: 16 << 20,
		ResponseTimeout: 10 * time.Minute, StreamIdleTimeout: time.Minute, ClientWriteTimeout: 30 * time.Second,
		UpstreamIdleTimeout: 4 * time.Second, ClientHeaderTimeout: 10 * time.Second, ClientReadTimeout: time.Minute,
		ClientIdleTimeout: 2 * time.Minute, MaxBodyBytesTotal: 256 << 20, SLOHeaders: "any",
		SLOHeaderFloorTTFT: 100 * time.Millisecond, SLOHeaderFloorTPOT: 5 * time.Millisecond, SLOHeaderFloorE2E: 500 * time.Millisecond,
		DrainTimeout: 30 * time.Second, UpstreamHealthPath: "/health", RefusalStatus: 429, LogFormat: "text",
		SLOPercentile: 0.9, MinCap: 1, PrefillPacing: true, TokenBudget: true, CachedCost: true, StateMaxAge: 24 * time.Hour,
		EngineMetrics: "/metrics", EngineMetricsInterval: time.Second, EPPMetrics: "off", EPPSaturatedWaiting: 5,
		ClassHeader: "x-kneecap-class", FairPromptWeight: 1, FairOutputWeight: 2, MaxTenants: 4096, TenantMetrics: 10,
		RequestLogMaxBytes: 100 << 20, RequestLogFiles: 4, RequestLogBuffer: 4096}
	want.Upstream = c.Upstream
	if !reflect.DeepEqual(c, want) || c.Upstream.String() != "http://127.0.0.1:8000" || c.Limit() != DefaultMaxConcurrency {
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
		{"bad decode step switch", []string{up, "KNEECAP_DECODE_STEP=maybe"}, "KNEECAP_DECODE_STEP"},
		{"bad health path", []string{up, "KNEECAP_UPSTREAM_HEALTH_PATH=health"}, "KNEECAP_UPSTREAM_HEALTH_PATH"},
		{"percentile out of range", []string{up, "KNEECAP_SLO_PERCENTILE=90"}, "KNEECAP_SLO_PERCENTILE"},
		{"percentile not a number", []string{up, "KNEECAP_SLO_PERCENTILE=p90"}, "KNEECAP_SLO_PERCENTILE"},
		{"max cap below min cap", []string{up, "KNEECAP_MIN_CAP=4", "KNEECAP_MAX_CAP=2"}, "KNEECAP_MAX_CAP"},
		{"zero body bound", []string{up, "KNEECAP_MAX_BODY_BYTES=0"}, "KNEECAP_MAX_BODY_BYTES"},
		{"body budget below one body", []string{up, "KNEECAP_MAX_BODY_BYTES_TOTAL=1024"}, "KNEECAP_MAX_BODY_BYTES_TOTAL"},
		{"bad slo header mode", []string{up, "KNEECAP_SLO_HEADERS=sometimes"}, "KNEECAP_SLO_HEADERS"},
		{"negative header floor", []string{up, "KNEECAP_SLO_HEADER_FLOOR_TPOT=-1ms"}, "KNEECAP_SLO_HEADER_FLOOR_TPOT"},
		{"passthrough path not clean", []string{up, "KNEECAP_PASSTHROUGH_PATHS=/v1/load_lora_adapter,/a/../sleep"}, "KNEECAP_PASSTHROUGH_PATHS"},
		{"passthrough path of everything", []string{up, "KNEECAP_PASSTHROUGH_PATHS=/*"}, "KNEECAP_PASSTHROUGH_PATHS"},
		// Upper bounds: a value past them is a typo or an attack on memory
		// (KNEECAP_MAX_CAP=10000000 made one /status allocate 76 MiB).
		{"huge max cap", []string{up, "KNEECAP_MAX_CAP=10000000"}, "KNEECAP_MAX_CAP"},
		{"max cap past the limit", []string{up, "KNEECAP_MAX_CAP=4097"}, "KNEECAP_MAX_CAP"},
		{"huge concurrency", []string{up, "KNEECAP_MAX_CONCURRENCY=4097"}, "KNEECAP_MAX_CONCURRENCY"},
		{"huge min cap", []string{up, "KNEECAP_MIN_CAP=5000"}, "KNEECAP_MIN_CAP"},
		{"min cap above max cap", []string{up, "KNEECAP_MIN_CAP=100", "KNEECAP_MAX_CAP=50"}, "KNEECAP_MAX_CAP"},
		{"huge queue", []string{up, "KNEECAP_MAX_QUEUE=1048577"}, "KNEECAP_MAX_QUEUE"},
		{"huge body bound", []string{up, "KNEECAP_MAX_BODY_BYTES=1073741825"}, "KNEECAP_MAX_BODY_BYTES"},
		{"percentile NaN", []string{up, "KNEECAP_SLO_PERCENTILE=NaN"}, "KNEECAP_SLO_PERCENTILE"},
		{"percentile Inf", []string{up, "KNEECAP_SLO_PERCENTILE=+Inf"}, "KNEECAP_SLO_PERCENTILE"},
		{"huge ttft target", []string{up, "KNEECAP_SLO_TTFT=25h"}, "KNEECAP_SLO_TTFT"},
		{"huge tpot target", []string{up, "KNEECAP_SLO_TPOT=25h"}, "KNEECAP_SLO_TPOT"},
		{"huge e2e target", []string{up, "KNEECAP_SLO_E2E=25h"}, "KNEECAP_SLO_E2E"},
		{"huge window", []string{up, "KNEECAP_SLO_WINDOW=25h"}, "KNEECAP_SLO_WINDOW"},
		{"huge queue wait", []string{up, "KNEECAP_MAX_QUEUE_WAIT=25h"}, "KNEECAP_MAX_QUEUE_WAIT"},
		{"huge first-token timeout", []string{up, "KNEECAP_FIRST_TOKEN_TIMEOUT=25h"}, "KNEECAP_FIRST_TOKEN_TIMEOUT"},
		{"huge response timeout", []string{up, "KNEECAP_RESPONSE_TIMEOUT=2562047h"}, "KNEECAP_RESPONSE_TIMEOUT"},
		{"huge stream idle timeout", []string{up, "KNEECAP_STREAM_IDLE_TIMEOUT=25h"}, "KNEECAP_STREAM_IDLE_TIMEOUT"},
		{"huge client write timeout", []string{up, "KNEECAP_CLIENT_WRITE_TIMEOUT=25h"}, "KNEECAP_CLIENT_WRITE_TIMEOUT"},
		{"huge upstream idle timeout", []string{up, "KNEECAP_UPSTREAM_IDLE_TIMEOUT=25h"}, "KNEECAP_UPSTREAM_IDLE_TIMEOUT"},
		{"huge client header timeout", []string{up, "KNEECAP_CLIENT_HEADER_TIMEOUT=25h"}, "KNEECAP_CLIENT_HEADER_TIMEOUT"},
		{"huge client read timeout", []string{up, "KNEECAP_CLIENT_READ_TIMEOUT=25h"}, "KNEECAP_CLIENT_READ_TIMEOUT"},
		{"huge client idle timeout", []string{up, "KNEECAP_CLIENT_IDLE_TIMEOUT=25h"}, "KNEECAP_CLIENT_IDLE_TIMEOUT"},
		{"huge drain timeout", []string{up, "KNEECAP_DRAIN_TIMEOUT=25h"}, "KNEECAP_DRAIN_TIMEOUT"},
		{"class with a bad key", []string{up, "KNEECAP_CLASSES=chat:ttft=1s,speed=9"}, "KNEECAP_CLASSES"},
		{"class named twice", []string{up, "KNEECAP_CLASSES=chat;chat"}, "KNEECAP_CLASSES"},
		{"class queue share past 1", []string{up, "KNEECAP_CLASSES=chat;batch:queue=2"}, "KNEECAP_CLASSES"},
		{"class name with a space", []string{up, "KNEECAP_CLASSES=my chat"}, "KNEECAP_CLASSES"},
		{"class wait past 24h", []string{up, "KNEECAP_CLASSES=chat;batch:wait=25h"}, "KNEECAP_CLASSES"},
		{"unknown default class", []string{up, "KNEECAP_CLASSES=chat;batch", "KNEECAP_DEFAULT_CLASS=bulk"}, "KNEECAP_DEFAULT_CLASS"},
		{"tenant of an unknown class", []string{up, "KNEECAP_CLASSES=chat", "KNEECAP_TENANTS=a:class=batch"}, "KNEECAP_TENANTS"},
		{"tenant weight zero", []string{up, "KNEECAP_TENANTS=a:weight=0"}, "KNEECAP_TENANTS"},
		{"bad tenant header", []string{up, "KNEECAP_TENANT_HEADER=x tenant"}, "KNEECAP_TENANT_HEADER"},
		{"negative token weight", []string{up, "KNEECAP_FAIR_OUTPUT_WEIGHT=-1"}, "KNEECAP_FAIR_OUTPUT_WEIGHT"},
		{"huge tenant count", []string{up, "KNEECAP_MAX_TENANTS=2000000"}, "KNEECAP_MAX_TENANTS"},
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
