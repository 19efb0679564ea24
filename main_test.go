package llmretry

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the test binary if any goroutine is still running once the
// tests are done: no request, retry wait, test server or transport may
// leave one behind. Tests close their servers and their transports' idle
// connections instead of being ignored here.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
