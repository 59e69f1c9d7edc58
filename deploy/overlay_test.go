package deploy

import (
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// overlays are the deployable kustomizations and the engine each runs.
var overlays = []struct {
	dir    string
	engine string // image repository of the engine
	keda   bool
}{
	{"vllm", "vllm/vllm-openai", false},
	{"sglang", "lmsysorg/sglang", false},
	{"llamacpp", "ghcr.io/ggml-org/llama.cpp", false},
	{"vllm-keda", "vllm/vllm-openai", true},
}

// rendered is one overlay as `kubectl kustomize` renders it.
type rendered struct {
	deployment *appsv1.Deployment
	service    *corev1.Service
	pdb        *policyv1.PodDisruptionBudget
	monitor    *monitoringv1.ServiceMonitor
	rule       *monitoringv1.PrometheusRule
	hpa        *autoscalingv2.HorizontalPodAutoscaler
	scaled     *scaledObject
}

func render(t *testing.T, dir string) rendered {
	t.Helper()
	kubectl := lookTool(t, "kubectl", "kubectl (it ships kustomize)")
	cmd := exec.Command(kubectl, "kustomize", filepath.Join("deploy", "kubernetes", "overlays", dir))
	cmd.Dir = repoRoot(t)
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, ee.Stderr)
		}
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	var r rendered
	for i, doc := range yamlDocs(out) {
		obj, err := decodeStrict(doc)
		if err != nil {
			t.Fatalf("%s, rendered document %d: %v", dir, i+1, err)
		}
		switch o := obj.(type) {
		case *appsv1.Deployment:
			setOnce(t, &r.deployment, o)
		case *corev1.Service:
			setOnce(t, &r.service, o)
		case *policyv1.PodDisruptionBudget:
			setOnce(t, &r.pdb, o)
		case *monitoringv1.ServiceMonitor:
			setOnce(t, &r.monitor, o)
		case *monitoringv1.PrometheusRule:
			setOnce(t, &r.rule, o)
		case *autoscalingv2.HorizontalPodAutoscaler:
			setOnce(t, &r.hpa, o)
		case *scaledObject:
			setOnce(t, &r.scaled, o)
		default:
			t.Fatalf("%s renders an unexpected %T", dir, obj)
		}
	}
	for name, missing := range map[string]bool{
		"Deployment": r.deployment == nil, "Service": r.service == nil,
		"PodDisruptionBudget": r.pdb == nil, "ServiceMonitor": r.monitor == nil,
		"PrometheusRule": r.rule == nil,
	} {
		if missing {
			t.Fatalf("%s renders no %s", dir, name)
		}
	}
	return r
}

func setOnce[T any](t *testing.T, dst **T, v *T) {
	t.Helper()
	if *dst != nil {
		t.Fatalf("two %T in one overlay", v)
	}
	*dst = v
}

// TestOverlays renders every overlay and checks that the pieces fit each
// other and the gateway's code: ports, probe paths, environment variables,
// selectors, the drain budget, and the autoscaler's signal.
func TestOverlays(t *testing.T) {
	gw := contract(t)
	for _, ov := range overlays {
		t.Run(ov.dir, func(t *testing.T) {
			r := render(t, ov.dir)
			pod := r.deployment.Spec.Template
			kc := container(t, pod.Spec.Containers, "kneecap")
			if len(pod.Spec.Containers) != 1 {
				t.Errorf("want kneecap as the only main container, have %d", len(pod.Spec.Containers))
			}
			engine := container(t, pod.Spec.InitContainers, "engine")
			env := envMap(t, kc, gw)

			checkKneecapImage(t, kc)
			ports := checkKneecapPorts(t, kc, env, gw)
			checkProbes(t, kc, gw)
			enginePort := checkEngine(t, engine, ov.engine, env, ports)
			checkDrain(t, r.deployment, kc, engine, env, gw)
			checkService(t, r.service, pod, kc, enginePort)
			checkPDB(t, r.pdb, pod)
			checkMonitor(t, r.monitor, r.service, gw)
			checkAutoscaler(t, r, ov.keda, gw)
		})
	}
}

