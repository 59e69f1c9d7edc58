package eppmetrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// The kneecap-named series of the view, on the admin port's /metrics and
// alone on its /metrics/epp: the names an endpoint picker's configuration
// points at (docs/fleet.md).
const (
	MetricWaiting   = "kneecap_epp_requests_waiting"
	MetricRunning   = "kneecap_epp_requests_running"
	MetricSaturated = "kneecap_epp_saturated"
	MetricKVUsage   = "kneecap_epp_kv_cache_usage_ratio"
	MetricLoRA      = "kneecap_engine_lora_requests_info"
	MetricCacheInfo = "kneecap_engine_cache_config_info"
)

// MetricNames lists the series the Collector exports, those present only
// with a fresh engine reading included.
func MetricNames() []string {
	return []string{MetricWaiting, MetricRunning, MetricSaturated, MetricKVUsage, MetricLoRA, MetricCacheInfo}
}

var (
	descWaiting = prometheus.NewDesc(MetricWaiting,
		"Requests the pod holds that no engine slot serves yet, as the endpoint picker reads waiting: kneecap's queue + the engine's own waiting + refused requests expected back; at least KNEECAP_EPP_SATURATED_WAITING while saturated.", nil, nil)
	descRunning = prometheus.NewDesc(MetricRunning,
		"Requests the engine runs: those holding a kneecap slot, less the engine's own waiting.", nil, nil)
	descSaturated = prometheus.NewDesc(MetricSaturated,
		"1 while kneecap refuses requests (refused requests expected back) or drains: the pod is full, not broken; 0 otherwise.", nil, nil)
	descKVUsage = prometheus.NewDesc(MetricKVUsage,
		"The engine's KV-cache usage, 0 to 1, as it publishes it (the same as kneecap_engine_kv_usage_ratio, here too for the picker's own path, /metrics/epp); absent when unknown or stale.", nil, nil)
	descLoRA = prometheus.NewDesc(MetricLoRA,
		"The engine's vllm:lora_requests_info as it last published it (value: when it wrote it); absent when unknown or stale.",
		[]string{"running_lora_adapters", "waiting_lora_adapters", "max_lora"}, nil)
	descCacheInfo = prometheus.NewDesc(MetricCacheInfo,
		"The engine's KV-cache geometry (vLLM's vllm:cache_config_info labels block_size and num_gpu_blocks); absent when unknown or stale.",
		[]string{"block_size", "num_gpu_blocks"}, nil)
)

// Collector returns the view as a prometheus.Collector of the kneecap-named
// series, read at collection time.
func (v *View) Collector() prometheus.Collector { return collector{v} }

type collector struct{ v *View }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descWaiting, descRunning, descSaturated, descKVUsage, descLoRA, descCacheInfo} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	n := c.v.Read()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descWaiting, float64(n.Waiting))
	gauge(descRunning, float64(n.Running))
	sat := 0.0
	if n.Saturated {
		sat = 1
	}
	gauge(descSaturated, sat)
	if u, ok := n.KVUsage(); ok {
		gauge(descKVUsage, u)
	}
	if l := n.LoRA(); l != nil {
		gauge(descLoRA, l.At, l.Running, l.Waiting, maxLoRA(l.MaxLoRA))
	}
	if bs, nb, ok := n.Geometry(); ok {
		gauge(descCacheInfo, 1, strconv.Itoa(bs), strconv.Itoa(nb))
	}
}

// maxLoRA writes max_lora as vLLM does; empty when unknown.
func maxLoRA(n int) string {
	if n < 0 {
		return ""
	}
	return strconv.Itoa(n)
}
