package scenarios

import (
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// InBubbles runs f as the only test of a test binary, so that f can call
// testing/synctest.Test (which needs a *testing.T) from a program that is
// not a test: `kneecap scenarios` runs the suite in virtual time this way.
// Subtests of f run parallel runs up to parallel at once.
//
// It goes through testing.MainStart, which the Go team does not promise to
// keep stable across releases; it works with Go 1.26. It parses the
// testing flags from a private argument list and, while f runs, sends the
// testing package's own output (PASS/FAIL lines) to stderr. Call it once
// per process.
func InBubbles(parallel int, stderr io.Writer, f func(t *testing.T)) error {
	args := os.Args
	stdout := os.Stdout
	defer func() { os.Args, os.Stdout = args, stdout }()
	os.Args = []string{args[0], "-test.run=^Suite$", "-test.parallel=" + strconv.Itoa(max(parallel, 1)), "-test.timeout=0"}
	os.Stdout = os.Stderr
	m := testing.MainStart(deps{}, []testing.InternalTest{{Name: "Suite", F: f}}, nil, nil, nil)
	if code := m.Run(); code != 0 {
		return fmt.Errorf("scenario runs failed (exit %d)", code)
	}
	return nil
}

// corpusEntry mirrors testing's unexported alias for fuzzing inputs.
type corpusEntry = struct {
	Parent     string
	Path       string
	Data       []byte
	Values     []any
	Generation int
	IsSeed     bool
}

var errNoFuzz = errors.New("not supported")

// deps is the minimal testDeps a MainStart caller supplies: no fuzzing, no
// profiles, no coverage.
type deps struct{}

func (deps) ImportPath() string                          { return "github.com/kneecap/kneecap/scenarios" }
func (deps) ModulePath() string                          { return "github.com/kneecap/kneecap" }
func (deps) MatchString(pat, str string) (bool, error)   { return true, nil }
func (deps) SetPanicOnExit0(bool)                        {}
func (deps) StartCPUProfile(io.Writer) error             { return errNoFuzz }
func (deps) StopCPUProfile()                             {}
func (deps) StartTestLog(io.Writer)                      {}
func (deps) StopTestLog() error                          { return nil }
func (deps) WriteProfileTo(string, io.Writer, int) error { return errNoFuzz }
func (deps) CoordinateFuzzing(time.Duration, int64, time.Duration, int64, int, []corpusEntry, []reflect.Type, string, string) error {
	return errNoFuzz
}
func (deps) RunFuzzWorker(func(corpusEntry) error) error              { return errNoFuzz }
func (deps) ReadCorpus(string, []reflect.Type) ([]corpusEntry, error) { return nil, nil }
func (deps) CheckCorpus([]any, []reflect.Type) error                  { return nil }
func (deps) ResetCoverage()                                           {}
func (deps) SnapshotCoverage()                                        {}
func (deps) InitRuntimeCoverage() (string, func(string, string) (string, error), func() float64) {
	return "", nil, nil
}
