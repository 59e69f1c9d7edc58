package main

import (
	"os"

	"github.com/kneecap/kneecap/admission/adaptive"
	"github.com/kneecap/kneecap/gateway"
)

// The adaptive controller wires itself into `kneecap serve`: with
// KNEECAP_MAX_CONCURRENCY unset it sets the cap; with it set the cap is
// fixed and the controller only answers the deadline check and Retry-After.
func init() {
	serveOptions = append(serveOptions, gateway.WithController(func(h gateway.Host) (gateway.Controller, error) {
		cfg, err := adaptive.ConfigFromEnv(os.Environ())
		if err != nil {
			return nil, err
		}
		return adaptive.New(cfg)(h)
	}))
}
