package proxytest

import (
	"strings"

	"github.com/kneecap/kneecap/wire"
)

// Events splits a streamed response body into its SSE data payloads, in
// order; comments and keep-alives are left out.
func Events(body string) []string {
	var out []string
	er := wire.NewEventReader(strings.NewReader(body))
	for {
		ev, err := er.Next()
		if err != nil {
			return out
		}
		if ev.Data != nil {
			out = append(out, string(ev.Data))
		}
	}
}
