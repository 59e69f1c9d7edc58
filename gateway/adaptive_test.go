package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/admission/control"
)

// newFromEnv builds the gateway from environ as `kneecap serve` does.
func newFromEnv(t *testing.T, environ []string, opts ...Option) *Gateway {
	t.Helper()
	cfg, err := ConfigFromEnv(environ)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// getStatus serves one GET /status from the gateway's admin handler.
func getStatus(t *testing.T, g *Gateway) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	g.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status", nil))
	return rec
}

// New wires its own controller: adaptive (starting at MinCap) with
// MAX_CONCURRENCY unset, fixed at it when set; /status says "adaptive"
// only for the first.
func TestNewWiresItsController(t *testing.T) {
	for _, tc := range []struct {
		env      []string
		want     int
		adaptive bool
	}{
		{[]string{"KNEECAP_UPSTREAM=http://127.0.0.1:1"}, 1, true},
		{[]string{"KNEECAP_UPSTREAM=http://127.0.0.1:1", "KNEECAP_MAX_CONCURRENCY=5"}, 5, false},
		{[]string{"KNEECAP_UPSTREAM=http://127.0.0.1:1", "KNEECAP_INITIAL_CAP=6"}, 6, true},
		{[]string{"KNEECAP_UPSTREAM=http://127.0.0.1:1", "KNEECAP_INITIAL_CAP=6", "KNEECAP_MAX_CONCURRENCY=5"}, 5, false},
	} {
		g := newFromEnv(t, tc.env)
		if got := g.Limiter().Limit(); got != tc.want {
			t.Errorf("%v: limit %d, want %d", tc.env, got, tc.want)
		}
		var st Status
		if rec := getStatus(t, g); rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &st) != nil {
			t.Fatalf("%v: /status %d %s", tc.env, rec.Code, rec.Body)
		}
		if st.Adaptive != tc.adaptive || st.Controller == nil {
			t.Fatalf("%v: /status adaptive %v (controller %v), want %v", tc.env, st.Adaptive, st.Controller, tc.adaptive)
		}
		// A fresh adaptive gateway says it is still learning.
		var cs control.ControllerStatus
		if b, err := json.Marshal(st.Controller); err != nil || json.Unmarshal(b, &cs) != nil {
			t.Fatalf("%v: controller status %v", tc.env, st.Controller)
		}
		if cs.Learning != tc.adaptive || tc.adaptive && !strings.Contains(cs.Reason, "learning") {
			t.Errorf("%v: /status learning %v, reason %q", tc.env, cs.Learning, cs.Reason)
		}
	}
	// WithStaticCap: no controller at all.
	g := newFromEnv(t, []string{"KNEECAP_UPSTREAM=http://127.0.0.1:1"}, WithStaticCap())
	if got := g.Limiter().Limit(); got != DefaultMaxConcurrency || g.ctrl != nil || g.adaptive {
		t.Errorf("WithStaticCap: limit %d, controller %v", got, g.ctrl)
	}
	// An unset MaxCap is the controller's own bound.
	if got := control.NewController(control.ControllerConfig{MinCap: 1}).Config().MaxCap; got != control.DefaultMaxCap {
		t.Errorf("unset MaxCap became %d, want %d", got, control.DefaultMaxCap)
	}
}

