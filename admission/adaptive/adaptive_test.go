package adaptive

import (
	"strings"
	"testing"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/gateway"
)

func TestConfigFromEnv(t *testing.T) {
	c, err := ConfigFromEnv(nil)
	if err != nil || c.Percentile != 0.9 || c.MinCap != 1 || c.MaxCap != 0 {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	// MaxCap 0 is unset: the controller's own bound.
	if got := admission.NewController(admission.ControllerConfig{MinCap: c.MinCap, MaxCap: c.MaxCap}).Config().MaxCap; got != admission.DefaultMaxCap {
		t.Errorf("unset MaxCap became %d, want %d", got, admission.DefaultMaxCap)
	}
	for _, tc := range []struct{ env, want string }{
		{"KNEECAP_SLO_PERCENTILE=1.5", "KNEECAP_SLO_PERCENTILE"},
		{"KNEECAP_SLO_PERCENTILE=x", "KNEECAP_SLO_PERCENTILE"},
		{"KNEECAP_MIN_CAP=0", "KNEECAP_MIN_CAP"},
		{"KNEECAP_MAX_CAP=-1", "KNEECAP_MAX_CAP"},
		{"KNEECAP_MAX_CAP=x", "KNEECAP_MAX_CAP"},
	} {
		if _, err := ConfigFromEnv([]string{tc.env}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s", tc.env, err, tc.want)
		}
	}
}

// newGateway builds the gateway from environ with the controller New makes
// from its defaults, as `kneecap serve` does.
func newGateway(t *testing.T, environ []string) *gateway.Gateway {
	t.Helper()
	cfg, err := gateway.ConfigFromEnv(environ)
	if err != nil {
		t.Fatal(err)
	}
	acfg, _ := ConfigFromEnv(nil)
	g, err := gateway.New(cfg, gateway.WithController(New(acfg)))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// New wires the controller into the gateway: adaptive (starting at MinCap)
// with MAX_CONCURRENCY unset, fixed at it when set.
func TestNewWiresTheGateway(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want int
	}{
		{[]string{"KNEECAP_UPSTREAM=http://127.0.0.1:1"}, 1},
		{[]string{"KNEECAP_UPSTREAM=http://127.0.0.1:1", "KNEECAP_MAX_CONCURRENCY=5"}, 5},
	} {
		g := newGateway(t, tc.env)
		if got := g.Limiter().Limit(); got != tc.want {
			t.Errorf("%v: limit %d, want %d", tc.env, got, tc.want)
		}
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
		g := newGateway(t, tc.env)
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
	if _, err := gateway.ConfigFromEnv([]string{"KNEECAP_UPSTREAM=http://127.0.0.1:1", "KNEECAP_PREFILL_PACING=sometimes"}); err == nil ||
		!strings.Contains(err.Error(), "KNEECAP_PREFILL_PACING") {
		t.Errorf("bad KNEECAP_PREFILL_PACING: %v, want an error naming it", err)
	}
}
