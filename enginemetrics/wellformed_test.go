package enginemetrics

import "testing"

// TestWellFormed: the lines an engine writes pass; garbage, and lines the
// picker's parser would reject, do not.
func TestWellFormed(t *testing.T) {
	for _, tc := range []struct {
		line string
		ok   bool
	}{
		{"\n", true},
		{"# HELP vllm:num_requests_running Number of requests in model execution batches.\n", true},
		{"# TYPE vllm:num_requests_running gauge\n", true},
		{"vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n", true},
		{"vllm:kv_cache_usage_perc{model_name=\"a \\\"b\\\" \\\\ c\\n\",} NaN 1700000000000\n", true},
		{"vllm:e2e_request_latency_seconds_bucket{le=\"+Inf\"} +Inf\n", true},
		{"llamacpp:requests_processing 2\r\n", true},
		{"# a comment of the engine's own\n", false},
		{"# TYPE vllm:x gauge extra\n", false},
		{"# TYPE vllm:x gauges\n", false},
		{"\x93\xff\x01garbage\n", false},
		{"9vllm:x 1\n", false},
		{"vllm-x 1\n", false},
		{"vllm:x{a=\"b} 1\n", false},
		{"vllm:x{a=b} 1\n", false},
		{"vllm:x{a:b=\"c\"} 1\n", false},
		{"vllm:x{a=\"\\q\"} 1\n", false},
		{"vllm:x one\n", false},
		{"vllm:x 1 2.5\n", false},
		{"vllm:x\n", false},
		{"vllm:x 1 2 3\n", false},
	} {
		if got := WellFormed([]byte(tc.line)); got != tc.ok {
			t.Errorf("WellFormed(%q) = %v, want %v", tc.line, got, tc.ok)
		}
	}
}
