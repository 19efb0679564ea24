package coord_test

// The gate's behaviour (gate.go) through coordinated Transports: down keys
// and their probes, server waits, the release and its spread, the retry
// budget, giving up without sending, and what moves a key; then the
// records of holds (hold.go) and provider keys (keys.go), each in its
// section below.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/internal/clock"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCoordinatedOutageOneProbeAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const calls, recovery, gen = 20, 60 * time.Second, time.Second
		p := newFlaky(status(502), gen, window{0, recovery})
		var h holds
		var mu sync.Mutex
		var probes []llmretry.Attempt
		rt, err := llmretry.NewCoordinated(p, llmretry.Policy{Waits: hostWaits, Reserve: time.Minute, OnAttempt: func(a llmretry.Attempt) {
			if a.Probe {
				mu.Lock()
				probes = append(probes, a)
				mu.Unlock()
			}
		}}, coordination.Config{OnHold: h.Add})
		require.NoError(t, err)

		results := callMany(t, rt, p.start, calls, 0, 8*time.Minute, nil)

		for i, r := range results {
			require.NoError(t, r.err, "call %d", i)
			// Recovery lag: at most a probe interval, the probe's
			// generation, the release spread and the call's own.
			assert.Less(t, r.at-recovery, probeInterval+gen+releaseSpread+gen, "call %d", i)
		}
		at := p.arrivals()
		// The calls start together: the first ones to be sent fail at
		// once (502) and mark the key down, and the rest are held before
		// their first attempt.
		var first, during []time.Duration // at 0 s; the probes during the outage
		for _, a := range at {
			switch {
			case a == 0:
				first = append(first, a)
			case a < recovery:
				during = append(during, a)
			}
		}
		require.NotEmpty(t, first)
		assert.Equal(t, 1, p.maxInFlight(window{time.Nanosecond, recovery}), "one probe at a time during the outage")
		prev := time.Duration(0)
		for _, a := range during {
			gap := a - prev
			assert.GreaterOrEqual(t, gap, probeInterval*4/5, "probe gap")
			assert.LessOrEqual(t, gap, probeInterval, "probe gap")
			prev = a
		}
		// Everyone's first attempt, the probes, then one attempt per call
		// after the recovery (the successful probe among them).
		assert.Equal(t, len(first)+len(during)+calls, len(at), "attempts: %v", at)
		assert.GreaterOrEqual(t, len(during), int(recovery/probeInterval)-1)
		assert.LessOrEqual(t, len(during), int(recovery*5/(probeInterval*4))+1)
		mu.Lock()
		assert.Len(t, probes, len(during)+1, "Attempt.Probe marks every probe, the one that got through too")
		mu.Unlock()
		ended := h.ended()
		assert.Equal(t, len(during)+1, ended[coordination.HoldProbe], "holds that ended as the probe")
		assert.Equal(t, calls-1, ended[coordination.HoldReleased], "holds that ended in a release")

		// The release is spread, not all in one instant, and within the
		// spread after the successful probe's answer.
		var after []time.Duration
		for _, a := range at {
			if a >= recovery {
				after = append(after, a)
			}
		}
		released := after[1:]
		assert.Greater(t, released[len(released)-1]-released[0], time.Duration(0), "released in a spread")
		assert.Less(t, released[len(released)-1]-after[0], gen+releaseSpread, "released within the spread")
	})
}

func TestCoordinatedNewCallsAreHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(refused, time.Second, window{0, 12 * time.Second})
		var h holds
		rt, err := llmretry.NewCoordinated(p, llmretry.Policy{}, coordination.Config{ProbeInterval: 10 * time.Second, OnHold: h.Add})
		require.NoError(t, err)
		// The first call fails (refused), marking the key down; the other
		// four start during the outage and are held, not sent.
		results := callMany(t, rt, p.start, 5, time.Second, 5*time.Minute, nil)
		for _, r := range results {
			assert.NoError(t, r.err)
		}
		at := p.arrivals()
		require.Len(t, at, 8, "%v", at)
		assert.Equal(t, time.Duration(0), at[0])
		assert.LessOrEqual(t, at[1], time.Second, "the first probe goes at the failing call's own first wait: %v", at)
		for _, a := range at[2:] {
			assert.GreaterOrEqual(t, a, 8*time.Second, "nothing but the probes is sent while the key is down: %v", at)
		}
		// 0: the first call; within 1 s: the first probe, at that call's
		// own first wait (one blip is not an outage), refused; 8–10 s
		// later: a probe, refused; 8–10 s after it: a probe that gets
		// through; then the other four.
		for _, x := range h.All() {
			assert.Equal(t, coordination.HoldDown, x.Reason)
			assert.Equal(t, "api.example.com", x.Key, "no credential, no hash")
		}
		starts := 0
		for _, x := range h.All() {
			if x.Outcome == coordination.HoldWaiting {
				starts++
				assert.True(t, x.End.IsZero())
			}
		}
		assert.GreaterOrEqual(t, starts, 5, "every call was held")
		assert.Equal(t, 2*starts, len(h.All()), "every hold has a start and an end record")
	})
}

func TestCoordinatedServerWaitHoldsTheKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The provider rate-limits with Retry-After: 30 until 30 s; calls
		// start over the first 20 s.
		p := newFlaky(status(429, "Retry-After", "30"), time.Second, window{0, 30 * time.Second})
		var h holds
		rt, err := llmretry.NewCoordinated(p, llmretry.Policy{Waits: hostWaits, Reserve: time.Minute}, coordination.Config{OnHold: h.Add})
		require.NoError(t, err)
		results := callMany(t, rt, p.start, 20, time.Second, 8*time.Minute, nil)
		for _, r := range results {
			assert.NoError(t, r.err)
		}
		at := p.arrivals()
		assert.Equal(t, time.Duration(0), at[0])
		for _, a := range at[1:] {
			assert.GreaterOrEqual(t, a, 30*time.Second, "nothing is sent before the server's wait is over")
			assert.Less(t, a, 30*time.Second+releaseSpread, "everyone goes within the spread")
		}
		assert.Len(t, at, 21, "one 429, then one attempt per call")
		for _, x := range h.All() {
			assert.Equal(t, coordination.HoldServerWait, x.Reason, x.String())
		}
	})
}

func TestCoordinatedGivesUpWithoutSending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(status(529), time.Second, window{0, time.Hour})
		var h holds
		rt, err := llmretry.NewCoordinated(p, llmretry.Policy{Waits: hostWaits, Reserve: time.Minute}, coordination.Config{ProbeInterval: 20 * time.Second, OnHold: h.Add})
		require.NoError(t, err)
		key := "sk-secret-value-0123456789"
		// Deadline 3 min, reserve 1 min: each call may wait until 2 min.
		results := callMany(t, rt, p.start, 2, 90*time.Second, 3*time.Minute, func(_ int, req *http.Request) { req.Header.Set("Authorization", "Bearer "+key) })

		for i, r := range results {
			require.Error(t, r.err)
			var ex *llmretry.Exhausted
			require.ErrorAs(t, r.err, &ex)
			var down *coordination.HeldError
			require.ErrorAs(t, r.err, &down, "call %d", i)
			assert.Equal(t, time.Duration(i)*90*time.Second+2*time.Minute, r.at, "call %d gives up at its deadline minus the reserve", i)
			assert.Equal(t, p.start, down.Since)
			assert.Equal(t, r.at, down.For, "down since the first 529")
			assert.Contains(t, r.err.Error(), "down for "+r.at.String())
			assert.Contains(t, r.err.Error(), "last failure: 529")
			assert.NotContains(t, r.err.Error(), key)
			assert.True(t, strings.HasPrefix(down.Key, "api.example.com#"), down.Key)
		}
		// The first call: its own attempt, then probes at most 20 s apart
		// until 2 min; the second call, started at 90 s, is held and
		// probes in its turn; nothing after either call gave up.
		at := p.arrivals()
		assert.Equal(t, time.Duration(0), at[0])
		for _, a := range at {
			assert.Less(t, a, 3*time.Minute+30*time.Second, "nothing sent after the last call gave up")
		}
		assert.Equal(t, 1, p.maxInFlight(window{time.Nanosecond, time.Hour}))
		assert.Equal(t, 2, h.ended()[coordination.HoldGaveUp])
	})
}

