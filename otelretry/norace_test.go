//go:build !race

package otelretry

// raceEnabled reports that the tests run under the race detector, where
// sync.Pool drops items at random and allocation counts are not exact.
const raceEnabled = false
