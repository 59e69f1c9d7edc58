package fleet

import (
	"strings"
	"testing"
)

// TestDocsShowTheConfigurations: docs/fleet.md shows the balancer
// configurations the fleet tests run, line for line (one source for both).
func TestDocsShowTheConfigurations(t *testing.T) {
	doc := readFile(t, "../docs/fleet.md")
	for _, path := range []string{nginxConf, haproxyConf} {
		if !strings.Contains(doc, "\n"+readFile(t, path)+"```\n") {
			t.Errorf("docs/fleet.md does not show %s as it is (copy the file into its code block)", path)
		}
	}
}
