package adaptive

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
	"github.com/kneecap/kneecap/gateway"
)

// getStatus serves one GET /status from the gateway's admin handler.
func getStatus(t *testing.T, g *gateway.Gateway) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	g.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status", nil))
	return rec
}

// With KNEECAP_MAX_CAP at its bound (4096) and measurements at every level
// up to it, /status stays small: it lists at most 64 levels, around the cap.
func TestStatusBodyIsBoundedAtTheLargestMaxCap(t *testing.T) {
	for _, env := range [][]string{
		{"KNEECAP_MAX_CAP=4096"},
		{"KNEECAP_MAX_CAP=4096", "KNEECAP_MAX_CONCURRENCY=4096"},
	} {
		cfg, err := gateway.ConfigFromEnv(append([]string{"KNEECAP_UPSTREAM=http://127.0.0.1:1"}, env...))
		if err != nil {
			t.Fatal(err)
		}
		var ctrl *Controller
		acfg, _ := ConfigFromEnv(nil)
		g, err := gateway.New(cfg, gateway.WithController(func(h gateway.Host) (gateway.Controller, error) {
			c, err := New(acfg)(h)
			ctrl, _ = c.(*Controller)
			return c, err
		}))
		if err != nil || ctrl == nil {
			t.Fatalf("%v: %v", env, err)
		}
		now := time.Now()
		for n := 1; n <= 4096; n++ {
			ctrl.Runner.Chunk(now, n, time.Duration(20+n/100)*time.Millisecond)
			ctrl.Runner.FirstChunk(now, n, time.Duration(200+n/10)*time.Millisecond)
		}
		// One decision (the Runner decides every second) fits the model,
		// so that /status also carries predictions and attainment.
		ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
		_ = ctrl.Run(ctx)
		cancel()

		rec := getStatus(t, g)
		var st struct {
			Controller admission.ControllerStatus `json:"controller"`
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
	cfg, err := gateway.ConfigFromEnv([]string{"KNEECAP_UPSTREAM=http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(cfg, gateway.WithController(func(gateway.Host) (gateway.Controller, error) { return nanStatus{}, nil }))
	if err != nil {
		t.Fatal(err)
	}
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

// The knobs this package reads are also read by the gateway: both accept
// and refuse the same values, naming the same variable.
func TestConfigFromEnvAgreesWithTheGateway(t *testing.T) {
	up := "KNEECAP_UPSTREAM=http://127.0.0.1:1"
	for _, env := range [][]string{
		nil,
		{"KNEECAP_SLO_PERCENTILE=0.5"}, {"KNEECAP_SLO_PERCENTILE=0"}, {"KNEECAP_SLO_PERCENTILE=1"},
		{"KNEECAP_SLO_PERCENTILE=NaN"}, {"KNEECAP_SLO_PERCENTILE=-Inf"}, {"KNEECAP_SLO_PERCENTILE=x"},
		{"KNEECAP_MIN_CAP=0"}, {"KNEECAP_MIN_CAP=4096"}, {"KNEECAP_MIN_CAP=4097"}, {"KNEECAP_MIN_CAP=x"},
		{"KNEECAP_MAX_CAP=-1"}, {"KNEECAP_MAX_CAP=4096"}, {"KNEECAP_MAX_CAP=4097"}, {"KNEECAP_MAX_CAP=10000000"},
		{"KNEECAP_MIN_CAP=8", "KNEECAP_MAX_CAP=4"}, {"KNEECAP_MIN_CAP=5000", "KNEECAP_MAX_CAP=6000"},
		{"KNEECAP_MIN_CAP=5000", "KNEECAP_MAX_CAP=4096"},
	} {
		_, gerr := gateway.ConfigFromEnv(append([]string{up}, env...))
		_, aerr := ConfigFromEnv(env)
		if varOf(gerr) != varOf(aerr) {
			t.Errorf("%v: the gateway says %v, this package %v", env, gerr, aerr)
		}
	}
	// Every bound of gateway.Config.Validate accepts its own limit.
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
		if _, err := gateway.ConfigFromEnv(append([]string{up}, env...)); err != nil {
			t.Errorf("%v, a limit itself: %v", env, err)
		}
	}
}

// varOf is the variable a *gateway.SettingError names, "" for nil, and the
// message for any other error.
func varOf(err error) string {
	if err == nil {
		return ""
	}
	var se *gateway.SettingError
	if errors.As(err, &se) {
		return se.Var
	}
	return fmt.Sprint("not a SettingError: ", err)
}
