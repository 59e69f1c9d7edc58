package enginemetrics

import (
	"bufio"
	"errors"
	"math"
	"strings"
	"testing"
)

// vllmBody is shaped as vLLM 0.10's /metrics (v1 engine, one engine).
const vllmBody = `# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12345.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-30B-A3B"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-30B-A3B"} 1.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-30B-A3B"} 0.25
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-30B-A3B"} 0.25
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="Qwen/Qwen3-30B-A3B"} 7.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="Qwen/Qwen3-30B-A3B"} 0.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="Qwen/Qwen3-30B-A3B"} 12.5
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="None",num_gpu_blocks="31250",num_gpu_blocks_override="None",prefix_caching_hash_algo="builtin",sliding_window="None",swap_space="4",swap_space_bytes="4294967296"} 1.0
`

func parseString(t testing.TB, s string) (Reading, error) {
	t.Helper()
	var p parser
	if err := p.parse(bufio.NewReaderSize(strings.NewReader(s), 1024)); err != nil {
		t.Fatalf("parse: %v", err)
	}
	return p.reading()
}

func nan() float64 { return math.NaN() }

func same(a, b float64) bool {
	return a == b || math.IsNaN(a) && math.IsNaN(b) || math.Abs(a-b) < 1e-9*math.Max(1, math.Abs(b))
}

func TestParse(t *testing.T) {
	long := "# " + strings.Repeat("x", 3000) + "\n" // longer than the test reader's 1 KiB buffer
	for _, tc := range []struct {
		name string
		body string
		want Reading
		err  string // "" (ok), "garbled", "invalid"
	}{
		{"vllm", vllmBody, Reading{Engine: "vllm", KVUsage: 0.25, KVCapacity: 500000, KVTokens: 125000, Running: 3, Waiting: 1, Preemptions: 7}, ""},
		{"vllm before 0.10: only the older usage name, no capacity", `vllm:gpu_cache_usage_perc{model_name="m"} 0.5
vllm:num_requests_running{model_name="m"} 2`, Reading{Engine: "vllm", KVUsage: 0.5, KVCapacity: nan(), KVTokens: nan(), Running: 2, Waiting: nan(), Preemptions: nan()}, ""},
		{"vllm, two data-parallel engines: counts summed, ratios averaged", `vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.4
vllm:num_requests_running{engine="0",model_name="m"} 2
vllm:num_requests_running{engine="1",model_name="m"} 5
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="100"} 1
vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="100"} 1
`, Reading{Engine: "vllm", KVUsage: 0.3, KVCapacity: 3200, KVTokens: 960, Running: 7, Waiting: nan(), Preemptions: nan()}, ""},
		{"vllm, blocks not yet known", `vllm:kv_cache_usage_perc{model_name="m"} 0.1
vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1`, Reading{Engine: "vllm", KVUsage: 0.1, KVCapacity: nan(), KVTokens: nan(), Running: nan(), Waiting: nan(), Preemptions: nan()}, ""},
		{"sglang with used tokens and capacity", `# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.28
sglang:num_used_tokens{model_name="m",tp_rank="0"} 28000
sglang:max_total_num_tokens{model_name="m",tp_rank="0"} 100000
sglang:num_running_reqs{model_name="m",tp_rank="0"} 4
sglang:num_queue_reqs{model_name="m",tp_rank="0"} 2
`, Reading{Engine: "sglang", KVUsage: 0.28, KVTokens: 28000, KVCapacity: 100000, Running: 4, Waiting: 2, Preemptions: nan()}, ""},
		{"sglang, usage and capacity only", `sglang:token_usage{model_name="m"} 0.5
sglang:max_total_num_tokens{model_name="m"} 1000`, Reading{Engine: "sglang", KVUsage: 0.5, KVTokens: 500, KVCapacity: 1000, Running: nan(), Waiting: nan(), Preemptions: nan()}, ""},
		{"llama.cpp before #13660", `# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 6886
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.1875
# HELP llamacpp:kv_cache_tokens KV-cache tokens.
# TYPE llamacpp:kv_cache_tokens gauge
llamacpp:kv_cache_tokens 768
llamacpp:requests_processing 2
llamacpp:requests_deferred 0
`, Reading{Engine: "llamacpp", KVUsage: 0.1875, KVTokens: 768, KVCapacity: nan(), Running: 2, Waiting: 0, Preemptions: nan()}, ""},
		{"llama.cpp after #13660: requests only", "llamacpp:prompt_tokens_total 1\nllamacpp:requests_processing 1\nllamacpp:requests_deferred 3\n",
			Reading{Engine: "llamacpp", KVUsage: nan(), KVTokens: nan(), KVCapacity: nan(), Running: 1, Waiting: 3, Preemptions: nan()}, ""},
		{"the first family wins", "llamacpp:kv_cache_tokens 10\nvllm:kv_cache_usage_perc 0.9\n",
			Reading{Engine: "llamacpp", KVUsage: nan(), KVTokens: 10, KVCapacity: nan(), Running: nan(), Waiting: nan(), Preemptions: nan()}, ""},
		{"CRLF, timestamps, tabs, escapes in labels, long comment lines", long + "vllm:kv_cache_usage_perc{model_name=\"a \\\"b\\\" \\\\ c}\"} 0.5 1712345678000\r\n" + long +
			"\tvllm:num_requests_running{model_name=\"x\",} 1\r\n",
			Reading{Engine: "vllm", KVUsage: 0.5, KVTokens: nan(), KVCapacity: nan(), Running: 1, Waiting: nan(), Preemptions: nan()}, ""},
		{"a rejected series makes its field unknown", `vllm:kv_cache_usage_perc{engine="0"} 0.5
vllm:kv_cache_usage_perc{engine="1"} NaN
vllm:num_requests_running 2`, Reading{Engine: "vllm", KVUsage: nan(), KVTokens: nan(), KVCapacity: nan(), Running: 2, Waiting: nan(), Preemptions: nan()}, ""},
		{"out of range", "llamacpp:kv_cache_usage_ratio 1.5\nllamacpp:kv_cache_tokens -3\nllamacpp:requests_processing +Inf\nllamacpp:requests_deferred 1e300\n",
			Reading{Engine: "llamacpp", KVUsage: nan(), KVTokens: nan(), KVCapacity: nan(), Running: nan(), Waiting: nan(), Preemptions: nan()}, "invalid"},
		{"all NaN", "vllm:kv_cache_usage_perc NaN\nvllm:num_requests_running NaN\nvllm:num_requests_waiting Nan\n",
			Reading{Engine: "vllm", KVUsage: nan(), KVTokens: nan(), KVCapacity: nan(), Running: nan(), Waiting: nan(), Preemptions: nan()}, "invalid"},
		{"known family, nothing read", "vllm:prompt_tokens_total 5\n",
			Reading{Engine: "vllm", KVUsage: nan(), KVTokens: nan(), KVCapacity: nan(), Running: nan(), Waiting: nan(), Preemptions: nan()}, "invalid"},
		{"garbage", "\x00\xff<html>hello</html>\n{}\n vllm\n:kv 1\n", Reading{KVUsage: nan(), KVTokens: nan(), KVCapacity: nan(), Running: nan(), Waiting: nan(), Preemptions: nan()}, "garbled"},
		{"empty", "", Reading{KVUsage: nan(), KVTokens: nan(), KVCapacity: nan(), Running: nan(), Waiting: nan(), Preemptions: nan()}, "garbled"},
		{"malformed lines are skipped", "vllm:kv_cache_usage_perc{model_name=\"x 0.5\nvllm:kv_cache_usage_perc{=} 0.5\nvllm:kv_cache_usage_perc zero\nvllm:num_requests_waiting{a=\"b\"} 4\n",
			Reading{Engine: "vllm", KVUsage: nan(), KVTokens: nan(), KVCapacity: nan(), Running: nan(), Waiting: 4, Preemptions: nan()}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := parseString(t, tc.body)
			switch tc.err {
			case "":
				if err != nil {
					t.Fatalf("error %v", err)
				}
			case "garbled":
				if !errors.Is(err, errGarbled) {
					t.Fatalf("error %v, want garbled", err)
				}
			case "invalid":
				var ie *invalidError
				if !errors.As(err, &ie) {
					t.Fatalf("error %v, want invalid", err)
				}
			}
			w := tc.want
			if r.Engine != w.Engine || !same(r.KVUsage, w.KVUsage) || !same(r.KVTokens, w.KVTokens) || !same(r.KVCapacity, w.KVCapacity) ||
				!same(r.Running, w.Running) || !same(r.Waiting, w.Waiting) || !same(r.Preemptions, w.Preemptions) {
				t.Errorf("got  %+v\nwant %+v", r, w)
			}
		})
	}
}

