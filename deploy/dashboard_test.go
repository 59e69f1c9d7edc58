package deploy

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const dashboardFile = "deploy/grafana/kneecap.json"

type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Schema     int    `json:"schemaVersion"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	row string // the title of the row the panel sits in
}

func loadDashboard(t testing.TB) dashboard {
	t.Helper()
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(readFile(t, filepath.Join(repoRoot(t), dashboardFile))))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	row := ""
	for i := range d.Panels {
		if d.Panels[i].Type == "row" {
			row = d.Panels[i].Title
		}
		d.Panels[i].row = row
	}
	return d
}

// controllerRow is the title of the dashboard's row for the adaptive
// controller, whose panels may draw metrics not exported yet.
const controllerRow = "Adaptive controller"

// recordedNames returns the names the rules file records, with the metric
// names each recording reads.
func recordedNames(t testing.TB) map[string][]string {
	t.Helper()
	rec := map[string][]string{}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				rec[r.Record] = append(rec[r.Record], metricNames(r.Expr.String())...)
			}
		}
	}
	return rec
}

// TestDashboard checks the dashboard's shape and that it names no metric
// kneecap does not export: each name is the gateway's, or recorded by the
// rules from the gateway's.
func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	gw := contract(t)
	rec := recordedNames(t)
	if d.UID == "" || d.Title == "" || d.Schema < 36 {
		t.Errorf("uid %q title %q schemaVersion %d", d.UID, d.Title, d.Schema)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		hasDS = hasDS || (v.Name == "datasource" && v.Type == "datasource")
	}
	if !hasDS {
		t.Error("no datasource variable: the dashboard would be tied to one Prometheus")
	}

	drawn := map[string]bool{}
	ids := map[int]bool{}
	rows := map[string]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			rows[p.Title] = true
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource must be ${datasource}", p.Title)
		}
		if p.GridPos.X+p.GridPos.W > 24 || p.GridPos.W <= 0 || p.GridPos.H <= 0 {
			t.Errorf("panel %q: gridPos %+v", p.Title, p.GridPos)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if strings.TrimSpace(q.Expr) == "" {
				t.Errorf("panel %q query %s is empty", p.Title, q.RefID)
			}
			for _, name := range metricNames(q.Expr) {
				_, recorded := rec[name]
				switch {
				case recorded:
					drawn[name] = true
					for _, src := range rec[name] {
						drawn[src] = true
					}
				case gw.metrics[name]:
					drawn[name] = true
				case assumedControllerMetrics[name] && p.row == controllerRow:
				default:
					t.Errorf("panel %q names %s: kneecap does not export it and no rule records it", p.Title, name)
				}
			}
		}
	}
	for name := range gw.metrics {
		if !drawn[name] {
			t.Errorf("kneecap exports %s but no panel draws it", name)
		}
	}
	for _, r := range []string{"Goodput: requests that met every target", "Admission: cap, queue and demand", "Latency against the targets", controllerRow} {
		if !rows[r] {
			t.Errorf("no row %q", r)
		}
	}
	// The targets are drawn next to the latencies they bound.
	for metric, target := range map[string]string{
		"instance_kind:kneecap_ttft_seconds:quantile1m": "kneecap_slo_target_seconds",
		"instance:kneecap_tpot_seconds:quantile1m":      "kneecap_slo_target_seconds",
		"kneecap_slo_attainment_ratio":                  "kneecap:slo_target_attainment:ratio",
	} {
		found := false
		for _, p := range d.Panels {
			var names []string
			for _, q := range p.Targets {
				names = append(names, metricNames(q.Expr)...)
			}
			found = found || (slices.Contains(names, metric) && slices.Contains(names, target))
		}
		if !found {
			t.Errorf("no panel draws %s with its target %s", metric, target)
		}
	}
}

// TestRulesNameOnlyExportedMetrics requires every kneecap metric a rule reads
// to be exported by the gateway or recorded by another rule; the only
// foreign metric allowed is kube-state-metrics' readiness.
func TestRulesNameOnlyExportedMetrics(t *testing.T) {
	gw := contract(t)
	rec := recordedNames(t)
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			expr := r.Expr.String()
			for _, name := range metricNames(expr) {
				if _, recorded := rec[name]; !gw.metrics[name] && !recorded {
					t.Errorf("rule %s%s names %s: kneecap does not export it and no rule records it", r.Record, r.Alert, name)
				}
			}
			if strings.Contains(expr, "kube_") && r.Alert != "KneecapEngineNotReady" {
				t.Errorf("rule %s%s reads kube-state-metrics", r.Record, r.Alert)
			}
		}
	}
}

// TestMetricNames pins the extraction the dashboard and rule checks rely on.
func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`histogram_quantile(0.9, sum by (le) (rate(kneecap_ttft_seconds_bucket{job="kneecap_x"}[5m])))`, []string{"kneecap_ttft_seconds"}},
		{`kneecap_slo_attainment_ratio < on () group_left () kneecap:slo_target_attainment:ratio`, []string{"kneecap:slo_target_attainment:ratio", "kneecap_slo_attainment_ratio"}},
		{`instance_kind:kneecap_ttft_seconds:quantile1m{kind="client"}`, []string{"instance_kind:kneecap_ttft_seconds:quantile1m"}},
		{`vector(0.9)`, nil},
		{`sum(rate(kneecap_requests_total{outcome!~'rejected'}[1m]))`, []string{"kneecap_requests_total"}},
	} {
		if got := metricNames(tc.expr); !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			t.Errorf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}
