package coordination_test

import (
	"errors"
	"testing"
	"time"

	"github.com/llmretry/llmretry/coordination"
	"github.com/stretchr/testify/assert"
)

// A HeldError says what held the call, for how long, and its last failure
// without credentials; it unwraps to the last failure.
func TestHeldErrorText(t *testing.T) {
	since := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	last := errors.New(`Post "https://x.test/v1?key=SECRET": connection refused`)
	for _, tc := range []struct {
		name string
		e    coordination.HeldError
		want string
	}{
		{"down", coordination.HeldError{Key: "x.test#0badf00d", Reason: coordination.HoldDown, Since: since, For: 3 * time.Minute, Waited: 2 * time.Minute, Last: last},
			`llmretry: provider x.test#0badf00d down for 3m0s: held 2m0s, could wait no longer; last failure: Post "https://x.test/v1?key=…": connection refused`},
		{"server wait", coordination.HeldError{Key: "x.test", Reason: coordination.HoldServerWait, Until: since, Left: 90 * time.Second, Last: errors.New("429 Too Many Requests")},
			"llmretry: provider x.test asking to wait 1m30s more: held 0s, could wait no longer; last failure: 429 Too Many Requests"},
		{"down and waiting", coordination.HeldError{Key: "x.test", Reason: coordination.HoldServerWait, Since: since, For: time.Minute, Until: since, Left: time.Second},
			"llmretry: provider x.test down for 1m0s and asking to wait 1s more: held 0s, could wait no longer"},
		{"budget", coordination.HeldError{Key: "x.test", Reason: coordination.HoldBudget, Waited: time.Second, Last: errors.New("status 429")},
			"llmretry: provider x.test: retry budget spent: held 1s, could wait no longer; last failure: status 429"},
		{"paced", coordination.HeldError{Key: "x.test", Reason: coordination.HoldPaced, Until: since, Left: 30 * time.Second},
			"llmretry: provider x.test paced under a rate limit, its turn 30s away: held 0s, could wait no longer"},
		{"at the limit on calls in flight", coordination.HeldError{Key: "x.test", Reason: coordination.HoldInFlight, Waited: 4 * time.Second, Last: errors.New("status 429")},
			"llmretry: provider x.test: at the limit on calls in flight: held 4s, could wait no longer; last failure: status 429"},
		{"zero", coordination.HeldError{}, "llmretry: provider : unknown: held 0s, could wait no longer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.e.Error())
			assert.Equal(t, tc.e.Last, errors.Unwrap(&tc.e))
		})
	}
}
