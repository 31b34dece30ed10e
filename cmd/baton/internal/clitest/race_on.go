//go:build race

package clitest

// RaceEnabled: timings mean nothing under the race detector.
const RaceEnabled = true