// FuzzParse feeds the parser anything: it must not panic, and what it
// returns must be within the documented ranges.
func FuzzParse(f *testing.F) {
	f.Add([]byte(vllmBody))
	f.Add([]byte("llamacpp:kv_cache_usage_ratio 0.5\nllamacpp:kv_cache_tokens 10\n"))
	f.Add([]byte("sglang:token_usage{a=\"\\\"\"} 0.5\nsglang:max_total_num_tokens 1e3\n"))
	f.Add([]byte("vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"9\"} 1\nvllm:kv_cache_usage_perc NaN\n"))
	f.Add([]byte("\x00{}\n\n#\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var p parser
		if err := p.parse(bufio.NewReaderSize(strings.NewReader(string(data)), 16)); err != nil {
			t.Fatalf("parse of an in-memory body: %v", err)
		}
		r, err := p.reading()
		if err == nil && r.Engine == "" {
			t.Fatal("a reading without an engine")
		}
		for name, v := range map[string]float64{"usage": r.KVUsage, "tokens": r.KVTokens, "capacity": r.KVCapacity,
			"running": r.Running, "waiting": r.Waiting, "preemptions": r.Preemptions} {
			if !math.IsNaN(v) && (v < 0 || math.IsInf(v, 0) || v > maxCount*(1<<41)) {
				t.Fatalf("%s = %v", name, v)
			}
		}
		if !math.IsNaN(r.KVUsage) && r.KVUsage > 1 {
			t.Fatalf("usage %v", r.KVUsage)
		}
	})
}

// BenchmarkParseVLLM is the cost of reading one vLLM-sized exposition.
func BenchmarkParseVLLM(b *testing.B) {
	body := strings.Repeat(vllmBody, 20) // about 50 KiB, as a loaded vLLM's
	br := bufio.NewReaderSize(nil, lineBuffer)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var p parser
		br.Reset(strings.NewReader(body))
		if err := p.parse(br); err != nil {
			b.Fatal(err)
		}
		if _, err := p.reading(); err != nil {
			b.Fatal(err)
		}
	}
}
