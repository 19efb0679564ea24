package redisstore_test

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// quiet drops go-redis's own log lines (a dial that failed, once per try,
// while the tests kill servers on purpose).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// TestMain runs the tests with a goroutine-leak check, or, when the fleet
// test started this binary as one of its processes, that process's calls.
func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	if isFleetChild() {
		os.Exit(fleetChild())
	}
	goleak.VerifyTestMain(m)
}