// A coordinated give-up (the key down for longer than the call can wait)
// is llmretry.ErrNoTimeLeft, and still a *coordination.HeldError.
func TestCoordinatedGiveUpReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(status(529), time.Second, window{0, time.Hour})
		rt, err := llmretry.NewCoordinated(p, llmretry.Policy{Waits: hostWaits, Reserve: time.Minute}, coordination.Config{ProbeInterval: 20 * time.Second})
		require.NoError(t, err)
		results := callMany(t, rt, p.start, 2, 30*time.Second, 3*time.Minute, nil)
		for i, r := range results {
			assert.ErrorIs(t, r.err, llmretry.ErrNoTimeLeft, "call %d", i)
			var down *coordination.HeldError
			assert.ErrorAs(t, r.err, &down, "call %d", i)
			assert.Contains(t, r.err.Error(), "no time left", "call %d", i)
		}
	})
}

func TestCoordinatedServerWaitAboveMaxRetryAfterGivesUpAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(status(429, "Retry-After", "120"), time.Second, window{0, time.Hour})
		rt, err := llmretry.NewCoordinated(p, llmretry.Policy{}, coordination.Config{})
		require.NoError(t, err)
		ctx := context.Background()
		// The first call honours 2 min (its MaxRetryAfter is 5 min): the
		// key is held until then.
		done := make(chan error, 1)
		go func() {
			resp, err := rt.RoundTrip(mustRequest(t, ctx))
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
		time.Sleep(time.Second)
		// A second call whose policy honours at most 1 min gives up at once.
		req := mustRequest(t, llmretry.WithPolicy(ctx, llmretry.Policy{MaxRetryAfter: time.Minute}))
		start := time.Now()
		_, err = rt.RoundTrip(req)
		var down *coordination.HeldError
		require.ErrorAs(t, err, &down)
		assert.Equal(t, time.Duration(0), time.Since(start))
		assert.Equal(t, 119*time.Second, down.Left)
		assert.True(t, down.Since.IsZero(), "a 429 does not mark the key down")
		assert.Contains(t, err.Error(), "asking to wait 1m59s more")
		assert.Len(t, p.arrivals(), 1, "the second call sent nothing")
		<-done
	})
}

func TestCoordinatedRetryBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 408 (a retryable answer that is neither an outage nor a rate
		// limit), taking 500 ms each, for a minute: the key is never down,
		// so each call retries on its own schedule (every second), within
		// the budget: max(3, 0.2 × 40) = 8. (A 429 with many calls in
		// flight limits them instead: TestCoordinatedInFlightLimit.)
		const calls = 40
		p := newFlaky(status(408), 0, window{0, time.Minute})
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if err := clock.Sleep(req.Context(), 500*time.Millisecond); err != nil {
				return nil, err
			}
			return p.RoundTrip(req)
		})
		var h holds
		rt, err := llmretry.NewCoordinated(base, llmretry.Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second}, coordination.Config{OnHold: h.Add})
		require.NoError(t, err)
		results := callMany(t, rt, p.start, calls, 0, 3*time.Minute, nil)
		for _, r := range results {
			assert.NoError(t, r.err)
		}
		// Each request spends its 500 ms in base before it reaches p and
		// is answered at once, so p sees no overlap; the requests that
		// arrive within one 500 ms window were in flight together.
		at := p.arrivals()
		perWindow := map[time.Duration]int{}
		for _, a := range at[calls:] {
			if a < time.Minute {
				perWindow[a/(500*time.Millisecond)]++
			}
		}
		most := 0
		for _, n := range perWindow {
			most = max(most, n)
		}
		assert.LessOrEqual(t, most, 8, "retries in flight stay within the budget")
		assert.Positive(t, h.ended()[coordination.HoldReleased], "some retries were held by the budget")
		for _, x := range h.All() {
			assert.Equal(t, coordination.HoldBudget, x.Reason)
		}

		// Without coordination, every call retries every second.
		p2 := newFlaky(status(408), 0, window{0, time.Minute})
		base2 := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if err := clock.Sleep(req.Context(), 500*time.Millisecond); err != nil {
				return nil, err
			}
			return p2.RoundTrip(req)
		})
		plain, err := llmretry.New(base2, llmretry.Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second})
		require.NoError(t, err)
		callMany(t, plain, p2.start, calls, 0, 3*time.Minute, nil)
		t.Logf("attempts in the minute of 429s: coordinated %d, independent %d", len(at), len(p2.arrivals()))
		assert.LessOrEqual(t, len(at), calls+8*int(time.Minute/(500*time.Millisecond))+8, "8 retries of 500 ms at a time, for a minute")
		assert.Less(t, len(at), len(p2.arrivals())*2/3, "the budget cuts the retries")
	})
}

func TestCoordinatedFlapHoldsTheRest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Up for one instant at 30 s (the probe gets through), down again
		// from 30 s + 1 ns to 2 min, then up.
		const calls = 30
		p := newFlaky(status(503), time.Second, window{0, 30 * time.Second}, window{30*time.Second + 1, 2 * time.Minute})
		rt, err := llmretry.NewCoordinated(p, llmretry.Policy{Waits: hostWaits, Reserve: time.Minute}, coordination.Config{ProbeInterval: 10 * time.Second})
		require.NoError(t, err)
		results := callMany(t, rt, p.start, calls, 0, 8*time.Minute, nil)
		for _, r := range results {
			assert.NoError(t, r.err)
		}
		at := p.arrivals()
		// After the flap up at ~30 s, the first released call's 503 marks
		// the key down again: the rest are held, not sent into the outage.
		var flap int
		for _, a := range at[calls:] {
			if a > 30*time.Second && a < 2*time.Minute {
				flap++
			}
		}
		assert.Less(t, flap, calls/2, "a flap costs a few attempts, not one per held call: %v", at)
	})
}

func TestCoordinatedCancelWhileHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(status(502), time.Second, window{0, time.Hour})
		var h holds
		st := coordination.NewMemoryStore()
		rt, err := llmretry.NewCoordinated(p, llmretry.Policy{}, coordination.Config{OnHold: h.Add, Store: st})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(2*time.Second, cancel)
		_, err = rt.RoundTrip(mustRequest(t, ctx))
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 2*time.Second, time.Since(p.start))
		assert.Equal(t, 1, h.ended()[coordination.HoldCanceled])
		assert.Equal(t, map[string]bool{"api.example.com": true}, h.keys(), "one key")
		assert.True(t, load(t, st, "api.example.com").Down(time.Now()), "the key stays down for later calls")
		assert.Zero(t, h.open(), "no call held")
	})
}

func TestCoordinatedProbesTakeTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The zero Policy allows 6 retries, and a probe is a retry of the
		// call that sends it. Three calls through a one-minute outage
		// need about 13 probes: taken in turns, nobody runs out.
		p := newFlaky(status(502), time.Second, window{0, time.Minute})
		p.slow = 3 * time.Second // a slow edge: probes still go at most 5 s apart
		var mu sync.Mutex
		probes := map[string]int{}
		rt, err := llmretry.NewCoordinated(p, llmretry.Policy{OnAttempt: func(a llmretry.Attempt) {
			if a.Probe {
				mu.Lock()
				probes[a.Request.Header.Get("X-Call")]++
				mu.Unlock()
			}
		}}, coordination.Config{})
		require.NoError(t, err)
		// One key for all three; X-Call (not a credential) tells the
		// calls apart in the record.
		results := callMany(t, rt, p.start, 3, 0, 8*time.Minute, func(i int, req *http.Request) { req.Header.Set("X-Call", strconv.Itoa(i)) })
		for i, r := range results {
			assert.NoError(t, r.err, "call %d", i)
		}
		mu.Lock()
		total, most, least := 0, 0, 1<<30
		for _, n := range probes {
			total, most, least = total+n, max(most, n), min(least, n)
		}
		mu.Unlock()
		assert.Len(t, probes, 3, "every call probed: %v", probes)
		assert.LessOrEqual(t, most-least, 1, "probes taken in turns: %v", probes)
		assert.Greater(t, total, 6+1, "more probes than one call alone could send (the zero Policy: 6 retries)")
		at := p.arrivals()
		var gaps []time.Duration
		for i := 1; i < len(at); i++ {
			if at[i] > 0 && at[i] < time.Minute {
				gaps = append(gaps, at[i]-at[i-1])
			}
		}
		for _, g := range gaps[1:] {
			assert.LessOrEqual(t, g, probeInterval, "probes are timed from when the previous one was sent: %v", at)
		}
	})
}

// The release spread obeys each call's deadline minus its reserve: with a
// 5-s spread and calls whose limit falls a second after the server's wait
// ends, every call goes out within that second, none after its limit.
func TestCoordinatedReleaseSpreadKeepsTheReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const until = 30 * time.Second
		p := newFlaky(status(429, "Retry-After", "30"), 0, window{0, time.Nanosecond})
		var mu sync.Mutex
		late := 0
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if d, ok := req.Context().Deadline(); ok && time.Now().After(d.Add(-time.Second)) {
				mu.Lock()
				late++
				mu.Unlock()
			}
			return p.RoundTrip(req)
		})
		rt, err := llmretry.NewCoordinated(base, llmretry.Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second}, coordination.Config{ReleaseSpread: 5 * time.Second})
		require.NoError(t, err)
		// The first call's 429 holds the key until 30 s; the others start
		// 10 ms apart after it. Deadline 32 s, reserve 1 s: each call may
		// send until about 31 s; the spread is 5 s.
		results := callMany(t, rt, p.start, 100, 10*time.Millisecond, until+2*time.Second, nil)
		for i, r := range results {
			assert.NoError(t, r.err, "call %d released within the second it had left", i)
		}
		assert.Zero(t, late, "attempts sent after their call's deadline minus its reserve")
		var after []time.Duration
		for _, a := range p.arrivals()[1:] {
			assert.GreaterOrEqual(t, a, until, "nothing before the wait ends")
			after = append(after, a)
		}
		assert.Len(t, after, 100)
	})
}

// One blip is not an outage: a coordinated call's retry after one failure
// on a quiet key goes at its own schedule's first wait, as the key's first
// probe, not a probe interval later; a longer own wait is still capped by
// the probe interval.
func TestCoordinatedBlipRetriesOnItsOwnSchedule(t *testing.T) {
	for _, c := range []struct {
		wait    time.Duration
		atLeast time.Duration
		atMost  time.Duration
	}{
		{100 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond},
		{time.Second, time.Second, time.Second},
		{15 * time.Second, 4 * time.Second, 5 * time.Second}, // the probe interval's gap
	} {
		t.Run(c.wait.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := newFlaky(status(500), 0, window{0, time.Nanosecond}) // a 500, then answers
				var rec testkit.Log[llmretry.Attempt]
				rt, err := llmretry.NewCoordinated(prov, llmretry.Policy{Waits: []time.Duration{c.wait}, OnAttempt: rec.Add}, coordination.Config{})
				require.NoError(t, err)
				resp, err := rt.RoundTrip(mustRequest(t, context.Background()))
				require.NoError(t, err)
				resp.Body.Close()
				at := prov.arrivals()
				require.Len(t, at, 2)
				assert.GreaterOrEqual(t, at[1]-at[0], c.atLeast)
				assert.LessOrEqual(t, at[1]-at[0], c.atMost)
				require.Len(t, rec.All(), 2)
				assert.True(t, rec.All()[1].Probe, "the retry went as the key's first probe")
			})
		})
	}
}

