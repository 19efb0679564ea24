package llmretry

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDownErrorText(t *testing.T) {
	since := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	last := errors.New(`Post "https://x.test/v1?key=SECRET": connection refused`)
	for _, tc := range []struct {
		name string
		e    DownError
		want string
	}{
		{"down", DownError{Key: "x.test#0badf00d", Reason: HoldDown, Since: since, For: 3 * time.Minute, Waited: 2 * time.Minute, Last: last},
			`llmretry: provider x.test#0badf00d down for 3m0s: held 2m0s, could wait no longer; last failure: Post "https://x.test/v1?key=…": connection refused`},
		{"server wait", DownError{Key: "x.test", Reason: HoldServerWait, Until: since, Left: 90 * time.Second, Last: &failedStatus{429, "429 Too Many Requests"}},
			"llmretry: provider x.test asking to wait 1m30s more: held 0s, could wait no longer; last failure: 429 Too Many Requests"},
		{"down and waiting", DownError{Key: "x.test", Reason: HoldServerWait, Since: since, For: time.Minute, Until: since, Left: time.Second},
			"llmretry: provider x.test down for 1m0s and asking to wait 1s more: held 0s, could wait no longer"},
		{"budget", DownError{Key: "x.test", Reason: HoldBudget, Waited: time.Second, Last: &failedStatus{code: 429}},
			"llmretry: provider x.test: retry budget spent: held 1s, could wait no longer; last failure: status 429"},
		{"paced", DownError{Key: "x.test", Reason: HoldPaced, Until: since, Left: 30 * time.Second},
			"llmretry: provider x.test paced under a rate limit, its turn 30s away: held 0s, could wait no longer"},
		{"at the limit on calls in flight", DownError{Key: "x.test", Reason: HoldInFlight, Waited: 4 * time.Second, Last: &failedStatus{code: 429}},
			"llmretry: provider x.test: at the limit on calls in flight: held 4s, could wait no longer; last failure: status 429"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.e.Error())
			assert.Equal(t, tc.e.Last, errors.Unwrap(&tc.e))
		})
	}
}

// Every reason and outcome has its name; an unknown one says so.
func TestHoldNames(t *testing.T) {
	for r, want := range map[HoldReason]string{HoldDown: "provider down", HoldServerWait: "server wait", HoldBudget: "retry budget spent", HoldPaced: "paced under a rate limit", HoldInFlight: "at the limit on calls in flight", 0: "unknown"} {
		assert.Equal(t, want, r.String())
	}
	for o, want := range map[HoldOutcome]string{HoldWaiting: "waiting", HoldProbe: "sent as the probe", HoldReleased: "released", HoldGaveUp: "gave up", HoldCanceled: "canceled", 99: "unknown"} {
		assert.Equal(t, want, o.String())
	}
}

// A hold renders on one line, its request without user information or
// query (marked "?…"), and its length once it ended.
func TestHoldString(t *testing.T) {
	req, err := http.NewRequest("POST", "https://user:pw@generativelanguage.googleapis.com/v1/models?key=AIzaSecret", nil)
	require.NoError(t, err)
	start := time.Now()
	h := Hold{Request: req, N: 2, Key: "generativelanguage.googleapis.com#1a2b3c4d", Reason: HoldDown, Start: start}
	assert.Equal(t, "hold POST https://generativelanguage.googleapis.com/v1/models?… on generativelanguage.googleapis.com#1a2b3c4d (provider down): waiting", h.String())
	h.End, h.Outcome = start.Add(1500*time.Millisecond), HoldReleased
	assert.Equal(t, "hold POST https://generativelanguage.googleapis.com/v1/models?… on generativelanguage.googleapis.com#1a2b3c4d (provider down): released after 1.5s", h.String())
	assert.NotContains(t, h.String(), "AIza")
}
