//go:build race

package scenarios

// raceEnabled skips the heavy suite under the race detector; CI runs it in
// a separate step without -race.
const raceEnabled = true
