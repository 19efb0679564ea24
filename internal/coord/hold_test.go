package coord

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/llmretry/llmretry/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testPolicy is a Policy that honours server waits up to a minute and
// whose calls may send one attempt, with no last instant.
type testPolicy struct{}

func (testPolicy) MaxServerWait() time.Duration { return time.Minute }
func (testPolicy) FirstBounds(context.Context, *http.Request) (int, time.Time) {
	return 1, time.Time{}
}

// Each closed gate names its reason; any other is the key being down.
func TestHoldReason(t *testing.T) {
	for g, want := range map[gate]coordination.HoldReason{gateWait: coordination.HoldServerWait, gateBudget: coordination.HoldBudget, gatePace: coordination.HoldPaced, gateInFlight: coordination.HoldInFlight, gateDown: coordination.HoldDown, gateProbe: coordination.HoldDown} {
		assert.Equal(t, want, holdReason(g), "gate %d", g)
	}
}

// A hold is told to the Config's OnHold as it begins (waiting, no end) and
// as it ends (its outcome and end); ending no hold does nothing, and a
// Coordinator without OnHold tells nobody.
func TestHoldIsToldTwice(t *testing.T) {
	var log testkit.Log[coordination.Hold]
	co := newCoordinator(t, coordination.Config{OnHold: log.Add})
	req := mustRequest(t, context.Background())
	cc := co.join(req, testPolicy{}, 0)
	defer cc.Leave()
	h := cc.beginHold(gateWait, time.Now(), 2)
	told := log.Take()
	require.Len(t, told, 1)
	assert.Equal(t, coordination.Hold{Request: req, N: 2, Key: "api.example.com", Reason: coordination.HoldServerWait, Start: h.Start}, told[0])
	h.end(coordination.HoldReleased)
	told = log.Take()
	require.Len(t, told, 1)
	assert.Equal(t, coordination.HoldReleased, told[0].Outcome)
	assert.False(t, told[0].End.Before(h.Start))
	var none *holding
	assert.NotPanics(t, func() { none.end(coordination.HoldCanceled) })

	silent, stopSilent := New(coordination.Config{}, testCore())
	defer stopSilent()
	quiet := silent.join(req, testPolicy{}, 0)
	defer quiet.Leave()
	assert.NotPanics(t, func() { quiet.beginHold(gateDown, time.Now(), 1).end(coordination.HoldGaveUp) }, "no OnHold: nothing to tell")
}

// A call that cannot wait is told why in a *coordination.HeldError with
// every field its key's facts give: how long it was down and why, the
// server's wait and what was left of it, how long the call waited, and the
// last failure as an error whose text is its kind (none known: no Last).
func TestHeldError(t *testing.T) {
	co := newCoordinator(t, coordination.Config{})
	cc := co.join(mustRequest(t, context.Background()), testPolicy{}, 0)
	defer cc.Leave()
	now := time.Now()
	since := now.Add(-time.Minute)
	f := store.Facts{DownSince: since, DownUntil: now.Add(time.Minute), WaitUntil: now.Add(time.Hour), Reason: "429 Too Many Requests"}
	d := cc.heldError(f, gatePace, now, now.Add(-2*time.Second))
	assert.Equal(t, "api.example.com", d.Key)
	assert.Equal(t, coordination.HoldPaced, d.Reason)
	assert.Equal(t, since, d.Since)
	assert.Equal(t, time.Minute, d.For)
	assert.Equal(t, now.Add(time.Hour), d.Until)
	assert.Equal(t, time.Hour, d.Left)
	assert.Equal(t, 2*time.Second, d.Waited)
	require.Error(t, d.Last)
	assert.Equal(t, "429 Too Many Requests", d.Last.Error())

	d = cc.heldError(store.Facts{}, gateBudget, now, now)
	assert.Equal(t, coordination.HoldBudget, d.Reason)
	assert.Nil(t, d.Last, "no failure known: no Last")
	assert.True(t, d.Since.IsZero())
	assert.True(t, d.Until.IsZero())
}

// A panic in OnHold, as a hold begins or as it ends with the call sent as
// the probe, reaches the call, and leaves no waiter on the key and no
// probe lease once the call leaves. (Through Transports, at every
// outcome: TestCoordinatedCallbackPanics.)
func TestPanicInOnHoldLeavesNoWaiter(t *testing.T) {
	for _, at := range []coordination.HoldOutcome{coordination.HoldWaiting, coordination.HoldProbe} {
		synctest.Test(t, func(t *testing.T) {
			boom := func(h coordination.Hold) {
				if h.Outcome == at {
					panic("boom from OnHold")
				}
			}
			co := newCoordinator(t, coordination.Config{OnHold: boom})
			ctx := context.Background()
			req := mustRequest(t, ctx)
			attempt(t, co, req, 0, HealthDown)
			cc := co.join(req, &boundsPolicy{left: 3}, 0)
			assert.PanicsWithValue(t, "boom from OnHold", func() { _, _ = cc.Admit(ctx, Admission{N: 1}) }, at.String())
			cc.Leave()
			k := co.Stats(time.Now())["api.example.com"]
			assert.Zero(t, k.Waiters, at.String())
			assert.Zero(t, k.Calls, at.String())
			assert.False(t, k.Facts.Probing(time.Now()), "%v: the probe lease is released", at)
		})
	}
}
