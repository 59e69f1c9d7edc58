package deploy

import (
	"regexp"
	"sort"
	"strings"
)

var (
	promqlString = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	// A metric name that is kneecap's (kneecap_*) or recorded from it
	// (level:kneecap_...:op, kneecap:...:...).
	kneecapName = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
)

// metricNames returns the metric names an expression selects that belong to
// kneecap: its own (kneecap_*), and recorded ones (with colons). Label
// values (in quotes) are ignored; histogram suffixes are dropped, so
// kneecap_ttft_seconds_bucket reads as kneecap_ttft_seconds.
func metricNames(expr string) []string {
	expr = promqlString.ReplaceAllString(expr, `""`)
	seen := map[string]bool{}
	for _, loc := range kneecapName.FindAllStringIndex(expr, -1) {
		tok := expr[loc[0]:loc[1]]
		if !strings.Contains(tok, "kneecap") {
			continue
		}
		// A function call or a label name inside by (...) / {...} is not a
		// metric: kneecap names in those positions would be odd anyway.
		if rest := strings.TrimLeft(expr[loc[1]:], " "); strings.HasPrefix(rest, "(") {
			continue
		}
		if !strings.Contains(tok, ":") {
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				tok = strings.TrimSuffix(tok, suf)
			}
		}
		seen[tok] = true
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
