package epp

import (
	"os"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/config/loader"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/flowcontrol"
)

// TestMain registers the feature gates as the picker's runner does before
// it loads a configuration, and gives controller-runtime's logger, which
// the picker's plugins log through, a sink that drops everything.
func TestMain(m *testing.M) {
	loader.RegisterFeatureGate(datalayer.ExperimentalDatalayerFeatureGate)
	loader.RegisterFeatureGate(datalayer.EnableLegacyMetricsFeatureGate)
	loader.RegisterFeatureGate(flowcontrol.FeatureGate)
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}
