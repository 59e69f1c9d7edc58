package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestServeBadEnvExits2(t *testing.T) {
	tests := []struct {
		name, key, value, wantVar string
	}{
		{"bad duration", "KNEECAP_SLO_TTFT", "fast", "KNEECAP_SLO_TTFT"},
		{"bad cap", "KNEECAP_MAX_CONCURRENCY", "-3", "KNEECAP_MAX_CONCURRENCY"},
		{"missing upstream", "KNEECAP_UPSTREAM", "", "KNEECAP_UPSTREAM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KNEECAP_UPSTREAM", "http://127.0.0.1:1")
			t.Setenv(tt.key, tt.value)
			var out, errb bytes.Buffer
			code := run(context.Background(), []string{"serve"}, &out, &errb)
			lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
			if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], tt.wantVar) {
				t.Fatalf("exit %d, stderr %q; want exit 2 and one line naming %s", code, errb.String(), tt.wantVar)
			}
		})
	}
}

func TestServeRejectsArguments(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"serve", "extra"}, &out, &errb); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
}
