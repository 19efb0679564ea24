package coord

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordingPolicy is a Policy that records the holds it is told of.
type recordingPolicy struct{ holds []Hold }

func (*recordingPolicy) MaxServerWait() time.Duration { return time.Minute }
func (*recordingPolicy) FirstBounds(context.Context, *http.Request) (int, time.Time) {
	return 1, time.Time{}
}
func (p *recordingPolicy) Held(h Hold) { p.holds = append(p.holds, h) }

// Each closed gate names its reason; any other is the key being down.
func TestHoldReason(t *testing.T) {
	for g, want := range map[gate]HoldReason{gateWait: HoldServerWait, gateBudget: HoldBudget, gatePace: HoldPaced, gateInFlight: HoldInFlight, gateDown: HoldDown, gateProbe: HoldDown} {
		assert.Equal(t, want, holdReason(g), "gate %d", g)
	}
}

// A hold is told to the call's Policy as it begins (waiting, no end) and
// as it ends (its outcome and end); ending no hold does nothing.
func TestHoldIsToldTwice(t *testing.T) {
	co, stop := New(testConfig(Config{}))
	defer stop()
	req := mustRequest(t, context.Background())
	var p recordingPolicy
	cc := co.Join(req, &p, 0)
	defer cc.Leave()
	h := cc.beginHold(gateWait, time.Now(), 2)
	require.Len(t, p.holds, 1)
	assert.Equal(t, Hold{Request: req, N: 2, Key: "api.example.com", Reason: HoldServerWait, Start: h.Start}, p.holds[0])
	h.end(HoldReleased)
	require.Len(t, p.holds, 2)
	assert.Equal(t, HoldReleased, p.holds[1].Outcome)
	assert.False(t, p.holds[1].End.Before(h.Start))
	var none *holding
	assert.NotPanics(t, func() { none.end(HoldCanceled) })
}

// A refusal's text names the key, how long it was held and why; the root
// writes the user's (DownError).
func TestRefusedError(t *testing.T) {
	err := &Refused{Key: "x.test", Reason: HoldPaced, Waited: 2 * time.Second}
	assert.Equal(t, "llmretry: coordination refused a call on x.test: held 2s for reason 4, could wait no longer", err.Error())
}