// KNEECAP_PREFILL_PACING (default true) lets the controller pace prefills,
// with a static cap too: before any first token one request at a time may
// wait for it. false turns pacing off: free slots are granted at once.
func TestPrefillPacingSetting(t *testing.T) {
	for _, tc := range []struct {
		env        []string
		prefilling int // after one grant
	}{
		{[]string{"KNEECAP_UPSTREAM=http://127.0.0.1:1"}, 1},
		{[]string{"KNEECAP_UPSTREAM=http://127.0.0.1:1", "KNEECAP_MAX_CONCURRENCY=5"}, 1},
		{[]string{"KNEECAP_UPSTREAM=http://127.0.0.1:1", "KNEECAP_MAX_CONCURRENCY=5", "KNEECAP_PREFILL_PACING=false"}, 0},
	} {
		g := newFromEnv(t, tc.env)
		lim := g.Limiter()
		lim.SetLimit(5)
		tk, err := lim.Acquire(t.Context(), admission.Request{})
		if err != nil {
			t.Fatal(err)
		}
		if st := lim.State(); st.Prefilling != tc.prefilling {
			t.Errorf("%v: %d prefilling after one grant, want %d", tc.env, st.Prefilling, tc.prefilling)
		}
		tk.Release()
	}
	if _, err := ConfigFromEnv([]string{"KNEECAP_UPSTREAM=http://127.0.0.1:1", "KNEECAP_PREFILL_PACING=sometimes"}); err == nil ||
		!strings.Contains(err.Error(), "KNEECAP_PREFILL_PACING") {
		t.Errorf("bad KNEECAP_PREFILL_PACING: %v, want an error naming it", err)
	}
}

// With KNEECAP_MAX_CAP at its bound (4096) and measurements at every level
// up to it, /status stays small: it lists at most 64 levels, around the cap.
func TestStatusBodyIsBoundedAtTheLargestMaxCap(t *testing.T) {
	for _, env := range [][]string{
		{"KNEECAP_MAX_CAP=4096"},
		{"KNEECAP_MAX_CAP=4096", "KNEECAP_MAX_CONCURRENCY=4096"},
	} {
		g := newFromEnv(t, append([]string{"KNEECAP_UPSTREAM=http://127.0.0.1:1"}, env...))
		ctrl, _ := g.ctrl.(*adaptive)
		if ctrl == nil {
			t.Fatalf("%v: controller %T", env, g.ctrl)
		}
		now := time.Now()
		for n := 1; n <= 4096; n++ {
			ctrl.Loop.Chunk(now, n, time.Duration(20+n/100)*time.Millisecond)
			ctrl.Loop.FirstChunk(now, n, time.Duration(200+n/10)*time.Millisecond)
		}
		// One decision (the loop decides every second) fits the model,
		// so that /status also carries predictions and attainment.
		ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
		_ = ctrl.Run(ctx)
		cancel()

		rec := getStatus(t, g)
		var st struct {
			Controller control.ControllerStatus `json:"controller"`
		}
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &st) != nil {
			t.Fatalf("%v: /status %d: %.300s", env, rec.Code, rec.Body.String())
		}
		if n := len(st.Controller.Levels); n == 0 || n > 64 || st.Controller.MaxCap != 4096 {
			t.Errorf("%v: %d levels (max cap %d), want 1..64", env, n, st.Controller.MaxCap)
		}
		if rec.Body.Len() > 64<<10 {
			t.Errorf("%v: /status is %d bytes, want at most 64 KiB", env, rec.Body.Len())
		}
	}
}

// nanStatus is a controller whose status cannot be encoded (a NaN in a
// plain float64).
type nanStatus struct{}

func (nanStatus) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (nanStatus) Status() any                   { return map[string]any{"x": math.NaN()} }

// A status that cannot be encoded is a 500 with an OpenAI-shaped error
// body, never a 200 with an empty body.
func TestStatusEncodingErrorIs500(t *testing.T) {
	g := newFromEnv(t, []string{"KNEECAP_UPSTREAM=http://127.0.0.1:1"},
		WithCapControl(func(Host) (CapControl, error) { return nanStatus{}, nil }))
	rec := getStatus(t, g)
	var body struct {
		Error struct {
			Message, Type string
			Code          *string
		}
	}
	if rec.Code != 500 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") ||
		json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Error.Type != "server_error" || body.Error.Message == "" {
		t.Fatalf("/status %d %v: %s", rec.Code, rec.Header(), rec.Body)
	}
}

