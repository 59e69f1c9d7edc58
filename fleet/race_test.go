//go:build race

package fleet

// raceEnabled skips the load tests under the race detector.
const raceEnabled = true
