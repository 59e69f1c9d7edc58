package deploy

import "testing"

// gatewayContract is what the manifests, rules and dashboard may name: the
// gateway's environment variables with their defaults, its admin routes, and
// the metrics it exports.
type gatewayContract struct {
	env         map[string]string // name -> default ("" when it has none)
	adminRoutes []string
	metrics     map[string]bool // metric family names (histograms without _bucket)
}

// contract returns the gateway's contract as agreed in the project's common
// brief.
//
// TODO(ops): read these from the gateway's code once it lands (the config
// struct's env tags and defaults, the admin router's routes).
func contract(t testing.TB) gatewayContract {
	t.Helper()
	return gatewayContract{
		env: map[string]string{
			"KNEECAP_UPSTREAM": "", "KNEECAP_LISTEN": ":8080", "KNEECAP_ADMIN_LISTEN": ":9090",
			"KNEECAP_SLO_TTFT": "1s", "KNEECAP_SLO_TPOT": "100ms", "KNEECAP_SLO_E2E": "",
			"KNEECAP_SLO_WINDOW": "60s", "KNEECAP_MAX_CONCURRENCY": "", "KNEECAP_MAX_QUEUE": "",
			"KNEECAP_MAX_QUEUE_WAIT": "", "KNEECAP_FIRST_TOKEN_TIMEOUT": "", "KNEECAP_MAX_BODY_BYTES": "",
			"KNEECAP_DRAIN_TIMEOUT": "", "KNEECAP_UPSTREAM_HEALTH_PATH": "/health",
			"KNEECAP_LOG_LEVEL": "", "KNEECAP_LOG_FORMAT": "",
			"KNEECAP_SLO_PERCENTILE": "0.9", "KNEECAP_MIN_CAP": "1", "KNEECAP_MAX_CAP": "",
		},
		adminRoutes: []string{"/metrics", "/healthz", "/readyz", "/status"},
		metrics: setOf(
			"kneecap_requests_total", "kneecap_ttft_seconds", "kneecap_tpot_seconds",
			"kneecap_itl_seconds", "kneecap_e2e_seconds", "kneecap_queue_wait_seconds",
			"kneecap_output_tokens_total", "kneecap_running", "kneecap_queued",
			"kneecap_concurrency_limit", "kneecap_rejections_total",
			"kneecap_goodput_requests_per_second", "kneecap_slo_attainment_ratio",
			"kneecap_demand_ratio",
		),
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
