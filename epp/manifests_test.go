package epp

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	configapi "sigs.k8s.io/gateway-api-inference-extension/apix/config/v1alpha1"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/config/loader"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/server"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/kneecap/kneecap/gateway"
)

// exampleDir is the deploy example this module checks.
var exampleDir = filepath.Join("..", "deploy", "inferencepool")

// kinds maps apiVersion and kind to the published Go type a document must
// decode into.
var kinds = map[string]func() any{
	"apps/v1 Deployment":                           func() any { return new(appsv1.Deployment) },
	"v1 ServiceAccount":                            func() any { return new(corev1.ServiceAccount) },
	"v1 ConfigMap":                                 func() any { return new(corev1.ConfigMap) },
	"v1 Service":                                   func() any { return new(corev1.Service) },
	"rbac.authorization.k8s.io/v1 Role":            func() any { return new(rbacv1.Role) },
	"rbac.authorization.k8s.io/v1 RoleBinding":     func() any { return new(rbacv1.RoleBinding) },
	"inference.networking.k8s.io/v1 InferencePool": func() any { return new(giev1.InferencePool) },
	"gateway.networking.k8s.io/v1 Gateway":         func() any { return new(gwv1.Gateway) },
	"gateway.networking.k8s.io/v1 HTTPRoute":       func() any { return new(gwv1.HTTPRoute) },
}

// decodeStrict decodes one YAML document into its type, refusing unknown
// and duplicate fields.
func decodeStrict(doc []byte) (any, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return nil, err
	}
	newObj, ok := kinds[head.APIVersion+" "+head.Kind]
	if !ok {
		return nil, fmt.Errorf("unexpected apiVersion and kind %q %q", head.APIVersion, head.Kind)
	}
	obj := newObj()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// example is every object of the deploy example, by file.
type example map[string][]any

