package gateway

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kneecap/kneecap/learnt"
)

// A gateway with KNEECAP_STATE_FILE starts at the cap its state holds when
// the state was learnt on its engine and targets and is fresh; any other
// state is one log line and a cold start at KNEECAP_MIN_CAP.
func TestStateFileRestoresTheCap(t *testing.T) {
	dir := t.TempDir()
	up := "http://127.0.0.1:1"
	base, err := ConfigFromEnv([]string{"KNEECAP_UPSTREAM=" + up})
	if err != nil {
		t.Fatal(err)
	}
	save := func(name string, s learnt.State) string {
		p := filepath.Join(dir, name)
		if err := learnt.Save(p, s); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fresh := learnt.State{SavedAt: time.Now(), Engine: LearntEngine(base), Cap: 40}
	stale := fresh
	stale.SavedAt = time.Now().Add(-48 * time.Hour)
	foreign := fresh
	foreign.Engine.TPOTms = 12.5
	big := fresh
	big.Cap = 5000
	corrupt := filepath.Join(dir, "corrupt.json")
	os.WriteFile(corrupt, []byte(`{"version":1,"cap":`), 0o600)
	for _, tc := range []struct {
		file string
		env  []string
		want int
		log  string
	}{
		{save("fresh.json", fresh), nil, 40, "state file restored"},
		{save("fresh2.json", fresh), []string{"KNEECAP_MAX_CAP=16"}, 16, "state file restored"},
		{save("big.json", big), nil, 512, "state file restored"},
		{save("stale.json", stale), nil, 1, "stale"},
		{save("foreign.json", foreign), nil, 1, "foreign"},
		{corrupt, nil, 1, "corrupt"},
		{filepath.Join(dir, "none.json"), nil, 1, "none yet"},
		{save("static.json", fresh), []string{"KNEECAP_MAX_CONCURRENCY=5"}, 5, ""},
	} {
		var logs bytes.Buffer
		env := append([]string{"KNEECAP_UPSTREAM=" + up, "KNEECAP_STATE_FILE=" + tc.file}, tc.env...)
		g := newFromEnv(t, env, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		if got := g.Limiter().Limit(); got != tc.want {
			t.Errorf("%s %v: cap %d at start, want %d", filepath.Base(tc.file), tc.env, got, tc.want)
		}
		if n := strings.Count(logs.String(), "\n"); tc.log != "" && (n != 1 || !strings.Contains(logs.String(), tc.log)) {
			t.Errorf("%s: log %q, want one line saying %q", filepath.Base(tc.file), logs.String(), tc.log)
		}
	}
}

// A running adaptive gateway writes its state file, and a second gateway
// started from it begins at that cap.
func TestStateFileWrittenAtTheEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "kneecap.json")
	os.MkdirAll(filepath.Dir(path), 0o700)
	env := []string{"KNEECAP_UPSTREAM=http://127.0.0.1:1", "KNEECAP_STATE_FILE=" + path, "KNEECAP_INITIAL_CAP=24"}
	g := newFromEnv(t, env, WithLogger(slog.New(slog.DiscardHandler)))
	tl, _ := net.Listen("tcp", "127.0.0.1:0")
	al, _ := net.Listen("tcp", "127.0.0.1:0")
	g.opts.traffic, g.opts.admin = tl, al
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cfg, _ := ConfigFromEnv(env)
	s, err := learnt.Load(path, LearntEngine(cfg), time.Hour, time.Now())
	if err != nil || s.Cap != 24 {
		t.Fatalf("state after Run: %+v, %v; want cap 24", s, err)
	}
	g2 := newFromEnv(t, []string{"KNEECAP_UPSTREAM=http://127.0.0.1:1", "KNEECAP_STATE_FILE=" + path}, WithLogger(slog.New(slog.DiscardHandler)))
	if got := g2.Limiter().Limit(); got != 24 {
		t.Fatalf("restarted from the state: cap %d, want 24", got)
	}
}

func TestStateSettings(t *testing.T) {
	up := "KNEECAP_UPSTREAM=http://127.0.0.1:1"
	for _, env := range [][]string{{"KNEECAP_STATE_MAX_AGE=-1s"}, {"KNEECAP_STATE_MAX_AGE=soon"}} {
		if _, err := ConfigFromEnv(append([]string{up}, env...)); settingVar(err) != "KNEECAP_STATE_MAX_AGE" {
			t.Errorf("%v: %v, want an error naming KNEECAP_STATE_MAX_AGE", env, err)
		}
	}
}

// A fleet's replicas may share one state file (a sidecar's upstream is the
// same URL on every pod): gateways writing it at once leave one whole
// state of one of them, never a mix or a torn file, and a new gateway
// starts from it.
func TestStateFileSharedByAFleet(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fleet.json")
	env := func(cap string) []string {
		return []string{"KNEECAP_UPSTREAM=http://127.0.0.1:8000", "KNEECAP_STATE_FILE=" + path, "KNEECAP_INITIAL_CAP=" + cap}
	}
	quiet := WithLogger(slog.New(slog.DiscardHandler))
	writers := []*Gateway{newFromEnv(t, env("24"), quiet), newFromEnv(t, env("40"), quiet)}
	cfg, _ := ConfigFromEnv(env("1"))
	var wg sync.WaitGroup
	for _, g := range writers {
		wg.Go(func() {
			for range 50 {
				if err := g.SaveState(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 200 {
			s, err := learnt.Load(path, LearntEngine(cfg), time.Hour, time.Now())
			if err != nil && !errors.Is(err, learnt.ErrMissing) {
				t.Errorf("a reader while two write: %v", err)
				return
			}
			if err == nil && s.Cap != 24 && s.Cap != 40 {
				t.Errorf("a reader while two write: cap %d, want 24 or 40", s.Cap)
				return
			}
		}
	})
	wg.Wait()
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 1 {
		t.Errorf("files left beside the state: %v", left)
	}
	var logs bytes.Buffer
	g := newFromEnv(t, env("1"), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if got := g.Limiter().Limit(); (got != 24 && got != 40) || !strings.Contains(logs.String(), "state file restored") {
		t.Errorf("a new replica: cap %d, log %q; want 24 or 40, restored", got, logs.String())
	}
}