// Only the provider's evidence moves a key: a malformed request, and one
// whose body fails to read, among 20 healthy concurrent calls hold nobody.
func TestCoordinatedRequestFaultsMoveNoKey(t *testing.T) {
	for _, bad := range []string{"body fails", "malformed"} {
		t.Run(bad, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
					if req.Header.Get("X-Bad") != "" {
						if bad == "malformed" {
							req.Body.Close()
							return nil, errors.New(`net/http: invalid header field name "X Bad"`)
						}
						_, err := io.ReadAll(req.Body)
						req.Body.Close()
						return nil, err // what net/http reports: the body's own error
					}
					if err := clock.Sleep(req.Context(), 20*time.Millisecond); err != nil {
						return nil, err
					}
					return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
				})
				var h holds
				st := coordination.NewMemoryStore()
				rt, err := llmretry.NewCoordinated(base, llmretry.Policy{}, coordination.Config{OnHold: h.Add, Store: st})
				require.NoError(t, err)
				var wg sync.WaitGroup
				for i := range 21 {
					wg.Go(func() {
						req := mustRequest(t, context.Background())
						if i == 0 {
							req.Header.Set("X-Bad", "1")
							req.Body = failingBody{}
							req.GetBody = func() (io.ReadCloser, error) { return failingBody{}, nil }
						}
						resp, err := rt.RoundTrip(req)
						if i == 0 {
							assert.Error(t, err)
							return
						}
						if assert.NoError(t, err) {
							resp.Body.Close()
						}
					})
				}
				wg.Wait()
				assert.Empty(t, h.All(), "nobody held")
				assert.False(t, load(t, st, "api.example.com").Down(time.Now()), "marked down by the request's own fault")
			})
		})
	}
}

// llmretry.AttemptFromContext marks, as it is sent, the attempt that
// Attempt.Probe reports afterwards, first attempts and retries alike;
// nothing else.
func TestCoordinatedProbeMarkedInContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(status(502), 100*time.Millisecond, window{0, 40 * time.Second})
		var mu sync.Mutex
		sent := map[string]bool{} // attempt ID order is unknown at send: key by call and number
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			a, _ := llmretry.AttemptFromContext(r.Context())
			sent[r.Header.Get("X-Call")+"#"+strconv.Itoa(a.N)] = a.Probe
			mu.Unlock()
			return p.RoundTrip(r)
		})
		var recMu sync.Mutex
		reported := map[string]bool{}
		rt, err := llmretry.NewCoordinated(base, llmretry.Policy{Waits: []time.Duration{time.Second}, OnAttempt: func(a llmretry.Attempt) {
			recMu.Lock()
			reported[a.Request.Header.Get("X-Call")+"#"+strconv.Itoa(a.N)] = a.Probe
			recMu.Unlock()
		}}, coordination.Config{ProbeInterval: 5 * time.Second})
		require.NoError(t, err)
		results := callMany(t, rt, p.start, 5, time.Second, 5*time.Minute, func(i int, req *http.Request) { req.Header.Set("X-Call", strconv.Itoa(i)) })
		for _, r := range results {
			require.NoError(t, r.err)
		}
		assert.Equal(t, reported, sent)
		probes := 0
		for _, probe := range sent {
			if probe {
				probes++
			}
		}
		assert.Greater(t, probes, 2, "an outage of 40 s is probed several times")
	})
}

