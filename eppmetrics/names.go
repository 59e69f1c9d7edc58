package eppmetrics

import "fmt"

// Names are the metric names of one engine family as the endpoint picker
// reads them (its engineConfigs: queuedRequestsSpec, runningRequestsSpec,
// kvUsageSpec), the ones kneecap writes on the traffic port's /metrics
// when asked to speak for the engine.
type Names struct {
	// Family is the name's prefix and the setting's value: vllm, sglang.
	Family string
	// Waiting and Running replace the engine's own series of those names.
	Waiting, Running string
	// KVUsage (and KVUsageOld, an older alias, when set) are the engine's
	// own, passed through; kneecap writes them from its reading only when
	// the engine's body has none (another engine family).
	KVUsage, KVUsageOld string
}

// The families an endpoint picker has defaults for.
var (
	// VLLM is vLLM's names, the endpoint picker's defaults; the older
	// KV name is what its releases before engineConfigs read.
	VLLM = Names{Family: "vllm", Waiting: "vllm:num_requests_waiting", Running: "vllm:num_requests_running",
		KVUsage: "vllm:kv_cache_usage_perc", KVUsageOld: "vllm:gpu_cache_usage_perc"}
	// SGLang is SGLang's names, the picker's "sglang" engine config.
	SGLang = Names{Family: "sglang", Waiting: "sglang:num_queue_reqs", Running: "sglang:num_running_reqs",
		KVUsage: "sglang:token_usage"}
)

// NamesFor returns the names of a family by its setting's value.
func NamesFor(family string) (Names, error) {
	switch family {
	case VLLM.Family:
		return VLLM, nil
	case SGLang.Family:
		return SGLang, nil
	}
	return Names{}, fmt.Errorf("unknown engine family %q (want vllm or sglang)", family)
}
