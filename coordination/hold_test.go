package coordination_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/llmretry/llmretry/coordination"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every reason and outcome has its name; an unknown one (the zero
// HoldReason among them) says so.
func TestHoldNames(t *testing.T) {
	for r, want := range map[coordination.HoldReason]string{coordination.HoldDown: "provider down", coordination.HoldServerWait: "server wait", coordination.HoldBudget: "retry budget spent", coordination.HoldPaced: "paced under a rate limit", coordination.HoldInFlight: "at the limit on calls in flight", 0: "unknown"} {
		assert.Equal(t, want, r.String())
	}
	for o, want := range map[coordination.HoldOutcome]string{coordination.HoldWaiting: "waiting", coordination.HoldProbe: "sent as the probe", coordination.HoldReleased: "released", coordination.HoldGaveUp: "gave up", coordination.HoldCanceled: "canceled", 99: "unknown"} {
		assert.Equal(t, want, o.String())
	}
	var zero coordination.HoldOutcome
	assert.Equal(t, coordination.HoldWaiting, zero, "the zero outcome: not ended")
}

// A hold renders on one line, its request without user information or
// query (marked "?…"), and its length once it ended; the zero Hold
// renders too.
func TestHoldString(t *testing.T) {
	req, err := http.NewRequest("POST", "https://user:pw@generativelanguage.googleapis.com/v1/models?key=AIzaSecret", nil)
	require.NoError(t, err)
	start := time.Now()
	h := coordination.Hold{Request: req, N: 2, Key: "generativelanguage.googleapis.com#1a2b3c4d", Reason: coordination.HoldDown, Start: start}
	assert.Equal(t, "hold POST https://generativelanguage.googleapis.com/v1/models?… on generativelanguage.googleapis.com#1a2b3c4d (provider down): waiting", h.String())
	h.End, h.Outcome = start.Add(1500*time.Millisecond), coordination.HoldReleased
	assert.Equal(t, "hold POST https://generativelanguage.googleapis.com/v1/models?… on generativelanguage.googleapis.com#1a2b3c4d (provider down): released after 1.5s", h.String())
	assert.NotContains(t, h.String(), "AIza")
	assert.NotContains(t, h.String(), "pw")
	assert.Equal(t, "hold on  (unknown): waiting", coordination.Hold{}.String())
}
