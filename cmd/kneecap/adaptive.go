package main

import (
	"github.com/kneecap/kneecap/admission/adaptive"
	"github.com/kneecap/kneecap/gateway"
)

// The adaptive controller wires itself into `kneecap serve`: with
// KNEECAP_MAX_CONCURRENCY unset it sets the cap; with it set the cap is
// fixed and the controller only answers the deadline check and Retry-After.
// Its knobs (KNEECAP_SLO_PERCENTILE, KNEECAP_MIN_CAP, KNEECAP_MAX_CAP) are
// read and validated with the gateway's configuration.
func init() {
	serveOptions = append(serveOptions, gateway.WithController(adaptive.New(adaptive.Config{})))
}