// The records of holds (hold.go) through coordinated Transports: what a
// panic in them, or in the other callbacks, leaves behind.

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

// Provider keys (keys.go) through a coordinated Transport: a key down
// holds no other key's calls.

func TestCoordinatedKeysAreHostAndCredential(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Key A is refused for ten minutes; key B works.
		var mu sync.Mutex
		var sent []string
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			sent = append(sent, req.URL.Host+" "+req.Header.Get("Authorization"))
			mu.Unlock()
			if req.Header.Get("Authorization") == "Bearer A" && req.URL.Host == "api.example.com" {
				return nil, refused.err
			}
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
		})
		rt, err := llmretry.NewCoordinated(base, llmretry.Policy{Waits: []time.Duration{time.Minute}}, coordination.Config{})
		require.NoError(t, err)
		ctxA, cancelA := context.WithCancel(context.Background())
		doneA := make(chan error)
		go func() {
			req := mustRequest(t, ctxA)
			req.Header.Set("Authorization", "Bearer A")
			_, err := rt.RoundTrip(req)
			doneA <- err
		}()
		defer func() {
			cancelA()
			assert.ErrorIs(t, <-doneA, context.Canceled, "key A's call was still held")
		}()
		synctest.Wait() // key A's call was refused and is held: the key is down
		for _, c := range []struct{ host, auth string }{
			{"api.example.com", "Bearer B"},   // another credential
			{"other.example.com", "Bearer A"}, // another host
			{"api.example.com", ""},           // no credential
		} {
			req := mustRequest(t, context.Background())
			req.URL.Host = c.host
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			start := time.Now()
			resp, err := rt.RoundTrip(req)
			require.NoError(t, err, c.host+" "+c.auth)
			resp.Body.Close()
			assert.Equal(t, time.Duration(0), time.Since(start), "%s %s is not held by key A", c.host, c.auth)
		}
		synctest.Wait()
		mu.Lock()
		assert.Len(t, sent, 4, "%v", sent)
		mu.Unlock()

		// What makes a key, request by request: TestKeysAreHostAndCredential
		// (keys_test.go).
	})
}

// Two API keys set into the header map under a name that is not canonical
// (as a map set directly may hold it, and as net/http sends it) are two
// keys: a 429 with a wait for one holds no call of the other. The
// spellings of one credential make one key: TestKeyOfAnySpelling
// (keys_test.go).
func TestCoordinatedCredentialInAnySpellingIsItsOwnKey(t *testing.T) {
	for _, name := range []string{"x-api-key", "authorization", "api-key", "x-goog-api-key", "X-API-KEY", "X-Api-Key"} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
					if v := req.Header[name]; len(v) == 1 && v[0] == "KEY-A" {
						return status(429, "Retry-After", "60").response(req)
					}
					return status(200).response(req)
				})
				rt := coordinated(t, base, llmretry.Policy{Waits: []time.Duration{time.Second}}, coordination.Config{})
				send := func(ctx context.Context, key string) (*http.Response, error) {
					req := mustRequest(t, ctx)
					req.Header[name] = []string{key}
					return rt.RoundTrip(req)
				}
				ctxA, cancelA := context.WithCancel(context.Background())
				doneA := make(chan error)
				go func() {
					_, err := send(ctxA, "KEY-A")
					doneA <- err
				}()
				defer func() {
					cancelA()
					assert.ErrorIs(t, <-doneA, context.Canceled, "key A's call was still waiting")
				}()
				synctest.Wait() // key A's 429 is in: its key waits 60 s
				start := time.Now()
				resp, err := send(context.Background(), "KEY-B")
				require.NoError(t, err)
				resp.Body.Close()
				assert.Equal(t, time.Duration(0), time.Since(start), "key B is not held by key A's wait")
			})
		})
	}
}
