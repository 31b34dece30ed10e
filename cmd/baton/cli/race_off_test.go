//go:build !race

package cli

// raceEnabled: timings mean nothing under the race detector.
const raceEnabled = false
