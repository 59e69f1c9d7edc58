package main

import (
	"context"
	"flag"
	"io"
	"os"

	"github.com/kneecap/kneecap/gateway"
)

func init() {
	register("serve", "run the gateway in front of an engine (configured by KNEECAP_* env vars)", runServe)
}

// runServe builds the gateway from the environment with gateway.New, which
// wires its own controller: adaptive with KNEECAP_MAX_CONCURRENCY unset,
// fixed at it when set (the controller then only answers the deadline
// check, paces prefills and computes Retry-After).
func runServe(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		io.WriteString(stderr, "usage: kneecap serve\n\nConfigured by environment variables; see docs/gateway.md.\nKNEECAP_UPSTREAM (the engine's base URL) is required.\n")
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := gateway.ConfigFromEnv(os.Environ())
	if err != nil {
		return usagef("%v", err)
	}
	g, err := gateway.New(cfg, gateway.WithLogger(gateway.NewLogger(cfg, stderr)))
	if err != nil {
		return err
	}
	return g.Run(ctx)
}
