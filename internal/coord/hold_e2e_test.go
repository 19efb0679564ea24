package coord_test

// The records of holds (hold.go) through coordinated Transports: what a
// panic in them, or in the other callbacks, leaves behind.

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/coordination"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A callback that panics — OnHold at each hold outcome, OnAttempt on a
// probe, the Asker — reaches the caller that ran it, and leaves the shared
// state consistent: no probe lease held, no budget spent (in the store),
// nobody held (the engine's TestPanicInOnHoldLeavesNoWaiter). An
// hour later, the provider healthy, a new call goes straight out, and an
// ordinary 429 retry on the quiet key is not held by the budget.
func TestCoordinatedCallbackPanics(t *testing.T) {
	type when struct {
		name  string
		boom  func(coordination.Hold) bool // OnHold panics when it returns true
		boomA func(llmretry.Attempt) bool  // OnAttempt panics when it returns true
		ask   bool                         // the Asker panics
	}
	outcome := func(o coordination.HoldOutcome) func(coordination.Hold) bool {
		return func(h coordination.Hold) bool { return h.Outcome == o }
	}
	cases := []when{
		{name: "OnHold as a hold begins", boom: outcome(coordination.HoldWaiting)},
		{name: "OnHold as the call is sent as the probe", boom: outcome(coordination.HoldProbe)},
		{name: "OnHold as the call is released", boom: outcome(coordination.HoldReleased)},
		{name: "OnHold as the call gives up", boom: outcome(coordination.HoldGaveUp)},
		{name: "OnHold as the call is canceled", boom: outcome(coordination.HoldCanceled)},
		{name: "OnAttempt on the probe", boomA: func(a llmretry.Attempt) bool { return a.Probe }},
		{name: "OnAttempt on a budgeted retry", boomA: func(a llmretry.Attempt) bool { return a.N == 2 && a.Response != nil && a.Response.StatusCode == 429 }},
		{name: "the Asker", ask: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// 502 for 20 s, then 429s without a wait for 10 s (own
				// schedule retries, under the budget), then up.
				p := newFlaky(status(502), 100*time.Millisecond, window{0, 20 * time.Second})
				base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
					if at := time.Since(p.start); at >= 20*time.Second && at < 30*time.Second {
						return &http.Response{StatusCode: 429, Status: "429 Too Many Requests", Header: http.Header{}, Body: http.NoBody, Request: req}, nil
					}
					return p.RoundTrip(req)
				})
				var fired atomic.Bool
				boom := func() {
					if fired.CompareAndSwap(false, true) {
						panic("boom from user code")
					}
				}
				policy := llmretry.Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second}
				st := coordination.NewMemoryStore()
				config := coordination.Config{ProbeInterval: 2 * time.Second, Store: st}
				config.OnHold = func(h coordination.Hold) {
					if c.boom != nil && c.boom(h) {
						boom()
					}
				}
				policy.OnAttempt = func(a llmretry.Attempt) {
					if c.boomA != nil && c.boomA(a) {
						boom()
					}
				}
				if c.ask {
					policy.MaxRetries = 2 // so that the schedule runs out
					policy.OnExhausted = func(context.Context, *llmretry.Exhausted) bool { boom(); return false }
				}
				rt, err := llmretry.NewCoordinated(base, policy, config)
				require.NoError(t, err)
				var panics atomic.Int32
				var wg sync.WaitGroup
				for i := range 8 {
					wg.Go(func() {
						defer func() {
							if r := recover(); r != nil {
								assert.Equal(t, "boom from user code", r, "the panic reaches the caller as it is")
								panics.Add(1)
							}
						}()
						time.Sleep(time.Duration(i) * 3 * time.Second)
						d := time.Minute
						if i%3 == 2 {
							d = 10 * time.Second // gives up held
						}
						ctx, cancel := context.WithTimeout(context.Background(), d)
						defer cancel()
						if i == 4 {
							time.AfterFunc(2*time.Second, cancel) // canceled while held
						}
						resp, err := rt.RoundTrip(mustRequest(t, ctx))
						if err == nil {
							_, _ = io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
					})
				}
				wg.Wait()
				require.True(t, fired.Load(), "the callback was reached")
				assert.Equal(t, int32(1), panics.Load(), "the panic reached exactly its caller")
				f := load(t, st, "api.example.com") // the calls' one key
				assert.False(t, f.Probing(time.Now()), "the probe lease is released")
				assert.Zero(t, f.Retries, "the budget is returned")

				time.Sleep(time.Hour)
				fired.Store(true) // no more panics
				start := time.Now()
				n := len(p.arrivals())
				resp, err := rt.RoundTrip(mustRequest(t, context.Background()))
				require.NoError(t, err)
				resp.Body.Close()
				assert.Equal(t, start.Sub(p.start), p.arrivals()[n], "straight out, an hour later")
			})
		})
	}
}