func container(t *testing.T, cs []corev1.Container, name string) *corev1.Container {
	t.Helper()
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

// envMap returns kneecap's environment with the gateway's defaults filled in
// and fails on any KNEECAP_* variable the gateway does not read.
func envMap(t *testing.T, c *corev1.Container, gw gatewayContract) map[string]string {
	t.Helper()
	env := map[string]string{}
	for k, v := range gw.env {
		if v != "" {
			env[k] = v
		}
	}
	seen := map[string]bool{}
	for _, e := range c.Env {
		if seen[e.Name] {
			t.Errorf("env %s set twice", e.Name)
		}
		seen[e.Name] = true
		if _, ok := gw.env[e.Name]; !ok {
			t.Errorf("env %s: the gateway reads no such variable", e.Name)
		}
		if e.ValueFrom != nil {
			t.Errorf("env %s: want a literal value", e.Name)
		}
		env[e.Name] = e.Value
	}
	if env["KNEECAP_UPSTREAM"] == "" {
		t.Error("KNEECAP_UPSTREAM (required) is not set")
	}
	return env
}

func checkKneecapImage(t *testing.T, c *corev1.Container) {
	t.Helper()
	if !strings.HasPrefix(c.Image, "ghcr.io/kneecap/kneecap:") {
		t.Errorf("kneecap image %q: want ghcr.io/kneecap/kneecap:TAG", c.Image)
	}
	if !slices.Equal(c.Args, []string{"serve"}) || len(c.Command) != 0 {
		t.Errorf("kneecap runs command %q args %q: want the image's entrypoint with args [serve]", c.Command, c.Args)
	}
	sc := c.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("kneecap must run as non-root on a read-only root filesystem")
	}
}

// checkKneecapPorts requires the named container ports to be the ones kneecap
// listens on, and returns them by name.
func checkKneecapPorts(t *testing.T, c *corev1.Container, env map[string]string, gw gatewayContract) map[string]int32 {
	t.Helper()
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for name, envName := range map[string]string{"http": "KNEECAP_LISTEN", "admin": "KNEECAP_ADMIN_LISTEN"} {
		want := listenPort(t, envName, env[envName])
		if ports[name] != want {
			t.Errorf("container port %q is %d, kneecap listens on %d (%s=%q)", name, ports[name], want, envName, env[envName])
		}
	}
	if len(ports) != 2 {
		t.Errorf("kneecap declares ports %v, want http and admin", ports)
	}
	return ports
}

func listenPort(t *testing.T, name, addr string) int32 {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, addr, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, addr, err)
	}
	return int32(n)
}

func checkProbes(t *testing.T, c *corev1.Container, gw gatewayContract) {
	t.Helper()
	for _, p := range []struct {
		kind  string
		probe *corev1.Probe
		path  string
	}{
		{"readiness", c.ReadinessProbe, "/readyz"},
		{"liveness", c.LivenessProbe, "/healthz"},
	} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("kneecap has no HTTP %s probe", p.kind)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path {
			t.Errorf("%s probe path %q, want %q", p.kind, g.Path, p.path)
		}
		if !slices.Contains(gw.adminRoutes, g.Path) {
			t.Errorf("%s probe path %q is not an admin route of the gateway %v", p.kind, g.Path, gw.adminRoutes)
		}
		if g.Port != intstr.FromString("admin") {
			t.Errorf("%s probe port %v, want the admin port", p.kind, g.Port.String())
		}
	}
}

var portArg = regexp.MustCompile(`^--port[= ](\d+)$`)

// checkEngine requires the engine to listen on localhost only, on the port
// KNEECAP_UPSTREAM names, and its probes to ask the path kneecap asks.
func checkEngine(t *testing.T, c *corev1.Container, image string, env map[string]string, kneecapPorts map[string]int32) int32 {
	t.Helper()
	if !strings.HasPrefix(c.Image, image+":") {
		t.Errorf("engine image %q, want %s:TAG", c.Image, image)
	}
	if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("the engine must be a native sidecar (restartPolicy: Always) so that it stops after kneecap has drained")
	}
	var port int32
	host := false
	for _, a := range c.Args {
		if m := portArg.FindStringSubmatch(a); m != nil {
			n, _ := strconv.Atoi(m[1])
			port = int32(n)
		}
		if a == "--host=127.0.0.1" {
			host = true
		}
	}
	if !host {
		t.Errorf("engine args %q: want --host=127.0.0.1 (reachable through kneecap only)", c.Args)
	}
	if port == 0 {
		t.Fatalf("engine args %q name no --port", c.Args)
	}
	u, err := url.Parse(env["KNEECAP_UPSTREAM"])
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("127.0.0.1:%d", port); u.Host != want {
		t.Errorf("KNEECAP_UPSTREAM=%q, the engine listens on %s", env["KNEECAP_UPSTREAM"], want)
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != port {
		t.Errorf("engine declares ports %v, listens on %d", c.Ports, port)
	}
	for name, p := range kneecapPorts {
		if p == port {
			t.Errorf("engine port %d collides with kneecap's %s port", port, name)
		}
	}
	health := fmt.Sprintf("http://127.0.0.1:%d%s", port, env["KNEECAP_UPSTREAM_HEALTH_PATH"])
	for kind, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.Exec == nil || !slices.Contains(p.Exec.Command, health) {
			t.Errorf("engine %s probe must ask %s", kind, health)
		}
	}
	if _, ok := c.Resources.Limits["nvidia.com/gpu"]; !ok {
		t.Error("engine requests no GPU")
	}
	return port
}

