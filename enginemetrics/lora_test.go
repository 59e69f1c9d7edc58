package enginemetrics

import (
	"bufio"
	"strings"
	"testing"
)

// TestParseLoRA: vLLM's vllm:lora_requests_info is kept as it was written
// last (the series with the highest value, vLLM's timestamp), and the cache
// geometry beside it.
func TestParseLoRA(t *testing.T) {
	body := vllmBody + `# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""} 1.7000000e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql-lora,tweet",waiting_lora_adapters="chat"} 1.7000005e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="old",waiting_lora_adapters=""} 1.6999999e+09
`
	r, err := parseString(t, body)
	if err != nil {
		t.Fatal(err)
	}
	want := LoRA{Running: "sql-lora,tweet", Waiting: "chat", MaxLoRA: 2, At: 1.7000005e+09}
	if r.LoRA == nil || *r.LoRA != want {
		t.Fatalf("LoRA = %+v, want %+v", r.LoRA, want)
	}
	if r.BlockSize != 16 || r.Blocks != 31250 {
		t.Fatalf("geometry = %v x %v, want 16 x 31250", r.BlockSize, r.Blocks)
	}

	r, err = parseString(t, vllmBody)
	if err != nil || r.LoRA != nil {
		t.Fatalf("without the series: LoRA = %+v, err %v", r.LoRA, err)
	}
	r, err = parseString(t, "sglang:num_queue_reqs 1\n")
	if err != nil || r.LoRA != nil || !same(r.BlockSize, nan()) {
		t.Fatalf("sglang: LoRA = %+v, block size %v, err %v", r.LoRA, r.BlockSize, err)
	}

	long := strings.Repeat("a,", maxLoRALabel) // longer than kept
	var p parser
	if err := p.parse(bufio.NewReaderSize(strings.NewReader(`vllm:num_requests_running 1
vllm:lora_requests_info{max_lora="x",running_lora_adapters="`+long+`"} 1
`), lineBuffer)); err != nil {
		t.Fatal(err)
	}
	if r, err = p.reading(); err != nil || r.LoRA == nil {
		t.Fatalf("a long list: %+v, %v", r.LoRA, err)
	}
	if len(r.LoRA.Running) > maxLoRALabel || !strings.HasPrefix(long, r.LoRA.Running+",") || r.LoRA.MaxLoRA != -1 {
		t.Fatalf("a long list: %d bytes kept, max %d", len(r.LoRA.Running), r.LoRA.MaxLoRA)
	}
}
