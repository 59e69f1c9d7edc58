package learnt

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	t0  = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	eng = Engine{Upstream: "http://127.0.0.1:8000", TTFTms: 1000, TPOTms: 50, Percentile: 0.9}
)

func TestSaveLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kneecap.json")
	want := State{SavedAt: t0, Engine: eng, Cap: 192, GapA: 0.007, GapB: 6e-5, Reason: "hold"}
	if err := Save(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path, eng, time.Hour, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want.Version = Version
	if got != want {
		t.Fatalf("loaded %+v, want %+v", got, want)
	}
	// A second save replaces the first and leaves no temporary file.
	want.Cap = 200
	if err := Save(path, want); err != nil {
		t.Fatal(err)
	}
	if got, _ := Load(path, eng, 0, t0); got.Cap != 200 {
		t.Fatalf("after a second save: cap %d, want 200", got.Cap)
	}
	files, _ := os.ReadDir(filepath.Dir(path))
	if len(files) != 1 {
		t.Fatalf("files left beside the state: %v", files)
	}
}

// Every state that must not be restored is an error saying why, never a
// state: missing, stale, foreign, corrupt in each way.
func TestLoadRefuses(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := State{SavedAt: t0, Engine: eng, Cap: 64}
	save := func(name string, s State) string {
		p := filepath.Join(dir, name)
		if err := Save(p, s); err != nil {
			t.Fatal(err)
		}
		return p
	}
	other := eng
	other.TPOTms = 100
	future := good
	future.SavedAt = t0.Add(time.Hour)
	noCap := good
	noCap.Cap = 0
	for _, tc := range []struct {
		path, want string
		maxAge     time.Duration
	}{
		{filepath.Join(dir, "none.json"), "no state file yet", time.Hour},
		{save("stale.json", good), "stale", time.Minute},
		{save("foreign.json", State{SavedAt: t0, Engine: other, Cap: 64}), "foreign", time.Hour},
		{save("future.json", future), "corrupt: saved_at", time.Hour},
		{save("nocap.json", noCap), "corrupt: cap 0", time.Hour},
		{write("garbage.json", "\x00\x01 not json"), "corrupt", time.Hour},
		{write("truncated.json", `{"version": 1, "cap": 6`), "corrupt", time.Hour},
		{write("empty.json", ""), "corrupt", time.Hour},
		{write("version.json", `{"version": 99, "saved_at": "2026-12-06T12:00:00Z", "cap": 6}`), "version 99", time.Hour},
		{write("huge.json", strings.Repeat(" ", maxFileBytes+1)), "corrupt: larger than", time.Hour},
	} {
		s, err := Load(tc.path, eng, tc.maxAge, t0.Add(10*time.Minute))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("%s: %+v, %v; want an error naming the file and saying %q", filepath.Base(tc.path), s, err, tc.want)
		}
		if s.Cap != 0 {
			t.Errorf("%s: a refused state carries cap %d", filepath.Base(tc.path), s.Cap)
		}
	}
	if _, err := Load(filepath.Join(dir, "none.json"), eng, 0, t0); !errors.Is(err, ErrMissing) {
		t.Errorf("missing file: %v, want ErrMissing", err)
	}
}

// A state file in a directory that cannot be written is an error, and
// the old file stays as it was.
func TestSaveFailureKeepsTheOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kneecap.json")
	if err := Save(path, State{SavedAt: t0, Engine: eng, Cap: 32}); err != nil {
		t.Fatal(err)
	}
	if err := Save(filepath.Join(dir, "missing-dir", "kneecap.json"), State{SavedAt: t0, Engine: eng, Cap: 64}); err == nil {
		t.Fatal("saving into a missing directory: no error")
	}
	if s, err := Load(path, eng, 0, t0); err != nil || s.Cap != 32 {
		t.Fatalf("old file after a failed save: %+v, %v", s, err)
	}
}
