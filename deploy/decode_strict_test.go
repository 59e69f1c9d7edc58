package deploy

import (
	"strings"
	"testing"
)

// TestDecodeStrictRejects shows that the strict decoding the manifest tests
// rely on refuses what a lenient decoder would drop without a word.
func TestDecodeStrictRejects(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"misspelt field", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replica: 2\n", "unknown field"},
		{"misplaced probe", "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  readinessProbe: {}\n", "unknown field"},
		{"duplicate field", "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nmetadata: {name: y}\n", "already set"},
		{"unknown kind", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n", "unexpected apiVersion"},
		{"old HPA version", "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata: {name: x}\n", "unexpected apiVersion"},
		{"KEDA field", "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec:\n  scaleTargetRef: {name: x}\n  maxReplicas: 3\n", "unknown field"},
		{"ServiceMonitor field", "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec:\n  endpoints: [{port: admin, metricsPath: /metrics}]\n", "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeStrict([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
