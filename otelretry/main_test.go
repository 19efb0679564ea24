package otelretry

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the test binary if any goroutine is still running once
// the tests are done: no request, wait or hold may leave one behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
