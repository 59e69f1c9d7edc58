package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoKubernetes: the kneecap binary links no Kubernetes package, and
// the module's build list has neither the endpoint picker's module nor
// client-go. The checks against the picker's own code live in a module of
// their own (epp/) so that this one takes none of its dependencies; the
// deploy tests' Kubernetes API types are test-only imports of package
// deploy, never of the binary.
func TestLinksNoKubernetes(t *testing.T) {
	goList := func(args ...string) []string {
		t.Helper()
		out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				t.Fatalf("go list %v: %v\n%s", args, err, ee.Stderr)
			}
			t.Fatalf("go list %v: %v", args, err)
		}
		return strings.Fields(string(out))
	}
	deps := goList("-deps", ".")
	if len(deps) < 50 {
		t.Fatalf("go list -deps found only %d packages", len(deps))
	}
	for _, p := range deps {
		if strings.Contains(strings.ToLower(p), "k8s") {
			t.Errorf("the binary links %s", p)
		}
	}
	for _, m := range goList("-m", "all") {
		for _, banned := range []string{"sigs.k8s.io/gateway-api-inference-extension", "k8s.io/client-go"} {
			if m == banned {
				t.Errorf("the module's build list has %s", m)
			}
		}
	}
}
