package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestSimBadFlagsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"sim", "--profile", "nope"},
		{"sim", "--flavor", "tgi"},
		{"sim", "--time-scale", "0"},
		{"sim", "--max-num-seqs", "0"},
		{"sim", "--fault-error-rate", "2"},
		{"sim", "--prefix-caching", "--prefix-block-tokens", "-1"},
		{"sim", "extra"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
}

func TestSimServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb bytes.Buffer
	done := make(chan int)
	go func() { done <- run(ctx, []string{"sim", "--profile", "tiny", "--listen", "127.0.0.1:0"}, &out, &errb) }()
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "kneecap sim: tiny") && out.Len() != 0 {
		t.Fatalf("stdout %q", out.String())
	}
}
