package epp

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"

	configapi "sigs.k8s.io/gateway-api-inference-extension/apix/config/v1alpha1"
	legacy "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/backend/metrics"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	framework "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	extractormetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/extractor/metrics"
	sourcemetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/source/metrics"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/queuedepth"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/server"
)

// reader is one way the picker reads a pod's metrics into its endpoint.
type reader struct {
	name string
	// host is where it scrapes a pod: the admin port (--model-server-
	// metrics-port of epp.yaml) or the traffic port (the pool's target
	// port, a picker left at its defaults).
	host func(*pod) string
	// labels are the pod's labels as the picker sees them.
	labels map[string]string
	// refresh scrapes the pod once into ep.
	refresh func(ctx context.Context, t *testing.T, ep fwkdl.Endpoint)
}

// TestPickerReadsKneecap: three live pods of the example pool (kneecap as
// pool.yaml sets it, a cap of 1 so that two requests make a queue): one
// whose kneecap queues five requests, one idle, one whose kneecap refuses.
// Read the three ways a picker is configured to read them (epp.yaml's
// engine config, epp-flags.yaml's flags, the defaults against
// KNEECAP_EPP_METRICS=vllm), the queuing pod reads as waiting five, the
// idle one as waiting none, the refusing one as saturated; the picker's
// queue scorer prefers the idle pod, and its utilization detector filters
// the other two out and counts them in the pool's saturation.
func TestPickerReadsKneecap(t *testing.T) {
	ex := loadExample(t)
	d := one[appsv1.Deployment](t, ex, "pool.yaml")
	podLabels := d.Spec.Template.Labels
	var env []string
	for _, e := range container(t, d.Spec.Template.Spec, "kneecap").Env {
		if e.Name != "KNEECAP_UPSTREAM" {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	// A cap of 1 with no refusal for a predicted deadline miss, streams
	// that run until the test ends, a short drain, and the traffic port in
	// vLLM's names for the picker at its defaults.
	env = append(env, "KNEECAP_MAX_CONCURRENCY=1", "KNEECAP_SLO_TTFT=10m", "KNEECAP_SLO_TPOT=10s",
		"KNEECAP_DRAIN_TIMEOUT=1s", "KNEECAP_EPP_METRICS=vllm")
	queuing := startPod(t, "queuing", env...)
	idle := startPod(t, "idle", env...)
	refusing := startPod(t, "refusing", append(env, "KNEECAP_MAX_QUEUE=0")...)

	queuing.send(6, "queue", nil)
	queuing.waitQueued(t, 5)
	refusing.send(1, "hold", nil)
	for deadline := time.Now().Add(30 * time.Second); refusing.g.Limiter().State().Running < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the refusing pod runs nothing after 30 s")
		}
	}
	stopRefusals := refuseAll(t, refusing)
	defer stopRefusals()
	queuing.waitEngine(t, 1)
	idle.waitEngine(t, 0)
	refusing.waitEngine(t, 1)

	ctx := context.Background()
	handle := fwkplugin.NewEppHandle(ctx, func() []types.NamespacedName { return nil })
	cfg := pickerConfig(t, ex)
	flags := pickerFlags(t, one[appsv1.Deployment](t, ex, "epp-flags.yaml"))
	readers := []reader{
		configured(t, cfg, handle, podLabels),
		flagged(t, flags, podLabels),
		defaults(t, handle),
	}
	detector := detectorFrom(t, cfg, handle)
	scorer := queuedepth.NewQueueScorer()

	for _, r := range readers {
		t.Run(r.name, func(t *testing.T) {
			eps := map[*pod]fwkdl.Endpoint{}
			for _, p := range []*pod{queuing, idle, refusing} {
				_, trafficPort, _ := net.SplitHostPort(p.traffic)
				ep := fwkdl.NewEndpoint(&fwkdl.EndpointMetadata{
					NamespacedName: types.NamespacedName{Namespace: "default", Name: p.name},
					PodName:        p.name, Address: "127.0.0.1", Port: trafficPort,
					MetricsHost: r.host(p), Labels: r.labels,
				}, nil)
				r.refresh(ctx, t, ep)
				eps[p] = ep
			}
			q, i, f := eps[queuing].GetMetrics(), eps[idle].GetMetrics(), eps[refusing].GetMetrics()
			if q.WaitingQueueSize != 5 || q.RunningRequestsSize != 1 {
				t.Errorf("the queuing pod reads waiting %d, running %d; want 5 (kneecap's queue), 1", q.WaitingQueueSize, q.RunningRequestsSize)
			}
			if i.WaitingQueueSize != 0 || i.RunningRequestsSize != 0 {
				t.Errorf("the idle pod reads waiting %d, running %d; want 0, 0", i.WaitingQueueSize, i.RunningRequestsSize)
			}
			if f.WaitingQueueSize < 5 {
				t.Errorf("the refusing pod reads waiting %d, want at least 5 (KNEECAP_EPP_SATURATED_WAITING)", f.WaitingQueueSize)
			}

			var cands []framework.Endpoint
			for _, p := range []*pod{queuing, idle, refusing} {
				cands = append(cands, framework.NewEndpoint(eps[p].GetMetadata(), eps[p].GetMetrics(), nil))
			}
			scores := scorer.Score(ctx, nil, nil, cands)
			if !(scores[cands[1]] > scores[cands[0]] && scores[cands[1]] > scores[cands[2]]) {
				t.Errorf("queue scores: queuing %.2f, idle %.2f, refusing %.2f; want the idle pod first", scores[cands[0]], scores[cands[1]], scores[cands[2]])
			}
			kept := detector.Filter(ctx, nil, nil, cands)
			if len(kept) != 1 || kept[0].GetMetadata().PodName != idle.name {
				var names []string
				for _, k := range kept {
					names = append(names, k.GetMetadata().PodName)
				}
				t.Errorf("the utilization detector keeps %v, want only the idle pod", names)
			}
			all := []fwkdl.Endpoint{eps[queuing], eps[idle], eps[refusing]}
			if s := detector.Saturation(ctx, all); s < 2.0/3 {
				t.Errorf("pool saturation %.2f, want at least 2/3 (two of three pods full)", s)
			}
		})
	}
}

