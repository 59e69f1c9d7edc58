package gateway

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kneecap/kneecap/slo"
)

// TestGenAIMetrics: the conventions' three server histograms, named as
// OpenTelemetry's Prometheus exporter names them, with the advised
// buckets, fed from records: TTFT and TPOT of completed requests, the
// duration of every request with error_type for the failed ones; a model
// becomes a label value only once served, and at most maxModelLabels do.
func TestGenAIMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newGenAIMetrics(reg)
	now := time.Now()
	good := slo.Record{Route: "chat", Model: "qwen", Streamed: true, Arrival: now.Add(-2 * time.Second),
		TTFT: 300 * time.Millisecond, E2E: 1300 * time.Millisecond, OutputTokens: 11, OutputChunks: 11}
	m.Done(good)
	m.Done(slo.Record{Route: "completions", Model: "never-served", Arrival: now, Outcome: slo.Rejected, Reason: "queue_full"})
	m.Done(slo.Record{Route: "chat", Model: "qwen", Arrival: now, Outcome: slo.EngineError, Reason: "first_token_timeout"})

	want := `
# HELP gen_ai_server_time_per_output_token_seconds Time per output token generated after the first token for successful responses (OpenTelemetry GenAI conventions): (E2E - TTFT) / (output_tokens - 1), as kneecap_tpot_seconds.
# TYPE gen_ai_server_time_per_output_token_seconds histogram
gen_ai_server_time_per_output_token_seconds_bucket{gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="qwen",le="0.01"} 0
gen_ai_server_time_per_output_token_seconds_bucket{gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="qwen",le="0.025"} 0
gen_ai_server_time_per_output_token_seconds_bucket{gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="qwen",le="0.05"} 0
gen_ai_server_time_per_output_token_seconds_bucket{gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="qwen",le="0.075"} 0
gen_ai_server_time_per_output_token_seconds_bucket{gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="qwen",le="0.1"} 1
gen_ai_server_time_per_output_token_seconds_bucket{gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="qwen",le="0.15"} 1
gen_ai_server_time_per_output_token_seconds_bucket{gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="qwen",le="0.2"} 1
gen_ai_server_time_per_output_token_seconds_bucket{gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="qwen",le="0.3"} 1
gen_ai_server_time_per_output_token_seconds_bucket{gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="qwen",le="0.4"} 1
gen_ai_server_time_per_output_token_seconds_bucket{gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="qwen",le="0.5"} 1
gen_ai_server_time_per_output_token_seconds_bucket{gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="qwen",le="0.75"} 1
gen_ai_server_time_per_output_token_seconds_bucket{gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="qwen",le="1"} 1
gen_ai_server_time_per_output_token_seconds_bucket{gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="qwen",le="2.5"} 1
gen_ai_server_time_per_output_token_seconds_bucket{gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="qwen",le="+Inf"} 1
gen_ai_server_time_per_output_token_seconds_sum{gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="qwen"} 0.1
gen_ai_server_time_per_output_token_seconds_count{gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="qwen"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "gen_ai_server_time_per_output_token_seconds"); err != nil {
		t.Error(err)
	}
	n := testutil.CollectAndCount(m.ttft)
	if n != 1 {
		t.Errorf("%d TTFT series, want 1 (completed requests only)", n)
	}
	mfs, _ := reg.Gather()
	var series []string
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			var ls []string
			for _, l := range mt.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			series = append(series, mf.GetName()+"{"+strings.Join(ls, ",")+"}")
			if mf.GetName() == "gen_ai_server_time_to_first_token_seconds" {
				var bounds []float64
				for _, b := range mt.GetHistogram().GetBucket() {
					bounds = append(bounds, b.GetUpperBound())
				}
				if !slices.Equal(bounds, genaiTTFTBuckets) {
					t.Errorf("TTFT buckets %v", bounds)
				}
			}
		}
	}
	for _, s := range []string{
		"gen_ai_server_request_duration_seconds{error_type=,gen_ai_operation_name=chat,gen_ai_provider_name=openai,gen_ai_request_model=qwen}",
		"gen_ai_server_request_duration_seconds{error_type=queue_full,gen_ai_operation_name=text_completion,gen_ai_provider_name=openai,gen_ai_request_model=_OTHER}",
		"gen_ai_server_request_duration_seconds{error_type=first_token_timeout,gen_ai_operation_name=chat,gen_ai_provider_name=openai,gen_ai_request_model=qwen}",
	} {
		if !slices.Contains(series, s) {
			t.Errorf("no series %s in\n%s", s, strings.Join(series, "\n"))
		}
	}

	// A client inventing model names: at most maxModelLabels values.
	for i := range 3 * maxModelLabels {
		r := good
		r.Model = fmt.Sprint("m", i)
		m.Done(r)
	}
	if n := testutil.CollectAndCount(m.ttft); n != maxModelLabels+1 {
		t.Errorf("%d TTFT series after %d models, want %d and _OTHER", n, 3*maxModelLabels, maxModelLabels)
	}
	if got := len(m.series); got > 2*maxModelLabels+4 {
		t.Errorf("%d cached series", got)
	}
}
