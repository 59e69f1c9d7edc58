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
		cfg, err := gateway.ConfigFromEnv(tc.env)
		if err != nil {
			t.Fatal(err)
		}
		acfg, _ := ConfigFromEnv(nil)
		g, err := gateway.New(cfg, gateway.WithController(New(acfg)))
		if err != nil {
			t.Fatal(err)
		}
		if got := g.Limiter().Limit(); got != tc.want {
			t.Errorf("%v: limit %d, want %d", tc.env, got, tc.want)
		}
	}
}