// checkDrain requires the grace period to cover kneecap's preStop pause and
// drain timeout with time left for the engine to stop after it.
func checkDrain(t *testing.T, d *appsv1.Deployment, kc, engine *corev1.Container, env map[string]string, gw gatewayContract) {
	t.Helper()
	grace := time.Duration(*d.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	var pause time.Duration
	if kc.Lifecycle == nil || kc.Lifecycle.PreStop == nil || kc.Lifecycle.PreStop.Sleep == nil {
		t.Error("kneecap needs a preStop sleep so that endpoints are removed before it stops accepting")
	} else {
		pause = time.Duration(kc.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	drain, err := time.ParseDuration(env["KNEECAP_DRAIN_TIMEOUT"])
	if err != nil || drain <= 0 {
		t.Fatalf("KNEECAP_DRAIN_TIMEOUT=%q: want an explicit duration in the manifest", env["KNEECAP_DRAIN_TIMEOUT"])
	}
	const engineStop = 10 * time.Second
	if grace < pause+drain+engineStop {
		t.Errorf("terminationGracePeriodSeconds %v < preStop %v + drain %v + %v for the engine", grace, pause, drain, engineStop)
	}
	if engine.Lifecycle != nil && engine.Lifecycle.PreStop != nil {
		t.Error("the engine needs no preStop: as a sidecar it stops after kneecap")
	}
	if s := d.Spec.Strategy.RollingUpdate; s == nil || s.MaxUnavailable == nil || s.MaxUnavailable.IntValue() != 0 {
		t.Error("rollouts must not take a replica away before its replacement is ready (maxUnavailable: 0)")
	}
}

// checkService requires the Service to select the pods and to expose
// kneecap's ports only: nothing reaches the engine around kneecap.
func checkService(t *testing.T, s *corev1.Service, pod corev1.PodTemplateSpec, kc *corev1.Container, enginePort int32) {
	t.Helper()
	if !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(pod.Labels)) || len(s.Spec.Selector) == 0 {
		t.Errorf("Service selector %v does not select the pods %v", s.Spec.Selector, pod.Labels)
	}
	names := map[string]bool{}
	for _, p := range kc.Ports {
		names[p.Name] = true
	}
	for _, p := range s.Spec.Ports {
		if p.TargetPort.Type != intstr.String || !names[p.TargetPort.StrVal] {
			t.Errorf("Service port %s targets %v, not a named kneecap port", p.Name, p.TargetPort.String())
		}
		if p.Port == enginePort || p.TargetPort.IntValue() == int(enginePort) {
			t.Errorf("Service port %s exposes the engine's port", p.Name)
		}
	}
}

func checkPDB(t *testing.T, p *policyv1.PodDisruptionBudget, pod corev1.PodTemplateSpec) {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
		t.Errorf("PodDisruptionBudget selector does not select the pods: %v", err)
	}
	if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() != 1 {
		t.Error("PodDisruptionBudget: want maxUnavailable: 1 (one engine drains at a time)")
	}
}

func checkMonitor(t *testing.T, m *monitoringv1.ServiceMonitor, s *corev1.Service, gw gatewayContract) {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(&m.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(s.Labels)) {
		t.Errorf("ServiceMonitor selector does not select the Service (labels %v): %v", s.Labels, err)
	}
	svcPorts := map[string]bool{}
	for _, p := range s.Spec.Ports {
		svcPorts[p.Name] = true
	}
	admin := false
	for _, e := range m.Spec.Endpoints {
		if !svcPorts[e.Port] {
			t.Errorf("ServiceMonitor endpoint port %q is not a Service port", e.Port)
		}
		if e.Port == "admin" {
			admin = true
			if e.Path != "/metrics" || !slices.Contains(gw.adminRoutes, e.Path) {
				t.Errorf("ServiceMonitor scrapes admin path %q, want the gateway's /metrics", e.Path)
			}
		}
	}
	if !admin {
		t.Error("ServiceMonitor does not scrape the admin port")
	}
}

// checkAutoscaler requires exactly one autoscaler, aimed at the Deployment,
// scaling on a metric kneecap exports.
func checkAutoscaler(t *testing.T, r rendered, keda bool, gw gatewayContract) {
	t.Helper()
	if keda {
		if r.hpa != nil || r.scaled == nil {
			t.Fatal("a KEDA overlay needs a ScaledObject and no HorizontalPodAutoscaler")
		}
		so := r.scaled.Spec
		if so.ScaleTargetRef == nil || so.ScaleTargetRef.Name != r.deployment.Name ||
			(so.ScaleTargetRef.Kind != "" && so.ScaleTargetRef.Kind != "Deployment") {
			t.Errorf("ScaledObject targets %+v, not Deployment %s", so.ScaleTargetRef, r.deployment.Name)
		}
		if so.MinReplicaCount == nil || *so.MinReplicaCount < 1 {
			t.Fatal("ScaledObject must keep one replica: the signal comes from a running kneecap")
		}
		if so.MaxReplicaCount == nil || *so.MaxReplicaCount < *so.MinReplicaCount {
			t.Errorf("ScaledObject maxReplicaCount %v below minReplicaCount %d", so.MaxReplicaCount, *so.MinReplicaCount)
		}
		if len(so.Triggers) != 1 || so.Triggers[0].Type != "prometheus" {
			t.Fatalf("ScaledObject triggers %+v: want one prometheus trigger", so.Triggers)
		}
		tr := so.Triggers[0]
		for k := range tr.Metadata {
			if !prometheusScalerKeys[k] {
				t.Errorf("prometheus trigger metadata %q: KEDA's prometheus scaler reads no such key", k)
			}
		}
		if tr.MetricType != "AverageValue" {
			t.Errorf("trigger metricType %q: want AverageValue (the query sums over replicas)", tr.MetricType)
		}
		if _, err := strconv.ParseFloat(tr.Metadata["threshold"], 64); err != nil {
			t.Errorf("trigger threshold %q: %v", tr.Metadata["threshold"], err)
		}
		for _, name := range metricNames(tr.Metadata["query"]) {
			if !gw.metrics[name] {
				t.Errorf("KEDA query names %s, which kneecap does not export", name)
			}
		}
		if !strings.Contains(tr.Metadata["query"], "kneecap_demand_ratio") {
			t.Error("KEDA query must read kneecap_demand_ratio")
		}
		return
	}
	if r.hpa == nil || r.scaled != nil {
		t.Fatal("an HPA overlay needs a HorizontalPodAutoscaler and no ScaledObject")
	}
	h := r.hpa.Spec
	if h.ScaleTargetRef.Kind != "Deployment" || h.ScaleTargetRef.Name != r.deployment.Name || h.ScaleTargetRef.APIVersion != "apps/v1" {
		t.Errorf("HPA targets %+v, not Deployment %s", h.ScaleTargetRef, r.deployment.Name)
	}
	if h.MinReplicas == nil || *h.MinReplicas < 1 || h.MaxReplicas < *h.MinReplicas {
		t.Errorf("HPA replicas %v..%d: want at least one, and max >= min", h.MinReplicas, h.MaxReplicas)
	}
	if len(h.Metrics) != 1 || h.Metrics[0].Pods == nil {
		t.Fatalf("HPA metrics %+v: want one Pods metric", h.Metrics)
	}
	m := h.Metrics[0].Pods
	if m.Metric.Name != "kneecap_demand_ratio" || !gw.metrics[m.Metric.Name] {
		t.Errorf("HPA scales on %q: want kneecap_demand_ratio, exported by kneecap", m.Metric.Name)
	}
	if m.Target.Type != autoscalingv2.AverageValueMetricType || m.Target.AverageValue == nil {
		t.Error("HPA target must be an AverageValue of the ratio")
	}
}
