package deploy

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const operatingDoc = "docs/operating.md"

var envRow = regexp.MustCompile("^\\| `(KNEECAP_[A-Z0-9_]+)` \\| ([^|]*) \\|")

// TestOperatingDocEnvTable keeps the environment table in docs/operating.md
// equal to the variables the gateway reads, with their defaults.
func TestOperatingDocEnvTable(t *testing.T) {
	gw := contract(t)
	doc := string(readFile(t, filepath.Join(repoRoot(t), operatingDoc)))
	seen := map[string]bool{}
	for _, line := range strings.Split(doc, "\n") {
		m := envRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name, def := m[1], strings.Trim(strings.TrimSpace(m[2]), "`")
		seen[name] = true
		want, ok := gw.env[name]
		if !ok {
			t.Errorf("%s documents %s, which the gateway does not read", operatingDoc, name)
			continue
		}
		if want != "" && def != want {
			t.Errorf("%s: %s default %q, the gateway's is %q", operatingDoc, name, def, want)
		}
	}
	for name := range gw.env {
		if !seen[name] {
			t.Errorf("%s does not document %s", operatingDoc, name)
		}
	}
}

// TestOperatingDocYAML parses every YAML example in docs/operating.md and
// docs/fleet.md.
func TestOperatingDocYAML(t *testing.T) {
	doc := string(readFile(t, filepath.Join(repoRoot(t), operatingDoc))) + string(readFile(t, filepath.Join(repoRoot(t), "docs/fleet.md")))
	n := 0
	for _, block := range strings.Split(doc, "```yaml\n")[1:] {
		body, _, ok := strings.Cut(block, "```")
		if !ok {
			t.Fatal("unterminated yaml block")
		}
		var v any
		if err := yaml.Unmarshal([]byte(body), &v); err != nil {
			t.Errorf("yaml block %d: %v\n%s", n+1, err, body)
		}
		n++
	}
	if n < 3 {
		t.Errorf("only %d yaml examples in %s and docs/fleet.md", n, operatingDoc)
	}
}
