package learnt

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Version is the file format's version; a file of another is refused.
const Version = 1

// SaveInterval is how often a gateway writes its state while it runs: a
// gateway killed without its drain loses at most this much learning.
const SaveInterval = 30 * time.Second

// maxFileBytes bounds what Load reads: a state file is a few hundred bytes.
const maxFileBytes = 1 << 20

// Engine is what a state was learnt on: the engine's address as the
// gateway reaches it (KNEECAP_UPSTREAM, without credentials), and the
// targets and percentile the cap was chosen for. A state learnt on any
// other is foreign.
type Engine struct {
	Upstream   string  `json:"upstream"`
	TTFTms     float64 `json:"ttft_ms"`
	TPOTms     float64 `json:"tpot_ms"`
	E2Ems      float64 `json:"e2e_ms"`
	Percentile float64 `json:"percentile"`
}

// State is what a gateway saves.
type State struct {
	Version int       `json:"version"`
	SavedAt time.Time `json:"saved_at"`
	Engine  Engine    `json:"engine"`
	// Cap is the cap the controller held; a gateway restored from the
	// file starts there and ramps on from it.
	Cap int `json:"cap"`
	// Model is the fitted model at the save, for the operator (the
	// controller relearns it within seconds at the restored cap): the
	// time per output chunk a + b x running and engine TTFT a + b x
	// running, in seconds.
	GapA  float64 `json:"gap_a_seconds"`
	GapB  float64 `json:"gap_b_seconds"`
	TTFTA float64 `json:"engine_ttft_a_seconds"`
	TTFTB float64 `json:"engine_ttft_b_seconds"`
	// Reason is the controller's last reason, for the operator.
	Reason string `json:"reason,omitempty"`
	// Costs are the engine's costs in tokens as the controller learnt
	// them; a restored controller paces its first prefills by them.
	Costs Costs `json:"costs"`
}

// Costs is the engine's cost in tokens (all zero: not learnt): prefill =
// base + steps x the decode step + per token x prompt tokens; decode step =
// base + per running x running + per KV token x resident KV tokens; in
// seconds. MeanPrompt and KVPerRunning are in tokens.
type Costs struct {
	PrefillBase     float64 `json:"prefill_base_seconds"`
	PrefillSteps    float64 `json:"prefill_steps"`
	PrefillPerToken float64 `json:"prefill_seconds_per_token"`
	StepBase        float64 `json:"step_base_seconds"`
	StepPerRunning  float64 `json:"step_per_running_seconds"`
	StepPerKVToken  float64 `json:"step_per_kv_token_seconds"`
	MeanPrompt      float64 `json:"mean_prompt_tokens"`
	KVPerRunning    float64 `json:"kv_tokens_per_running"`
}

// Save writes s to path atomically: a temporary file beside it, synced,
// renamed over it.
func Save(path string, s State) error {
	s.Version = Version
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("state file %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("state file %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("state file %s: %w", path, err)
	}
	return nil
}

// ErrMissing is returned by Load when there is no file yet (a first start).
var ErrMissing = errors.New("no state file yet")

// Load reads the state at path and checks it: of this Version, saved at
// most maxAge before now (0: any age) and not in the future, learnt on
// want, with a cap of at least 1. The error says which check failed.
func Load(path string, want Engine, maxAge time.Duration, now time.Time) (State, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return State{}, fmt.Errorf("state file %s: %w", path, ErrMissing)
	}
	if err != nil {
		return State{}, fmt.Errorf("state file %s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return State{}, fmt.Errorf("state file %s: %w", path, err)
	}
	if len(b) > maxFileBytes {
		return State{}, fmt.Errorf("state file %s: corrupt: larger than %d bytes", path, maxFileBytes)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return State{}, fmt.Errorf("state file %s: corrupt: %v", path, err)
	}
	switch age := now.Sub(s.SavedAt); {
	case s.Version != Version:
		return State{}, fmt.Errorf("state file %s: version %d, this gateway reads %d", path, s.Version, Version)
	case s.SavedAt.IsZero() || age < -time.Minute:
		return State{}, fmt.Errorf("state file %s: corrupt: saved_at %s", path, s.SavedAt.Format(time.RFC3339))
	case maxAge > 0 && age > maxAge:
		return State{}, fmt.Errorf("state file %s: stale: saved %s ago, more than KNEECAP_STATE_MAX_AGE=%s", path, age.Round(time.Second), maxAge)
	case s.Engine != want:
		return State{}, fmt.Errorf("state file %s: foreign: learnt on %+v, this gateway runs %+v", path, s.Engine, want)
	case s.Cap < 1:
		return State{}, fmt.Errorf("state file %s: corrupt: cap %d", path, s.Cap)
	}
	return s, nil
}