// refuseAll keeps the refusing pod refusing: a new request every 100 ms (at
// most 600), each with a body of its own, until stop; it waits for the
// first refusal before it returns.
func refuseAll(t *testing.T, p *pod) (stop func()) {
	t.Helper()
	status := make(chan int, 1024)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for n := 0; n < 600; n++ {
			p.send(1, fmt.Sprintf("refused %d", n), status)
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	for deadline := time.After(30 * time.Second); ; {
		select {
		case s := <-status:
			if s == http.StatusTooManyRequests {
				return func() { close(done); wg.Wait() }
			}
			if s != http.StatusOK {
				t.Fatalf("the refusing pod answered %d", s)
			}
		case <-deadline:
			t.Fatal("no refusal within 30 s")
		}
	}
}

// pluginSpec is the plugin of type typ in the picker's configuration.
func pluginSpec(t *testing.T, cfg *configapi.EndpointPickerConfig, typ string) configapi.PluginSpec {
	t.Helper()
	for _, p := range cfg.Plugins {
		if p.Type == typ {
			return p
		}
	}
	t.Fatalf("epp.yaml's configuration has no %s plugin", typ)
	return configapi.PluginSpec{}
}

// configured reads as epp.yaml's picker: its metrics data source and core
// metrics extractor, built by the picker's factories from its
// configuration's parameters, scraping kneecap's admin port.
func configured(t *testing.T, cfg *configapi.EndpointPickerConfig, handle fwkplugin.Handle, podLabels map[string]string) reader {
	t.Helper()
	srcSpec, extSpec := pluginSpec(t, cfg, sourcemetrics.MetricsDataSourceType), pluginSpec(t, cfg, extractormetrics.MetricsExtractorType)
	src, err := sourcemetrics.MetricsDataSourceFactory(srcSpec.Name, srcSpec.Parameters, handle)
	if err != nil {
		t.Fatal(err)
	}
	ext, err := extractormetrics.CoreMetricsExtractorFactory(extSpec.Name, extSpec.Parameters, handle)
	if err != nil {
		t.Fatal(err)
	}
	return pollingReader("engineConfigs", func(p *pod) string { return p.admin }, podLabels,
		src.(fwkdl.PollingDataSource), ext.(fwkdl.Extractor))
}

// defaults reads as a picker left at its defaults: the default data source
// (/metrics) and extractor (vLLM's names) on the pool's target port,
// kneecap's traffic port, for pods without an engine label.
func defaults(t *testing.T, handle fwkplugin.Handle) reader {
	t.Helper()
	src, err := sourcemetrics.MetricsDataSourceFactory(sourcemetrics.MetricsDataSourceType, nil, handle)
	if err != nil {
		t.Fatal(err)
	}
	ext, err := extractormetrics.CoreMetricsExtractorFactory(extractormetrics.MetricsExtractorType, nil, handle)
	if err != nil {
		t.Fatal(err)
	}
	return pollingReader("defaults", func(p *pod) string { return p.traffic }, nil,
		src.(fwkdl.PollingDataSource), ext.(fwkdl.Extractor))
}

func pollingReader(name string, host func(*pod) string, labels map[string]string, src fwkdl.PollingDataSource, ext fwkdl.Extractor) reader {
	return reader{name: name, host: host, labels: labels, refresh: func(ctx context.Context, t *testing.T, ep fwkdl.Endpoint) {
		t.Helper()
		data, err := src.Poll(ctx, ep)
		if err != nil {
			t.Fatalf("%s: the picker's data source: %v", ep.GetMetadata().PodName, err)
		}
		// The extractor reports the series it did not find (the
		// simulator publishes no LoRA info) and keeps the others.
		if err := ext.Extract(ctx, data, ep); err != nil && !strings.Contains(err.Error(), "lora") {
			t.Errorf("%s: the picker's extractor: %v", ep.GetMetadata().PodName, err)
		}
		if ep.GetMetrics().UpdateTime.IsZero() {
			t.Fatalf("%s: the picker's extractor read nothing", ep.GetMetadata().PodName)
		}
	}}
}

// flagged reads as epp-flags.yaml's picker: the legacy metrics client,
// configured by that Deployment's flags, scraping kneecap's admin port.
func flagged(t *testing.T, o *server.Options, podLabels map[string]string) reader {
	t.Helper()
	client, err := legacy.NewPodMetricsClientImpl(logr.Discard(), legacy.Config{
		ModelServerMetricsScheme: o.ModelServerMetricsScheme, ModelServerMetricsHTTPSInsecure: o.ModelServerMetricsHTTPSInsecure,
		ModelServerMetricsPath:    o.ModelServerMetricsPath,
		TotalQueuedRequestsMetric: o.TotalQueuedRequestsMetric, TotalRunningRequestsMetric: o.TotalRunningRequestsMetric,
		KVCacheUsagePercentageMetric: o.KVCacheUsagePercentageMetric, LoRAInfoMetric: o.LoRAInfoMetric, CacheInfoMetric: o.CacheInfoMetric,
	})
	if err != nil {
		t.Fatal(err)
	}
	return reader{name: "flags", host: func(p *pod) string { return p.admin }, labels: podLabels,
		refresh: func(ctx context.Context, t *testing.T, ep fwkdl.Endpoint) {
			t.Helper()
			m, err := client.FetchMetrics(ctx, ep.GetMetadata(), fwkdl.NewMetrics())
			if err != nil && !strings.Contains(err.Error(), "lora") {
				t.Errorf("%s: the picker's legacy client: %v", ep.GetMetadata().PodName, err)
			}
			if m == nil {
				t.Fatalf("%s: the picker's legacy client read nothing", ep.GetMetadata().PodName)
			}
			m.UpdateTime = time.Now() // as the legacy refresher's UpdateMetrics stamps it
			ep.UpdateMetrics(m)
		}}
}

// detectorFrom builds epp.yaml's saturation detector with the picker's
// factory.
func detectorFrom(t *testing.T, cfg *configapi.EndpointPickerConfig, handle fwkplugin.Handle) *utilization.Detector {
	t.Helper()
	if cfg.SaturationDetector == nil {
		t.Fatal("epp.yaml's configuration names no saturation detector")
	}
	var spec *configapi.PluginSpec
	for i := range cfg.Plugins {
		if cfg.Plugins[i].Name == cfg.SaturationDetector.PluginRef {
			spec = &cfg.Plugins[i]
		}
	}
	if spec == nil || spec.Type != utilization.UtilizationDetectorType {
		t.Fatalf("the saturation detector %q is not a %s plugin", cfg.SaturationDetector.PluginRef, utilization.UtilizationDetectorType)
	}
	p, err := utilization.UtilizationDetectorFactory(spec.Name, spec.Parameters, handle)
	if err != nil {
		t.Fatal(err)
	}
	return p.(*utilization.Detector)
}
