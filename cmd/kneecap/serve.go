package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"

	"github.com/kneecap/kneecap/gateway"
)

// serveOptions are extra gateway options that other files of this command
// add in their init (the adaptive controller wires itself in this way).
var serveOptions []gateway.Option

func init() {
	register("serve", "run the gateway in front of an engine (configured by KNEECAP_* env vars)", runServe)
}

func runServe(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		io.WriteString(stderr, "usage: kneecap serve\n\nConfigured by environment variables; see docs/gateway.md.\nKNEECAP_UPSTREAM (the engine's base URL) is required.\n")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %v", fs.Args())
	}
	cfg, err := gateway.ConfigFromEnv(os.Environ())
	if err != nil {
		return usagef("%v", err)
	}
	opts := append([]gateway.Option{gateway.WithLogger(gateway.NewLogger(cfg, stderr))}, serveOptions...)
	g, err := gateway.New(cfg, opts...)
	if err != nil {
		return err
	}
	return g.Run(ctx)
}
