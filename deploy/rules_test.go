package deploy

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite generated files (kubernetes/base/prometheusrule.yaml)")

const (
	rulesFile     = "deploy/prometheus/kneecap.rules.yaml"
	rulesTestFile = "deploy/prometheus/kneecap.rules.test.yaml"
	promRuleFile  = "deploy/kubernetes/base/prometheusrule.yaml"
)

// loadRules decodes the rules file strictly into the Prometheus Operator's
// rule groups, the shape Prometheus itself reads.
func loadRules(t testing.TB) monitoringv1.PrometheusRuleSpec {
	t.Helper()
	var spec monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(readFile(t, filepath.Join(repoRoot(t), rulesFile)), &spec); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return spec
}

func TestPromtoolCheckRules(t *testing.T) {
	promtool := lookTool(t, "promtool", "prometheus")
	cmd := exec.Command(promtool, "check", "rules", rulesFile)
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// TestPromtoolTestRules runs the unit tests beside the rules: each alert has
// cases where it fires and where it must not.
func TestPromtoolTestRules(t *testing.T) {
	promtool := lookTool(t, "promtool", "prometheus")
	cmd := exec.Command(promtool, "test", "rules", filepath.Base(rulesTestFile))
	cmd.Dir = filepath.Join(repoRoot(t), filepath.Dir(rulesTestFile))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// TestEveryAlertIsUnitTested requires every alert to appear in the promtool
// unit tests both firing and not firing.
func TestEveryAlertIsUnitTested(t *testing.T) {
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(repoRoot(t), rulesTestFile)), &tests); err != nil {
		t.Fatal(err)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	n := 0
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if !fires[r.Alert] {
				t.Errorf("alert %s has no unit test where it fires", r.Alert)
			}
			if !silent[r.Alert] {
				t.Errorf("alert %s has no unit test where it stays silent", r.Alert)
			}
		}
	}
	if n < 5 {
		t.Errorf("only %d alerts in %s", n, rulesFile)
	}
}

// TestPrometheusRuleMatchesRulesFile keeps the Prometheus Operator's copy of
// the rules equal to the file promtool tests. -update rewrites the copy.
func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	spec := loadRules(t)
	path := filepath.Join(repoRoot(t), promRuleFile)
	if *update {
		pr := monitoringv1.PrometheusRule{
			TypeMeta:   metav1.TypeMeta{APIVersion: "monitoring.coreos.com/v1", Kind: "PrometheusRule"},
			ObjectMeta: metav1.ObjectMeta{Name: "kneecap"},
			Spec:       spec,
		}
		b, err := yaml.Marshal(pr)
		if err != nil {
			t.Fatal(err)
		}
		header := "# Generated from deploy/prometheus/kneecap.rules.yaml by\n" +
			"#   go test ./deploy -run PrometheusRule -update\n# Do not edit.\n"
		if err := os.WriteFile(path, append([]byte(header), b...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	obj, err := decodeStrict(readFile(t, path))
	if err != nil {
		t.Fatalf("%s: %v", promRuleFile, err)
	}
	pr := obj.(*monitoringv1.PrometheusRule)
	if !reflect.DeepEqual(pr.Spec, spec) {
		t.Fatalf("%s differs from %s: run go test ./deploy -run PrometheusRule -update", promRuleFile, rulesFile)
	}
}
