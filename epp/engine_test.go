package epp

import (
	"context"
	"net/http"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
)

// loraEngine is a vLLM engine with LoRA on, as its /metrics shows it.
const loraEngine = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="4",running_lora_adapters="",waiting_lora_adapters=""} 1.7e+09
vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql-lora,tweet",waiting_lora_adapters="chat"} 1.7000001e+09
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1000"} 1.0
`

// TestPickerReadsEngineThroughKneecap: what kneecap passes on of the
// engine's own metrics (its KV usage, its LoRA adapters, its cache
// geometry) reaches the picker's reading, the three ways it reads a pod.
func TestPickerReadsEngineThroughKneecap(t *testing.T) {
	ex := loadExample(t)
	d := one[appsv1.Deployment](t, ex, "pool.yaml")
	engine := http.NewServeMux()
	engine.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	engine.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(loraEngine))
	})
	p := startKneecap(t, "lora", engine, "KNEECAP_EPP_METRICS=vllm")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := p.g.EngineMetrics().Latest(); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("kneecap has no reading of the engine after 30 s")
		}
	}

	ctx := context.Background()
	handle := fwkplugin.NewEppHandle(ctx, func() []types.NamespacedName { return nil })
	cfg := pickerConfig(t, ex)
	for _, r := range []reader{
		configured(t, cfg, handle, d.Spec.Template.Labels),
		flagged(t, pickerFlags(t, one[appsv1.Deployment](t, ex, "epp-flags.yaml")), d.Spec.Template.Labels),
		defaults(t, handle),
	} {
		t.Run(r.name, func(t *testing.T) {
			ep := fwkdl.NewEndpoint(&fwkdl.EndpointMetadata{
				NamespacedName: types.NamespacedName{Namespace: "default", Name: p.name},
				PodName:        p.name, Address: "127.0.0.1", MetricsHost: r.host(p), Labels: r.labels,
			}, nil)
			r.refresh(ctx, t, ep)
			m := ep.GetMetrics()
			if m.KVCacheUsagePercent != 0.42 {
				t.Errorf("KV usage %v, want the engine's 0.42", m.KVCacheUsagePercent)
			}
			_, sql := m.ActiveModels["sql-lora"]
			_, tweet := m.ActiveModels["tweet"]
			_, chat := m.WaitingModels["chat"]
			if len(m.ActiveModels) != 2 || !sql || !tweet || len(m.WaitingModels) != 1 || !chat || m.MaxActiveModels != 4 {
				t.Errorf("LoRA: active %v, waiting %v, max %d; want the engine's newest series (sql-lora,tweet; chat; 4)", m.ActiveModels, m.WaitingModels, m.MaxActiveModels)
			}
			if m.CacheBlockSize != 16 || m.CacheNumBlocks != 1000 {
				t.Errorf("cache geometry %d x %d, want 16 x 1000", m.CacheBlockSize, m.CacheNumBlocks)
			}
		})
	}
}
