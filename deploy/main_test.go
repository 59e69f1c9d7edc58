package deploy

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// binDir holds the kneecap binary that TestDockerBuildIsStatic and the live
// test share (built once, by kneecapBinary).
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kneecap-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
