package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestUnknownCommandExits2(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"frobnicate"}, &out, &errb); code != 2 {
		t.Fatalf("exit code = %d, want 2", code)
	}
	if !strings.Contains(errb.String(), `unknown command "frobnicate"`) {
		t.Fatalf("stderr = %q", errb.String())
	}
}

func TestNoArgsPrintsUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "usage: kneecap") {
		t.Fatalf("code %d, stderr %q", code, errb.String())
	}
}

// Every subcommand answers -h with its usage and exit code 0, and a flag
// it does not know with exit code 2.
func TestEverySubcommandHelpAndBadFlag(t *testing.T) {
	for name := range commands {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(context.Background(), []string{name, "-h"}, &out, &errb); code != 0 {
				t.Errorf("%s -h: exit code %d, want 0 (stderr %q)", name, code, errb.String())
			}
			if errb.Len() == 0 {
				t.Errorf("%s -h printed no usage", name)
			}
			errb.Reset()
			if code := run(context.Background(), []string{name, "--no-such-flag"}, &out, &errb); code != 2 {
				t.Errorf("%s --no-such-flag: exit code %d, want 2", name, code)
			}
		})
	}
}

// The serving binary carries no test harness: no package it links is
// testing or below it (testing/synctest, testing/iotest, ...). The scenario
// suite, which needs synctest, runs as a test of package scenarios instead.
func TestNoTestingPackages(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "testing" || strings.HasPrefix(p, "testing/") {
			t.Errorf("kneecap links %s", p)
		}
	}
}