// The controller's settings are read and checked once, by ConfigFromEnv:
// a bad value names its variable, and every bound accepts its own limit.
func TestControllerSettings(t *testing.T) {
	up := "KNEECAP_UPSTREAM=http://127.0.0.1:1"
	// By the variable named ("" for none).
	for want, envs := range map[string][][]string{
		"": {nil, {"KNEECAP_SLO_PERCENTILE=0.5"}, {"KNEECAP_MIN_CAP=4096"}, {"KNEECAP_MAX_CAP=4096"}},
		"KNEECAP_SLO_PERCENTILE": {{"KNEECAP_SLO_PERCENTILE=0"}, {"KNEECAP_SLO_PERCENTILE=1"},
			{"KNEECAP_SLO_PERCENTILE=NaN"}, {"KNEECAP_SLO_PERCENTILE=-Inf"}, {"KNEECAP_SLO_PERCENTILE=x"}},
		"KNEECAP_MIN_CAP": {{"KNEECAP_MIN_CAP=0"}, {"KNEECAP_MIN_CAP=4097"}, {"KNEECAP_MIN_CAP=x"}},
		"KNEECAP_INITIAL_CAP": {{"KNEECAP_INITIAL_CAP=-1"}, {"KNEECAP_INITIAL_CAP=x"}, {"KNEECAP_INITIAL_CAP=4097"},
			{"KNEECAP_MIN_CAP=4", "KNEECAP_INITIAL_CAP=2"}, {"KNEECAP_MAX_CAP=4", "KNEECAP_INITIAL_CAP=5"}},
		"KNEECAP_MAX_CAP": {{"KNEECAP_MAX_CAP=-1"}, {"KNEECAP_MAX_CAP=4097"}, {"KNEECAP_MIN_CAP=8", "KNEECAP_MAX_CAP=4"},
			{"KNEECAP_MIN_CAP=5000", "KNEECAP_MAX_CAP=6000"}, {"KNEECAP_MIN_CAP=5000", "KNEECAP_MAX_CAP=4096"}},
	} {
		for _, env := range envs {
			if _, err := ConfigFromEnv(append([]string{up}, env...)); settingVar(err) != want {
				t.Errorf("%v: %v, want an error naming %q", env, err, want)
			}
		}
	}
	limits := [][]string{{"KNEECAP_MAX_CAP=4096", "KNEECAP_MIN_CAP=4096"}, {"KNEECAP_MAX_CONCURRENCY=4096"},
		{"KNEECAP_MAX_QUEUE=1048576"},
		// The budget of body bytes held at once must hold one body.
		{"KNEECAP_MAX_BODY_BYTES=1073741824", "KNEECAP_MAX_BODY_BYTES_TOTAL=1073741824"}}
	for _, v := range []string{"SLO_TTFT", "SLO_TPOT", "SLO_E2E", "SLO_WINDOW", "MAX_QUEUE_WAIT", "FIRST_TOKEN_TIMEOUT",
		"RESPONSE_TIMEOUT", "STREAM_IDLE_TIMEOUT", "CLIENT_WRITE_TIMEOUT", "UPSTREAM_IDLE_TIMEOUT",
		"CLIENT_HEADER_TIMEOUT", "CLIENT_READ_TIMEOUT", "CLIENT_IDLE_TIMEOUT", "DRAIN_TIMEOUT"} {
		limits = append(limits, []string{"KNEECAP_" + v + "=24h"})
	}
	for _, env := range limits {
		if _, err := ConfigFromEnv(append([]string{up}, env...)); err != nil {
			t.Errorf("%v, a limit itself: %v", env, err)
		}
	}
}

// settingVar is the variable a *SettingError names, "" for nil, and the
// message for any other error.
func settingVar(err error) string {
	if err == nil {
		return ""
	}
	var se *SettingError
	if errors.As(err, &se) {
		return se.Var
	}
	return fmt.Sprint("not a SettingError: ", err)
}
