package scenarios

import (
	"testing"

	"go.uber.org/goleak"
)

// Every run ends everything it started (engine, gateway, users,
// connections): checked here for the whole package.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