func loadExample(t *testing.T) example {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(exampleDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests under %s (%v)", exampleDir, err)
	}
	ex := example{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(b), "\n---\n") {
			obj, err := decodeStrict([]byte(doc))
			if err != nil {
				t.Errorf("%s (document %d): %v", filepath.Base(f), i+1, err)
				continue
			}
			ex[filepath.Base(f)] = append(ex[filepath.Base(f)], obj)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return ex
}

// one returns the only object of type T in file.
func one[T any](t *testing.T, ex example, file string) *T {
	t.Helper()
	var found []*T
	for _, o := range ex[file] {
		if v, ok := o.(*T); ok {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: %d objects of type %T, want 1", file, len(found), *new(T))
	}
	return found[0]
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return corev1.Container{}
}

func port(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port %q", c.Name, name)
	return 0
}

// pickerConfig is the EndpointPickerConfig of epp.yaml's ConfigMap, loaded
// by the picker's own loader (strict decoding, its defaults applied).
func pickerConfig(t *testing.T, ex example) *configapi.EndpointPickerConfig {
	t.Helper()
	cm := one[corev1.ConfigMap](t, ex, "epp.yaml")
	raw, ok := cm.Data["config.yaml"]
	if !ok {
		t.Fatalf("ConfigMap %s has no config.yaml", cm.Name)
	}
	cfg, _, err := loader.LoadRawConfig([]byte(raw), logr.Discard())
	if err != nil {
		t.Fatalf("the picker's loader refuses epp.yaml's EndpointPickerConfig: %v", err)
	}
	return cfg
}

// pickerFlags parses a picker Deployment's arguments with the picker's own
// flag set.
func pickerFlags(t *testing.T, d *appsv1.Deployment) *server.Options {
	t.Helper()
	opts := server.NewOptions()
	fs := pflag.NewFlagSet("epp", pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // its deprecation notices
	opts.AddFlags(fs)
	if err := fs.Parse(container(t, d.Spec.Template.Spec, "epp").Args); err != nil {
		t.Fatalf("%s: the picker's flags refuse its arguments: %v", d.Name, err)
	}
	return opts
}

// TestManifestsDecodeStrictly decodes every manifest of the deploy example
// into its published type and checks what they share: the pool selects the
// kneecap pods and targets kneecap's traffic port, its picker reference is
// the picker's Service, the picker scrapes kneecap's admin port, the route
// sends to the pool and retries a 429, and kneecap's settings are ones the
// gateway reads and accepts.
func TestManifestsDecodeStrictly(t *testing.T) {
	ex := loadExample(t)
	d := one[appsv1.Deployment](t, ex, "pool.yaml")
	pool := one[giev1.InferencePool](t, ex, "pool.yaml")
	kc := container(t, d.Spec.Template.Spec, "kneecap")

	poolLabels := labels.Set{}
	for k, v := range pool.Spec.Selector.MatchLabels {
		poolLabels[string(k)] = string(v)
	}
	sel, err := labels.ValidatedSelectorFromSet(poolLabels)
	if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("the pool's selector %v does not select the pods %v (%v)", pool.Spec.Selector.MatchLabels, d.Spec.Template.Labels, err)
	}
	if len(pool.Spec.TargetPorts) != 1 || int32(pool.Spec.TargetPorts[0].Number) != port(t, kc, "http") {
		t.Errorf("the pool targets %v, kneecap serves traffic on %d", pool.Spec.TargetPorts, port(t, kc, "http"))
	}

	env := []string{}
	for _, e := range kc.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	if _, err := gateway.ConfigFromEnv(env); err != nil {
		t.Errorf("kneecap's settings in pool.yaml: %v", err)
	}
	known := envNames()
	for _, e := range kc.Env {
		if !known[e.Name] {
			t.Errorf("pool.yaml sets %s, which the gateway does not read", e.Name)
		}
	}

	svc := one[corev1.Service](t, ex, "epp.yaml")
	if pool.Spec.EndpointPickerRef.Name != giev1.ObjectName(svc.Name) || pool.Spec.EndpointPickerRef.Port == nil ||
		int32(pool.Spec.EndpointPickerRef.Port.Number) != svc.Spec.Ports[0].Port {
		t.Errorf("the pool's picker %+v is not the Service %s:%d", pool.Spec.EndpointPickerRef, svc.Name, svc.Spec.Ports[0].Port)
	}
	for _, file := range []string{"epp.yaml", "epp-flags.yaml"} {
		epp := one[appsv1.Deployment](t, ex, file)
		opts := pickerFlags(t, epp)
		if opts.PoolName != pool.Name {
			t.Errorf("%s: the picker's pool %q, want %q", file, opts.PoolName, pool.Name)
		}
		if int32(opts.ModelServerMetricsPort) != port(t, kc, "admin") {
			t.Errorf("%s: the picker scrapes port %d, kneecap's admin port is %d", file, opts.ModelServerMetricsPort, port(t, kc, "admin"))
		}
	}
	engine, ok := d.Spec.Template.Labels["inference.networking.k8s.io/engine-type"]
	if !ok {
		t.Fatal("the pods have no engine-type label")
	}
	cfg := pickerConfig(t, ex)
	var extractor string
	for _, p := range cfg.Plugins {
		if p.Type == "core-metrics-extractor" {
			extractor = string(p.Parameters)
		}
	}
	if !strings.Contains(extractor, `"name":"`+engine+`"`) && !strings.Contains(extractor, `name: `+engine) {
		t.Errorf("the picker has no engine config %q for the pods' label: %s", engine, extractor)
	}

	route := one[gwv1.HTTPRoute](t, ex, "route.yaml")
	gw := one[gwv1.Gateway](t, ex, "route.yaml")
	if len(route.Spec.ParentRefs) != 1 || string(route.Spec.ParentRefs[0].Name) != gw.Name {
		t.Errorf("the route's parents %v, want the Gateway %s", route.Spec.ParentRefs, gw.Name)
	}
	rule := route.Spec.Rules[0]
	ref := rule.BackendRefs[0].BackendObjectReference
	if ref.Kind == nil || *ref.Kind != "InferencePool" || string(ref.Name) != pool.Name || ref.Group == nil || string(*ref.Group) != giev1.GroupName {
		t.Errorf("the route sends to %+v, want the InferencePool %s", ref, pool.Name)
	}
	if rule.Retry == nil || !slices.Contains(rule.Retry.Codes, 429) || rule.Retry.Attempts == nil || *rule.Retry.Attempts < 1 {
		t.Errorf("the route does not retry a 429: %+v", rule.Retry)
	}
}

// TestDecodeStrictRejects shows that the decoding above refuses what a
// lenient one would drop without a word.
func TestDecodeStrictRejects(t *testing.T) {
	for _, doc := range []string{
		"apiVersion: inference.networking.k8s.io/v1\nkind: InferencePool\nmetadata: {name: x}\nspec:\n  targetPort: 8080\n",
		"apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: x}\nspec:\n  rules: [{retry: {code: [429]}}]\n",
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nmetadata: {name: y}\n",
		"apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: InferencePool\nmetadata: {name: x}\n",
	} {
		if _, err := decodeStrict([]byte(doc)); err == nil {
			t.Errorf("accepted:\n%s", doc)
		}
	}
	bad := "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins: [{type: queue-scorer, paramters: {}}]\n"
	if _, _, err := loader.LoadRawConfig([]byte(bad), logr.Discard()); err == nil {
		t.Error("the picker's loader accepted a misspelt field")
	}
}

// envNames is every variable the gateway reads, from its Config's tags.
func envNames() map[string]bool {
	out := map[string]bool{}
	for f := range reflect.TypeFor[gateway.Config]().Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("env"), ","); name != "" && name != "-" {
			out[gateway.EnvPrefix+name] = true
		}
	}
	return out
}
