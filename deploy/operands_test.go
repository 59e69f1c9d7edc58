package deploy

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var (
	setOps    = []string{" and ", " or ", " unless "}
	cmpOps    = []string{"==", "!=", ">=", "<=", ">", "<"}
	modifiers = regexp.MustCompile(`^(?:bool\s*)?(?:(?:on|ignoring)\s*\([^)]*\)\s*)?(?:(?:group_left|group_right)\s*(?:\([^)]*\))?\s*)?`)
)

// vectorOperands splits an expression at its top-level set operators (and,
// or, unless) and comparisons, and returns the operands that are not number
// literals. An alert's expression returns data only while it fires; each of
// its operands must return data whenever kneecap runs.
func vectorOperands(expr string) []string {
	var out []string
	expr = strings.Join(strings.Fields(expr), " ")
	for _, part := range splitTop(expr, setOps) {
		for _, op := range splitTop(part, cmpOps) {
			op = strings.TrimSpace(modifiers.ReplaceAllString(strings.TrimSpace(op), ""))
			if _, err := strconv.ParseFloat(op, 64); err == nil || op == "" {
				continue
			}
			out = append(out, op)
		}
	}
	return out
}

// splitTop splits s at any of ops that stands outside brackets and quotes.
// Comparison operators inside a label matcher ({a!="b"}) are inside braces
// and never split.
func splitTop(s string, ops []string) []string {
	var parts []string
	depth, start := 0, 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if quote != 0 {
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
			continue
		}
		switch c {
		case '"', '\'', '`':
			quote = c
			continue
		case '(', '{', '[':
			depth++
			continue
		case ')', '}', ']':
			depth--
			continue
		}
		if depth != 0 {
			continue
		}
		for _, op := range ops {
			if strings.HasPrefix(s[i:], op) {
				if (op == ">" || op == "<") && i+1 < len(s) && s[i+1] == '=' {
					continue
				}
				parts = append(parts, s[start:i])
				i += len(op) - 1
				start = i + 1
				break
			}
		}
	}
	return append(parts, s[start:])
}

func TestVectorOperands(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{"kneecap_slo_attainment_ratio\n  < on () group_left () kneecap:slo_target_attainment:ratio\nand on (namespace, job, instance)\nsum by (namespace, job, instance) (rate(kneecap_requests_total[5m])) > 0",
			[]string{"kneecap_slo_attainment_ratio", "kneecap:slo_target_attainment:ratio", "sum by (namespace, job, instance) (rate(kneecap_requests_total[5m]))"}},
		{`sum(rate(a{reason!="draining"}[5m])) / sum(rate(b[5m])) > 0.05`, []string{`sum(rate(a{reason!="draining"}[5m])) / sum(rate(b[5m]))`}},
		{`x{quantile="0.9"} > on () group_left () (0.8 * y)`, []string{`x{quantile="0.9"}`, `(0.8 * y)`}},
		{`kube_pod_container_status_ready{container="kneecap"} == 0`, []string{`kube_pod_container_status_ready{container="kneecap"}`}},
		{`a >= bool 1`, []string{"a"}},
		{`vector(1)`, []string{"vector(1)"}},
	} {
		if got := vectorOperands(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("vectorOperands(%q)\n got %q\nwant %q", tc.expr, got, tc.want)
		}
	}
}
