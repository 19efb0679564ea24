package redisstore_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests with a goroutine-leak check, or, when the fleet
// test started this binary as one of its processes, that process's calls.
func TestMain(m *testing.M) {
	if isFleetChild() {
		os.Exit(fleetChild())
	}
	goleak.VerifyTestMain(m)
}
