package deploy

import (
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kneecap/kneecap/enginemetrics"
	"github.com/kneecap/kneecap/gateway"
)

// gatewayContract is what the manifests, rules, dashboard and docs may name:
// the gateway's environment variables with their defaults, its admin
// routes, and the metrics it exports.
type gatewayContract struct {
	env         map[string]string // name -> default ("" when it has none)
	adminRoutes []string
	metrics     map[string]bool // metric family names (histograms without _bucket)
}

// agreedMetrics are the gateway's metrics named in the project's common
// brief. A counter with labels is exported only once a request gave it a
// label value, so the registry of a new gateway does not list all of them;
// the live test checks that a running kneecap exports every one.
var agreedMetrics = []string{
	"kneecap_requests_total", "kneecap_ttft_seconds", "kneecap_tpot_seconds",
	"kneecap_itl_seconds", "kneecap_e2e_seconds", "kneecap_queue_wait_seconds",
	"kneecap_output_tokens_total", "kneecap_running", "kneecap_queued",
	"kneecap_concurrency_limit", "kneecap_rejections_total",
	"kneecap_goodput_requests_per_second", "kneecap_slo_attainment_ratio",
	"kneecap_demand_ratio",
}

// contract reads the gateway's contract from its code: the variables and
// defaults from gateway.Config's env tags, the admin routes by walking the
// admin router, and the metrics from the registry of a new gateway (plus
// the agreed ones that appear only with traffic).
func contract(t testing.TB) gatewayContract {
	t.Helper()
	c := gatewayContract{env: map[string]string{}, metrics: map[string]bool{}}
	envFields(reflect.TypeFor[gateway.Config](), gateway.EnvPrefix, c.env)
	if len(c.env) < 10 {
		t.Fatalf("read only %d variables from gateway.Config", len(c.env))
	}

	cfg, err := gateway.ConfigFromEnv([]string{gateway.EnvPrefix + "UPSTREAM=http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	g, err := gateway.New(cfg, gateway.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	routes, ok := g.AdminHandler().(chi.Routes)
	if !ok {
		t.Fatalf("the admin handler is a %T, not a chi router: read its routes another way", g.AdminHandler())
	}
	err = chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if (method == http.MethodGet || method == "*") && !slices.Contains(c.adminRoutes, route) {
			c.adminRoutes = append(c.adminRoutes, route)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "kneecap_") {
			c.metrics[mf.GetName()] = true
		}
	}
	for _, n := range agreedMetrics {
		c.metrics[n] = true
	}
	// The reading of the engine's own metrics is exported only while a
	// fresh reading knows it.
	for _, n := range enginemetrics.MetricNames() {
		c.metrics[n] = true
	}
	return c
}

// envFields collects caarlos0/env tags (env:"NAME,options" and envDefault)
// of typ and of its nested structs.
func envFields(typ reflect.Type, prefix string, out map[string]string) {
	for f := range typ.Fields() {
		tag, ok := f.Tag.Lookup("env")
		if !ok {
			if f.Type.Kind() == reflect.Struct {
				envFields(f.Type, prefix+f.Tag.Get("envPrefix"), out)
			}
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue // read otherwise (Config.Tracing: the standard OTEL_* variables)
		}
		out[prefix+name] = f.Tag.Get("envDefault")
	}
}

// assumedControllerMetrics are the adaptive controller's metrics (issue 5,
// admission/controller_metrics.go on the adaptive branch) that the
// dashboard's controller row draws. With a static cap they are absent and
// those panels show no data; the live test requires their data once kneecap
// exports any kneecap_controller_* metric.
var assumedControllerMetrics = setOf(
	"kneecap_controller_cap",
	"kneecap_controller_changes_total",
	"kneecap_controller_predicted_tpot_seconds",
	"kneecap_controller_predicted_engine_ttft_seconds",
	"kneecap_controller_predicted_wait_seconds",
	"kneecap_controller_model_gap_base_seconds",
	"kneecap_controller_model_gap_per_running_seconds",
	"kneecap_controller_shifts",
	"kneecap_controller_deadline_rejections_total",
	"kneecap_controller_attainment_ratio",
)

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

func TestContractFromCode(t *testing.T) {
	c := contract(t)
	t.Logf("env: %d variables; admin routes %v; metrics %d", len(c.env), c.adminRoutes, len(c.metrics))
	for _, r := range []string{"/metrics", "/healthz", "/readyz", "/status"} {
		if !slices.Contains(c.adminRoutes, r) {
			t.Errorf("the admin router has no %s", r)
		}
	}
}
