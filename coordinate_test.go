package llmretry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry/internal/clock"
	"github.com/llmretry/llmretry/internal/coord"
	"github.com/llmretry/llmretry/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// window is a span of provider time, since its start.
type window struct{ from, to time.Duration }

// flaky is an in-memory provider for coordination tests: inside any of its
// down windows it answers fault at once; otherwise the answer, gen after
// the request arrives. It records every request's arrival and end, and
// starts no goroutine, so it runs inside a synctest bubble.
type flaky struct {
	start time.Time
	down  []window
	fault step
	gen   time.Duration
	slow  time.Duration // how long a fault takes to come back

	mu    sync.Mutex
	spans []window // per request: arrival and end
	keys  []string // per request: its Authorization header
}

// newFlaky starts a provider now.
func newFlaky(fault step, gen time.Duration, down ...window) *flaky {
	return &flaky{start: time.Now(), down: down, fault: fault, gen: gen}
}

func (f *flaky) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	at := time.Since(f.start)
	f.mu.Lock()
	i := len(f.spans)
	f.spans = append(f.spans, window{at, at})
	f.keys = append(f.keys, req.Header.Get("Authorization"))
	f.mu.Unlock()
	end := func() {
		f.mu.Lock()
		f.spans[i].to = time.Since(f.start)
		f.mu.Unlock()
	}
	defer end()
	for _, w := range f.down {
		if at >= w.from && at < w.to {
			if err := clock.Sleep(req.Context(), f.slow); err != nil {
				return nil, err
			}
			if f.fault.err != nil {
				return nil, f.fault.err
			}
			h := f.fault.header.Clone()
			if h == nil {
				h = http.Header{}
			}
			return &http.Response{StatusCode: f.fault.status, Status: strconv.Itoa(f.fault.status) + " " + http.StatusText(f.fault.status), Header: h,
				Body: io.NopCloser(strings.NewReader(f.fault.body)), ContentLength: -1, Request: req}, nil
		}
	}
	if err := clock.Sleep(req.Context(), f.gen); err != nil {
		return nil, err
	}
	return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"answer":42}`)), ContentLength: -1, Request: req}, nil
}

// arrivals returns when each request arrived.
func (f *flaky) arrivals() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	var at []time.Duration
	for _, s := range f.spans {
		at = append(at, s.from)
	}
	return at
}

// maxInFlight returns the most requests in flight at once among those
// that arrived within w.
func (f *flaky) maxInFlight(w window) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	most := 0
	for _, a := range f.spans {
		if a.from < w.from || a.from >= w.to {
			continue
		}
		n := 0
		for _, b := range f.spans {
			if b.from >= w.from && b.from < w.to && b.from <= a.from && (b.to > a.from || b == a) {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// holds collects Policy.OnHold records.
type holds struct {
	mu  sync.Mutex
	all []Hold
}

func (h *holds) on(x Hold) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.all = append(h.all, x)
}

// ended returns the records of ended holds, by outcome.
func (h *holds) ended() map[HoldOutcome]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := map[HoldOutcome]int{}
	for _, x := range h.all {
		if x.Outcome != HoldWaiting {
			m[x.Outcome]++
		}
	}
	return m
}

// callResult is what one call got, and when, since the provider started.
type callResult struct {
	err error
	at  time.Duration
}

// callMany makes n calls through rt, the i-th starting at i*stagger, each
// under its own deadline, and returns their results once all have ended.
func callMany(t *testing.T, rt http.RoundTripper, start time.Time, n int, stagger, deadline time.Duration, prep func(i int, req *http.Request)) []callResult {
	t.Helper()
	results := make([]callResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * stagger)
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, "POST", "https://api.example.com/v1/chat", strings.NewReader(`{"q":1}`))
			if err != nil {
				results[i] = callResult{err: err}
				return
			}
			if prep != nil {
				prep(i, req)
			}
			resp, err := rt.RoundTrip(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = errors.New(resp.Status)
				}
			}
			results[i] = callResult{err: err, at: time.Since(start)}
		})
	}
	wg.Wait()
	return results
}

// hostWaits is the seed's host schedule.
var hostWaits = []time.Duration{15 * time.Second, 45 * time.Second, 2 * time.Minute, 4 * time.Minute}

func TestCoordinatedOutageOneProbeAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const calls, recovery, gen = 20, 60 * time.Second, time.Second
		p := newFlaky(fail(502), gen, window{0, recovery})
		var h holds
		var mu sync.Mutex
		var probes []Attempt
		rt, err := NewCoordinated(p, Policy{Waits: hostWaits, Reserve: time.Minute, OnHold: h.on, OnAttempt: func(a Attempt) {
			if a.Probe {
				mu.Lock()
				probes = append(probes, a)
				mu.Unlock()
			}
		}}, Coordination{})
		require.NoError(t, err)

		results := callMany(t, rt, p.start, calls, 0, 8*time.Minute, nil)

		for i, r := range results {
			require.NoError(t, r.err, "call %d", i)
			// Recovery lag: at most a probe interval, the probe's
			// generation, the release spread and the call's own.
			assert.Less(t, r.at-recovery, DefaultProbeInterval+gen+DefaultReleaseSpread+gen, "call %d", i)
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
			assert.GreaterOrEqual(t, gap, DefaultProbeInterval*4/5, "probe gap")
			assert.LessOrEqual(t, gap, DefaultProbeInterval, "probe gap")
			prev = a
		}
		// Everyone's first attempt, the probes, then one attempt per call
		// after the recovery (the successful probe among them).
		assert.Equal(t, len(first)+len(during)+calls, len(at), "attempts: %v", at)
		assert.GreaterOrEqual(t, len(during), int(recovery/DefaultProbeInterval)-1)
		assert.LessOrEqual(t, len(during), int(recovery*5/(DefaultProbeInterval*4))+1)
		mu.Lock()
		assert.Len(t, probes, len(during)+1, "Attempt.Probe marks every probe, the one that got through too")
		mu.Unlock()
		ended := h.ended()
		assert.Equal(t, len(during)+1, ended[HoldProbe], "holds that ended as the probe")
		assert.Equal(t, calls-1, ended[HoldReleased], "holds that ended in a release")

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
		assert.Less(t, released[len(released)-1]-after[0], gen+DefaultReleaseSpread, "released within the spread")
	})
}

func TestCoordinatedNewCallsAreHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(refused, time.Second, window{0, 12 * time.Second})
		var h holds
		rt, err := NewCoordinated(p, Policy{OnHold: h.on}, Coordination{ProbeInterval: 10 * time.Second})
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
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, x := range h.all {
			assert.Equal(t, HoldDown, x.Reason)
			assert.Equal(t, "api.example.com", x.Key, "no credential, no hash")
		}
		starts := 0
		for _, x := range h.all {
			if x.Outcome == HoldWaiting {
				starts++
				assert.True(t, x.End.IsZero())
			}
		}
		assert.GreaterOrEqual(t, starts, 5, "every call was held")
		assert.Equal(t, 2*starts, len(h.all), "every hold has a start and an end record")
	})
}

func TestCoordinatedServerWaitHoldsTheKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The provider rate-limits with Retry-After: 30 until 30 s; calls
		// start over the first 20 s.
		p := newFlaky(fail(429, "Retry-After", "30"), time.Second, window{0, 30 * time.Second})
		var h holds
		rt, err := NewCoordinated(p, Policy{Waits: hostWaits, Reserve: time.Minute, OnHold: h.on}, Coordination{})
		require.NoError(t, err)
		results := callMany(t, rt, p.start, 20, time.Second, 8*time.Minute, nil)
		for _, r := range results {
			assert.NoError(t, r.err)
		}
		at := p.arrivals()
		assert.Equal(t, time.Duration(0), at[0])
		for _, a := range at[1:] {
			assert.GreaterOrEqual(t, a, 30*time.Second, "nothing is sent before the server's wait is over")
			assert.Less(t, a, 30*time.Second+DefaultReleaseSpread, "everyone goes within the spread")
		}
		assert.Len(t, at, 21, "one 429, then one attempt per call")
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, x := range h.all {
			assert.Equal(t, HoldServerWait, x.Reason, x.String())
		}
	})
}

func TestCoordinatedGivesUpWithoutSending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(fail(529), time.Second, window{0, time.Hour})
		var h holds
		rt, err := NewCoordinated(p, Policy{Waits: hostWaits, Reserve: time.Minute, OnHold: h.on}, Coordination{ProbeInterval: 20 * time.Second})
		require.NoError(t, err)
		key := "sk-secret-value-0123456789"
		// Deadline 3 min, reserve 1 min: each call may wait until 2 min.
		results := callMany(t, rt, p.start, 2, 90*time.Second, 3*time.Minute, func(_ int, req *http.Request) { req.Header.Set("Authorization", "Bearer "+key) })

		for i, r := range results {
			require.Error(t, r.err)
			var ex *Exhausted
			require.ErrorAs(t, r.err, &ex)
			var down *DownError
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
		assert.Equal(t, 2, h.ended()[HoldGaveUp])
	})
}

func TestCoordinatedServerWaitAboveMaxRetryAfterGivesUpAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(fail(429, "Retry-After", "120"), time.Second, window{0, time.Hour})
		rt, err := NewCoordinated(p, Policy{}, Coordination{})
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
		req := mustRequest(t, WithPolicy(ctx, Policy{MaxRetryAfter: time.Minute}))
		start := time.Now()
		_, err = rt.RoundTrip(req)
		var down *DownError
		require.ErrorAs(t, err, &down)
		assert.Equal(t, time.Duration(0), time.Since(start))
		assert.Equal(t, 119*time.Second, down.Left)
		assert.True(t, down.Since.IsZero(), "a 429 does not mark the key down")
		assert.Contains(t, err.Error(), "asking to wait 1m59s more")
		assert.Len(t, p.arrivals(), 1, "the second call sent nothing")
		<-done
	})
}

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
		rt, err := NewCoordinated(base, Policy{Waits: []time.Duration{time.Minute}}, Coordination{})
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
		// (internal/coord/keys_test.go).
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
		p := newFlaky(fail(408), 0, window{0, time.Minute})
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if err := clock.Sleep(req.Context(), 500*time.Millisecond); err != nil {
				return nil, err
			}
			return p.RoundTrip(req)
		})
		var h holds
		rt, err := NewCoordinated(base, Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second, OnHold: h.on}, Coordination{})
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
		assert.Positive(t, h.ended()[HoldReleased], "some retries were held by the budget")
		h.mu.Lock()
		for _, x := range h.all {
			assert.Equal(t, HoldBudget, x.Reason)
		}
		h.mu.Unlock()

		// Without coordination, every call retries every second.
		p2 := newFlaky(fail(408), 0, window{0, time.Minute})
		base2 := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if err := clock.Sleep(req.Context(), 500*time.Millisecond); err != nil {
				return nil, err
			}
			return p2.RoundTrip(req)
		})
		plain, err := New(base2, Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second})
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
		p := newFlaky(fail(503), time.Second, window{0, 30 * time.Second}, window{30*time.Second + 1, 2 * time.Minute})
		rt, err := NewCoordinated(p, Policy{Waits: hostWaits, Reserve: time.Minute}, Coordination{ProbeInterval: 10 * time.Second})
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
		p := newFlaky(fail(502), time.Second, window{0, time.Hour})
		var h holds
		rt, err := NewCoordinated(p, Policy{OnHold: h.on}, Coordination{})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(2*time.Second, cancel)
		_, err = rt.RoundTrip(mustRequest(t, ctx))
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 2*time.Second, time.Since(p.start))
		assert.Equal(t, 1, h.ended()[HoldCanceled])
		st := coordOf(rt).Stats(time.Now())
		require.Len(t, st, 1)
		for _, k := range st {
			assert.True(t, k.Facts.Down(time.Now()), "the key stays down for later calls")
			assert.Zero(t, k.Waiters)
		}
	})
}

func TestCoordinationValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Coordination
		want string
	}{
		{"negative probe interval", Coordination{ProbeInterval: -time.Second}, "ProbeInterval is negative"},
		{"negative spread", Coordination{ReleaseSpread: -1}, "ReleaseSpread is negative"},
		{"budget above 1", Coordination{RetryBudget: 1.5}, "RetryBudget is 1.5"},
		{"negative budget", Coordination{RetryBudget: -0.1}, "RetryBudget is -0.1"},
		{"negative min retries", Coordination{MinRetries: -2}, "MinRetries is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := NewCoordinated(nil, Policy{}, tc.c)
			assert.Nil(t, rt)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "llmretry: "))
		})
	}
	rt, err := NewCoordinated(nil, Policy{Reserve: -1}, Coordination{})
	assert.Nil(t, rt)
	assert.ErrorContains(t, err, "Policy.Reserve is negative")
	assert.NoError(t, Coordination{RetryBudget: 1}.Validate())
}

// mustRequest returns a POST with a JSON body under ctx.
func mustRequest(t *testing.T, ctx context.Context) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", "https://api.example.com/v1/chat", strings.NewReader(`{"q":1}`))
	require.NoError(t, err)
	return req
}

func TestCoordinatedProbesTakeTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The zero Policy allows 6 retries, and a probe is a retry of the
		// call that sends it. Three calls through a one-minute outage
		// need about 13 probes: taken in turns, nobody runs out.
		p := newFlaky(fail(502), time.Second, window{0, time.Minute})
		p.slow = 3 * time.Second // a slow edge: probes still go at most 5 s apart
		var mu sync.Mutex
		probes := map[string]int{}
		rt, err := NewCoordinated(p, Policy{OnAttempt: func(a Attempt) {
			if a.Probe {
				mu.Lock()
				probes[a.Request.Header.Get("X-Call")]++
				mu.Unlock()
			}
		}}, Coordination{})
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
		assert.Greater(t, total, DefaultMaxRetries+1, "more probes than one call alone could send")
		at := p.arrivals()
		var gaps []time.Duration
		for i := 1; i < len(at); i++ {
			if at[i] > 0 && at[i] < time.Minute {
				gaps = append(gaps, at[i]-at[i-1])
			}
		}
		for _, g := range gaps[1:] {
			assert.LessOrEqual(t, g, DefaultProbeInterval, "probes are timed from when the previous one was sent: %v", at)
		}
	})
}

// flappingProvider flips between down and up at random moments, per host:
// down answers one of several faults (502, 529, refused, 429 with a short
// Retry-After), up answers after a random generation time.
type flappingProvider struct {
	start time.Time
	flips map[string][]time.Duration // per host: the moments it flips, starting down
}

func (c *flappingProvider) down(host string, at time.Duration) bool {
	down := true
	for _, f := range c.flips[host] {
		if at < f {
			break
		}
		down = !down
	}
	return down
}

func (c *flappingProvider) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	at := time.Since(c.start)
	if c.down(req.URL.Host, at) {
		if err := clock.Sleep(req.Context(), time.Duration(rand.N(300))*time.Millisecond); err != nil {
			return nil, err
		}
		switch rand.N(4) {
		case 0:
			return nil, refused.err
		case 1:
			return &http.Response{StatusCode: 429, Status: "429 Too Many Requests", Header: http.Header{"Retry-After": {strconv.Itoa(1 + rand.N(5))}}, Body: http.NoBody, Request: req}, nil
		case 2:
			return &http.Response{StatusCode: 529, Status: "529 Overloaded", Header: http.Header{}, Body: http.NoBody, Request: req}, nil
		}
		return &http.Response{StatusCode: 502, Status: "502 Bad Gateway", Header: http.Header{}, Body: http.NoBody, Request: req}, nil
	}
	if err := clock.Sleep(req.Context(), time.Duration(100+rand.N(2900))*time.Millisecond); err != nil {
		return nil, err
	}
	return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), Request: req}, nil
}

// Hundreds of calls with mixed policies, deadlines, cancellations,
// credentials and hosts through a provider that flaps: every call ends
// (synctest fails on a deadlock), every result is a response or an error,
// and the shared state ends clean: no call, retry, hold or probe left.
func TestCoordinatedChaos(t *testing.T) {
	for round := range 3 {
		synctest.Test(t, func(t *testing.T) {
			cp := &flappingProvider{start: time.Now(), flips: map[string][]time.Duration{}}
			for _, host := range []string{"a.test", "b.test"} {
				at := time.Duration(0)
				for at < 10*time.Minute {
					at += time.Duration(1+rand.N(40)) * time.Second
					cp.flips[host] = append(cp.flips[host], at)
				}
			}
			rt, err := NewCoordinated(cp, Policy{Waits: []time.Duration{2 * time.Second, 10 * time.Second}, Reserve: 5 * time.Second},
				Coordination{ProbeInterval: 3 * time.Second, MinRetries: 2})
			require.NoError(t, err)
			policies := []Policy{{}, {Waits: []time.Duration{time.Second}, Reserve: time.Second}, {MaxRetryAfter: 2 * time.Second, MaxRetries: 3}}
			const calls = 300
			var wg sync.WaitGroup
			var mu sync.Mutex
			outcomes := map[string]int{}
			for i := range calls {
				wg.Go(func() {
					time.Sleep(time.Duration(rand.N(180)) * time.Second)
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(10+rand.N(300))*time.Second)
					defer cancel()
					if i%10 == 0 {
						time.AfterFunc(time.Duration(rand.N(60))*time.Second, cancel)
					}
					if i%3 != 0 {
						ctx = WithPolicy(ctx, policies[i%len(policies)])
					}
					req, err := http.NewRequestWithContext(ctx, "POST", "https://"+[]string{"a.test", "b.test"}[i%2]+"/v1", strings.NewReader(`{}`))
					require.NoError(t, err)
					req.Header.Set("Authorization", "Bearer "+strconv.Itoa(i%3))
					resp, err := rt.RoundTrip(req)
					var what string
					switch {
					case err == nil && resp != nil:
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						what = resp.Status
					case err != nil && resp == nil:
						var down *DownError
						switch {
						case errors.As(err, &down):
							what = "gave up held"
						case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
							what = "context"
						default:
							var ex *Exhausted
							require.ErrorAs(t, err, &ex, "an error is the context's or an *Exhausted")
							what = "exhausted"
						}
					default:
						t.Errorf("call %d: response %v and error %v", i, resp, err)
					}
					mu.Lock()
					outcomes[what]++
					mu.Unlock()
				})
			}
			wg.Wait()
			t.Logf("round %d: %v", round, outcomes)
			assert.Positive(t, outcomes["200 OK"], "some calls got through")
			for name, k := range coordOf(rt).Stats(time.Now()) {
				assert.Zero(t, k.Calls, "%v: calls", name)
				assert.Zero(t, k.Waiters, "%v: held calls", name)
				assert.Zero(t, k.Facts.Retries, "%v: retries in flight", name)
				assert.False(t, k.Facts.Probing(time.Now()), "%v: a probe never reported", name)
			}
		})
	}
}

// liveHeap returns the heap in use as of the latest garbage collection,
// without forcing one (runtime.GC inside a synctest bubble trips Go
// 1.26.8's race detector).
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// A down state lapses: one 502 that nobody probed (its call could not
// wait), an hour of silence, then 50 calls with 30-s deadlines: every one
// goes straight out and answers.
func TestCoordinatedDownLapses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(fail(502), 20*time.Millisecond, window{0, 200 * time.Millisecond})
		var h holds
		rt, err := NewCoordinated(p, Policy{Reserve: time.Minute, OnHold: h.on}, Coordination{})
		require.NoError(t, err)
		// 30 s of deadline, 60 s of reserve: no retry fits, the 502 is
		// returned and the key is down with nobody to probe it.
		r := callMany(t, rt, p.start, 1, 0, 30*time.Second, nil)
		require.Error(t, r[0].err)
		require.True(t, coordOf(rt).Stats(time.Now())["api.example.com"].Facts.Down(time.Now()))

		time.Sleep(time.Hour)
		start := time.Now()
		results := callMany(t, rt, p.start, 50, 0, 30*time.Second, nil)
		for i, r := range results {
			assert.NoError(t, r.err, "call %d", i)
		}
		for _, a := range p.arrivals()[1:] {
			assert.Equal(t, start.Sub(p.start), a, "sent at once, not held")
		}
		assert.Empty(t, h.all, "nobody was held")
		assert.True(t, onlyKey(t, rt).Quiet, "the lapsed view is quiet again: the next call takes the success path")
	})
}

// An hour of silence after an outage leaves nothing behind: no key, no
// lease, no hold, here or in the store; a call then goes straight out.
func TestCoordinatedSilenceLeavesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(fail(502), time.Second, window{0, 20 * time.Second})
		rt, err := NewCoordinated(p, Policy{Waits: hostWaits, Reserve: time.Minute}, Coordination{})
		require.NoError(t, err)
		results := callMany(t, rt, p.start, 30, 100*time.Millisecond, 8*time.Minute, func(i int, req *http.Request) {
			req.Header.Set("Authorization", "Bearer key-"+strconv.Itoa(i%10))
		})
		for _, r := range results {
			require.NoError(t, r.err)
		}
		require.Len(t, coordOf(rt).Stats(time.Now()), 10, "ten keys in use")

		time.Sleep(time.Hour)
		start := time.Now()
		n := len(p.arrivals())
		results = callMany(t, rt, p.start, 1, 0, time.Minute, func(_ int, req *http.Request) {
			req.Header.Set("Authorization", "Bearer a-new-key")
		})
		require.NoError(t, results[0].err)
		assert.Equal(t, start.Sub(p.start), p.arrivals()[n], "straight out")
		st := coordOf(rt).Stats(time.Now())
		assert.Len(t, st, 1, "only the key just used: %v", st)
		for name, k := range st {
			assert.Zero(t, k.Calls, name)
			assert.Zero(t, k.Waiters, name)
			assert.Equal(t, store.Facts{}, k.Facts, name)
		}
		assert.Zero(t, coordOf(rt).StoreKeys(), "the store forgot every key")
	})
}

// Memory is bounded by the keys in use, not the keys ever used: rounds of
// 10,000 one-off credentials (one key per API key ever seen), each of which
// saw a 502 or a 429 with Retry-After: 2, are forgotten once their facts
// lapse, and the heap comes back to where it was. (The calls of a round go
// in batches of 100: Go 1.26.8 with -race crashes in synctest bubbles
// where hundreds of goroutines select on timers firing at one instant;
// Go 1.27.3 does not.)
func TestCoordinatedForgetsOneOffKeys(t *testing.T) {
	const perRound, batch = 10000, 100
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		seen := map[string]bool{}
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			key := req.Header.Get("Authorization")
			mu.Lock()
			first := !seen[key]
			seen[key] = true
			mu.Unlock()
			h := http.Header{}
			status := 200
			switch {
			case first && strings.HasSuffix(key, "0"):
				status = 502
			case first:
				status = 429
				h.Set("Retry-After", "2")
			}
			return &http.Response{StatusCode: status, Header: h, Body: http.NoBody, Request: req}, nil
		})
		rt, err := NewCoordinated(base, Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second}, Coordination{ProbeInterval: time.Second})
		require.NoError(t, err)
		var heaps []uint64
		for round := range 4 {
			mu.Lock()
			seen = map[string]bool{} // the provider's own memory is not the point
			mu.Unlock()
			for b := range perRound / batch {
				results := callMany(t, rt, time.Now(), batch, 0, time.Minute, func(i int, req *http.Request) {
					req.Header.Set("Authorization", "Bearer round-"+strconv.Itoa(round)+"-"+strconv.Itoa(b*batch+i))
				})
				for _, r := range results {
					require.NoError(t, r.err)
				}
			}
			time.Sleep(time.Hour)
			coordOf(rt).Sweep(time.Now())
			assert.Zero(t, coordOf(rt).StoreKeys(), "round %d: the store kept keys", round)
			left := len(coordOf(rt).Stats(time.Now()))
			assert.LessOrEqual(t, left, perRound, "round %d: at most the last round's quiet keys, marked to go", round)
			time.Sleep(time.Minute) // the engine's sweepEvery
			coordOf(rt).Sweep(time.Now())
			assert.Empty(t, coordOf(rt).Stats(time.Now()), "round %d: every key forgotten", round)
			heaps = append(heaps, liveHeap())
		}
		t.Logf("live heap after each round (as of the latest GC): %v", heaps)
		assert.Less(t, heaps[3], 2*heaps[0]+1<<20, "the heap does not grow with the keys ever used")
	})
}

// Two Transports sharing a store are two processes of a fleet: a 429
// Retry-After: 5 that one of them receives holds the first call the other
// makes to the key, though it never used the key before.
func TestCoordinatedSharedStoreHoldsAColdTransport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(fail(429, "Retry-After", "5"), 0, window{0, time.Nanosecond})
		st := NewMemoryStore()
		a, err := NewCoordinated(p, Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second}, Coordination{Store: st})
		require.NoError(t, err)
		b, err := NewCoordinated(p, Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second}, Coordination{Store: st})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- callMany(t, a, p.start, 1, 0, time.Minute, nil)[0].err }()
		synctest.Wait() // a's call got the 429 and is held until 5 s
		r := callMany(t, b, p.start, 1, 0, time.Minute, nil)
		require.NoError(t, r[0].err)
		require.NoError(t, <-done)
		at := p.arrivals()
		require.Len(t, at, 3)
		for _, x := range at[1:] {
			assert.GreaterOrEqual(t, x, 5*time.Second, "nothing before the shared wait ends: %v", at)
		}
	})
}

// forgetfulStore is a store that has lost its versions: every answer and
// notice says Version 0, as a store restarted empty may.
type forgetfulStore struct {
	store.Store
	probes int
	mu     sync.Mutex
}

func (s *forgetfulStore) Report(ctx context.Context, key string, r store.Report) (store.Facts, error) {
	f, err := s.Store.Report(ctx, key, r)
	f.Version = 0
	return f, err
}

func (s *forgetfulStore) Watch(fn func(string, store.Facts)) func() {
	return s.Store.Watch(func(key string, f store.Facts) {
		f.Version = 0
		fn(key, f)
	})
}

func (s *forgetfulStore) Load(ctx context.Context, key string, now time.Time) (store.Facts, error) {
	f, err := s.Store.Load(ctx, key, now)
	f.Version = 0
	return f, err
}

func (s *forgetfulStore) Release(ctx context.Context, key, holder string, now time.Time) (store.Facts, error) {
	f, err := s.Store.Release(ctx, key, holder, now)
	f.Version = 0
	return f, err
}

func (s *forgetfulStore) TakeProbe(ctx context.Context, key string, l store.Lease) (store.Facts, bool, error) {
	s.mu.Lock()
	s.probes++
	s.mu.Unlock()
	f, ok, err := s.Store.TakeProbe(ctx, key, l)
	f.Version = 0
	return f, ok, err
}

// A held call whose store answers refuse the probe with facts the view will
// not take (no newer than its own) does not spin: it asks again at the
// next re-check, and gives up at its deadline minus its reserve.
func TestCoordinatedNoSpinOnStaleAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(fail(502), 0, window{0, time.Hour})
		st := &forgetfulStore{Store: NewMemoryStore()}
		rt, err := NewCoordinated(p, Policy{Reserve: 10 * time.Millisecond}, Coordination{Store: st, ProbeInterval: 200 * time.Millisecond})
		require.NoError(t, err)
		// One call takes the probe and hangs on to it (never reported
		// within the test); another is refused the lease over and over.
		results := callMany(t, rt, p.start, 2, 0, 500*time.Millisecond, nil)
		for _, r := range results {
			require.Error(t, r.err)
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		t.Logf("probes asked: %d, arrivals %v", st.probes, p.arrivals())
		assert.Less(t, st.probes, 50, "asked for the probe lease %d times in 500 ms", st.probes)
	})
}

// liarStore refuses every probe lease with facts that say the key is down,
// nobody probes and the probe is due, under a new version each time: a
// store whose records no process of the fleet wrote.
type liarStore struct {
	store.Store
	mu     sync.Mutex
	probes int
	v      uint64
}

func (s *liarStore) TakeProbe(_ context.Context, _ string, l store.Lease) (store.Facts, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.probes++
	s.v++
	return store.Facts{Version: 1e6 + s.v, DownSince: l.At.Add(-time.Second), DownUntil: l.At.Add(time.Hour), NextProbe: l.At.Add(-time.Millisecond)}, false, nil
}

// A refused lease whose answer contradicts itself never spins, and every
// turn of the gate checks the call's limits: the call ends at its deadline
// minus its reserve (before: it asked for the lease in a loop that never
// read the clock, past its deadline).
func TestCoordinatedRefusedLeaseNeverSpins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(fail(502), 0, window{0, time.Hour})
		st := &liarStore{Store: NewMemoryStore()}
		rt, err := NewCoordinated(p, Policy{Reserve: 10 * time.Millisecond}, Coordination{Store: st, ProbeInterval: 200 * time.Millisecond})
		require.NoError(t, err)
		start := time.Now()
		results := callMany(t, rt, p.start, 3, 0, time.Second, nil)
		for _, r := range results {
			require.Error(t, r.err)
		}
		assert.LessOrEqual(t, time.Since(start), time.Second)
		st.mu.Lock()
		defer st.mu.Unlock()
		assert.LessOrEqual(t, st.probes, 3*5*5+3, "asked for the probe lease %d times in 1 s (5 probe intervals)", st.probes)
	})
}

// deafStore hears no notice (its subscription was silently dropped) until
// reconnect, which says, as a store that made its subscription again says,
// that notices may have been lost.
type deafStore struct {
	store.Store
	mu sync.Mutex
	fn func(string, store.Facts)
}

func (d *deafStore) Watch(fn func(string, store.Facts)) func() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fn = fn
	return func() {}
}

func (d *deafStore) reconnect() {
	d.mu.Lock()
	fn := d.fn
	d.mu.Unlock()
	fn("", store.Facts{})
}

// countingStore counts the loads made through it.
type countingStore struct {
	store.Store
	loads atomic.Int64
}

func (c *countingStore) Load(ctx context.Context, key string, now time.Time) (store.Facts, error) {
	c.loads.Add(1)
	return c.Store.Load(ctx, key, now)
}

// A process whose store says it may have lost notices (its subscription
// was made again after a silent drop) reads each key it uses again on the
// key's next call, so another process's server wait still holds its calls
// (before: a quiet key was never read again); a quiet key otherwise makes
// no store call.
func TestCoordinatedDeafProcessRereads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(fail(429, "Retry-After", "5"), 0, window{time.Second, time.Second + time.Nanosecond})
		st := NewMemoryStore()
		policy := Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second}
		a, err := NewCoordinated(p, policy, Coordination{Store: st, ProbeInterval: time.Second})
		require.NoError(t, err)
		counted := &countingStore{Store: st}
		deaf := &deafStore{Store: counted}
		b, err := NewCoordinated(p, policy, Coordination{Store: deaf, ProbeInterval: time.Second})
		require.NoError(t, err)
		require.NoError(t, callMany(t, b, p.start, 1, 0, time.Minute, nil)[0].err) // b knows the key
		time.Sleep(time.Second)
		done := make(chan error, 1)
		go func() { done <- callMany(t, a, p.start, 1, 0, time.Minute, nil)[0].err }() // 429: wait until 6 s
		synctest.Wait()
		quietLoads := counted.loads.Load()
		time.Sleep(500 * time.Millisecond)
		deaf.reconnect() // b's store found its subscription dead and made it again
		time.Sleep(500 * time.Millisecond)
		require.NoError(t, callMany(t, b, p.start, 1, 0, time.Minute, nil)[0].err)
		require.NoError(t, <-done)
		at := p.arrivals()
		require.Len(t, at, 4)
		for _, x := range at[2:] {
			assert.GreaterOrEqual(t, x, 6*time.Second, "nothing before the shared wait ends: %v", at)
		}
		assert.Zero(t, quietLoads, "a quiet key's call made no store call")
		assert.Positive(t, counted.loads.Load(), "after the reconnect the key was read again")
	})
}

// A quiet key's calls read nothing from a shared store, however long the
// process runs: the success path makes no store call.
func TestCoordinatedQuietKeyMakesNoStoreCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(fail(502), 0)
		counted := &countingStore{Store: NewMemoryStore()}
		rt, err := NewCoordinated(p, Policy{}, Coordination{Store: counted, ProbeInterval: time.Second})
		require.NoError(t, err)
		for range 60 {
			require.NoError(t, callMany(t, rt, p.start, 1, 0, time.Minute, nil)[0].err)
			time.Sleep(time.Second) // a probe interval between calls
		}
		assert.Zero(t, counted.loads.Load())
	})
}

// A callback that panics — OnHold at each hold outcome, OnAttempt on a
// probe, the Asker — reaches the caller that ran it, and leaves the shared
// state consistent: no probe lease held, no budget spent, nobody held. An
// hour later, the provider healthy, a new call goes straight out, and an
// ordinary 429 retry on the quiet key is not held by the budget.
func TestCoordinatedCallbackPanics(t *testing.T) {
	type when struct {
		name  string
		boom  func(Hold) bool    // OnHold panics when it returns true
		boomA func(Attempt) bool // OnAttempt panics when it returns true
		ask   bool               // the Asker panics
	}
	outcome := func(o HoldOutcome) func(Hold) bool { return func(h Hold) bool { return h.Outcome == o } }
	cases := []when{
		{name: "OnHold as a hold begins", boom: outcome(HoldWaiting)},
		{name: "OnHold as the call is sent as the probe", boom: outcome(HoldProbe)},
		{name: "OnHold as the call is released", boom: outcome(HoldReleased)},
		{name: "OnHold as the call gives up", boom: outcome(HoldGaveUp)},
		{name: "OnHold as the call is canceled", boom: outcome(HoldCanceled)},
		{name: "OnAttempt on the probe", boomA: func(a Attempt) bool { return a.Probe }},
		{name: "OnAttempt on a budgeted retry", boomA: func(a Attempt) bool { return a.N == 2 && a.Response != nil && a.Response.StatusCode == 429 }},
		{name: "the Asker", ask: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// 502 for 20 s, then 429s without a wait for 10 s (own
				// schedule retries, under the budget), then up.
				p := newFlaky(fail(502), 100*time.Millisecond, window{0, 20 * time.Second})
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
				policy := Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second}
				policy.OnHold = func(h Hold) {
					if c.boom != nil && c.boom(h) {
						boom()
					}
				}
				policy.OnAttempt = func(a Attempt) {
					if c.boomA != nil && c.boomA(a) {
						boom()
					}
				}
				if c.ask {
					policy.MaxRetries = 2 // so that the schedule runs out
					policy.OnExhausted = AskFunc(func(context.Context, *Exhausted) bool { boom(); return false })
				}
				rt, err := NewCoordinated(base, policy, Coordination{ProbeInterval: 2 * time.Second})
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
				for name, k := range coordOf(rt).Stats(time.Now()) {
					assert.Zero(t, k.Calls, name)
					assert.Zero(t, k.Waiters, name)
					assert.False(t, k.Facts.Probing(time.Now()), "%s: the probe lease is released", name)
					assert.Zero(t, k.Facts.Retries, "%s: the budget is returned", name)
				}

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
				rt, err := NewCoordinated(base, Policy{OnHold: h.on}, Coordination{})
				require.NoError(t, err)
				var wg sync.WaitGroup
				for i := range 21 {
					wg.Go(func() {
						req := mustRequest(t, context.Background())
						if i == 0 {
							req.Header.Set("X-Bad", "1")
							req.Body = errBody{}
							req.GetBody = func() (io.ReadCloser, error) { return errBody{}, nil }
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
				assert.Empty(t, h.all, "nobody held")
				for name, k := range coordOf(rt).Stats(time.Now()) {
					assert.False(t, k.Facts.Down(time.Now()), "%s marked down by the request's own fault", name)
				}
			})
		})
	}
}

// The release spread obeys each call's deadline minus its reserve: with a
// 5-s spread and calls whose limit falls a second after the server's wait
// ends, every call goes out within that second, none after its limit.
func TestCoordinatedReleaseSpreadKeepsTheReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const until = 30 * time.Second
		p := newFlaky(fail(429, "Retry-After", "30"), 0, window{0, time.Nanosecond})
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
		rt, err := NewCoordinated(base, Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second}, Coordination{ReleaseSpread: 5 * time.Second})
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

// A failed probe wakes only the call that probes next: with 2,000 calls
// held, each probe costs three wake-ups (the prober's own, when it takes
// the lease; the next prober's, when it leaves the gate and when the
// failure sets the next probe's time), not one per held call.
func TestCoordinatedFailedProbeWakesOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(fail(502), 0, window{0, time.Hour})
		rt, err := NewCoordinated(p, Policy{}, Coordination{ProbeInterval: time.Second})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		const held = 2000 // the race detector's goroutine limit is 8,128
		for range held {
			wg.Go(func() {
				resp, err := rt.RoundTrip(mustRequest(t, ctx))
				if err == nil {
					resp.Body.Close()
				}
			})
		}
		time.Sleep(10 * time.Second) // every call held; probes every second
		synctest.Wait()
		st := coordOf(rt).Stats(time.Now())["api.example.com"]
		require.Equal(t, held, st.Waiters, "every call held (the probes fail at once)")
		before, probes := onlyKey(t, rt).Woken, len(p.arrivals())
		time.Sleep(20 * time.Second)
		synctest.Wait()
		failed := len(p.arrivals()) - probes
		woken := onlyKey(t, rt).Woken - before
		t.Logf("%d failed probes woke %d held calls", failed, woken)
		require.Positive(t, failed)
		assert.LessOrEqual(t, woken, int64(3*failed), "a failed probe wakes the next prober only")
		cancel()
		wg.Wait()
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
				prov := newProvider(fail(500), ok)
				var rec recorder
				rt, err := NewCoordinated(prov.mock, Policy{Waits: []time.Duration{c.wait}, OnAttempt: rec.on}, Coordination{})
				require.NoError(t, err)
				resp, err := post(t, rt, context.Background())
				require.NoError(t, err)
				resp.Body.Close()
				require.Len(t, prov.gaps(), 1)
				assert.GreaterOrEqual(t, prov.gaps()[0], c.atLeast)
				assert.LessOrEqual(t, prov.gaps()[0], c.atMost)
				require.Len(t, rec.attempts, 2)
				assert.True(t, rec.attempts[1].Probe, "the retry went as the key's first probe")
			})
		})
	}
}

// bucket is an in-memory provider enforcing a request bucket the way
// OpenAI does: capacity requests, one back each refill (kept as the
// instant the bucket is full again), x-ratelimit-*-requests on every
// response, and a 429 without Retry-After whose message states the wait
// until one request is back. An admitted request is answered gen after it
// arrives, a refused one at once. It starts no goroutine.
type bucket struct {
	start    time.Time
	capacity int
	refill   time.Duration
	gen      time.Duration

	mu       sync.Mutex
	full     time.Time
	admitted []time.Duration // arrivals, since start
	refused  []time.Duration
}

func newBucket(capacity int, refill, gen time.Duration) *bucket {
	now := time.Now()
	return &bucket{start: now, full: now, capacity: capacity, refill: refill, gen: gen}
}

func (b *bucket) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	now := time.Now()
	b.mu.Lock()
	ok := !b.full.After(now.Add(time.Duration(b.capacity-1) * b.refill))
	if ok {
		if now.After(b.full) {
			b.full = now
		}
		b.full = b.full.Add(b.refill)
		b.admitted = append(b.admitted, now.Sub(b.start))
	} else {
		b.refused = append(b.refused, now.Sub(b.start))
	}
	untilFull := max(0, b.full.Sub(now))
	remaining := b.capacity - int((untilFull+b.refill-1)/b.refill)
	untilOne := max(0, untilFull-time.Duration(b.capacity-1)*b.refill)
	b.mu.Unlock()
	h := http.Header{"Content-Type": {"application/json"}}
	h.Set("X-Ratelimit-Limit-Requests", strconv.Itoa(b.capacity))
	h.Set("X-Ratelimit-Remaining-Requests", strconv.Itoa(remaining))
	h.Set("X-Ratelimit-Reset-Requests", untilFull.String())
	if !ok {
		body := fmt.Sprintf(`{"error":{"message":"Rate limit reached for requests. Please try again in %v.","type":"requests","code":"rate_limit_exceeded"}}`, untilOne)
		return &http.Response{StatusCode: 429, Status: "429 Too Many Requests", Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: -1, Request: req}, nil
	}
	if err := clock.Sleep(req.Context(), b.gen); err != nil {
		return nil, err
	}
	return &http.Response{StatusCode: 200, Status: "200 OK", Header: h, Body: io.NopCloser(strings.NewReader(`{"ok":true}`)), ContentLength: -1, Request: req}, nil
}

// refusedAfter returns how many requests were refused after at.
func (b *bucket) refusedAfter(at time.Duration) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, r := range b.refused {
		if r > at {
			n++
		}
	}
	return n
}

// slots is an in-memory provider enforcing a limit on requests in flight
// the way Anthropic does: the one over it is refused at once with 429
// "Number of concurrent connections has exceeded your rate limit" and
// retry-after: 1; an admitted one is answered gen after it arrives.
type slots struct {
	start time.Time
	max   int
	gen   time.Duration

	mu       sync.Mutex
	inFlight int
	most     int             // the most in flight at once
	refused  []time.Duration // arrivals, since start
}

func (s *slots) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	s.mu.Lock()
	if s.inFlight >= s.max {
		s.refused = append(s.refused, time.Since(s.start))
		s.mu.Unlock()
		body := `{"type":"error","error":{"type":"rate_limit_error","message":"Number of concurrent connections has exceeded your rate limit."}}`
		return &http.Response{StatusCode: 429, Status: "429 Too Many Requests", Header: http.Header{"Retry-After": {"1"}, "Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), ContentLength: -1, Request: req}, nil
	}
	s.inFlight++
	s.most = max(s.most, s.inFlight)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	if err := clock.Sleep(req.Context(), s.gen); err != nil {
		return nil, err
	}
	return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(`{"ok":true}`)), ContentLength: -1, Request: req}, nil
}

// tallyStore counts every call to its Store.
type tallyStore struct {
	store.Store
	calls atomic.Int64
}

func (s *tallyStore) Load(ctx context.Context, key string, now time.Time) (store.Facts, error) {
	s.calls.Add(1)
	return s.Store.Load(ctx, key, now)
}

func (s *tallyStore) Report(ctx context.Context, key string, r store.Report) (store.Facts, error) {
	s.calls.Add(1)
	return s.Store.Report(ctx, key, r)
}

func (s *tallyStore) TakeProbe(ctx context.Context, key string, l store.Lease) (store.Facts, bool, error) {
	s.calls.Add(1)
	return s.Store.TakeProbe(ctx, key, l)
}

func (s *tallyStore) TakeRetry(ctx context.Context, key string, l store.Lease, limit int) (store.Facts, bool, error) {
	s.calls.Add(1)
	return s.Store.TakeRetry(ctx, key, l, limit)
}

func (s *tallyStore) TakeSend(ctx context.Context, key string, l store.Lease, limit int) (store.Facts, time.Time, bool, error) {
	s.calls.Add(1)
	return s.Store.TakeSend(ctx, key, l, limit)
}

func (s *tallyStore) Release(ctx context.Context, key, holder string, now time.Time) (store.Facts, error) {
	s.calls.Add(1)
	return s.Store.Release(ctx, key, holder, now)
}

// 60 calls at once meet a spent request bucket (10, one back a second):
// the first 429 paces the key, so that the refused calls and every later
// one go at the bucket's rate, each at its own turn: at most 2 more 429s,
// all answered about as soon as the limit allows, the holds recorded as
// HoldPaced. The pace lapses once the bucket is full again: an hour later
// a call goes straight out and makes no store call.
func TestCoordinatedPacesASpentRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const calls, gen = 60, 2 * time.Second
		b := newBucket(10, time.Second, gen)
		st := &tallyStore{Store: NewMemoryStore()}
		var h holds
		rt, err := NewCoordinated(b, Policy{Waits: hostWaits, Reserve: time.Minute, OnHold: h.on}, Coordination{Store: st})
		require.NoError(t, err)
		results := callMany(t, rt, b.start, calls, 0, 10*time.Minute, nil)
		last := time.Duration(0)
		for _, r := range results {
			require.NoError(t, r.err)
			last = max(last, r.at)
		}
		assert.LessOrEqual(t, b.refusedAfter(0), 2, "after the first 429 came back (at once), at most 2 more")
		// The bucket allows the 60th request at 50 s: answered at 52 s.
		assert.GreaterOrEqual(t, last, 52*time.Second)
		assert.LessOrEqual(t, last, 53*time.Second, "at the limit's pace, not later")
		ended := h.ended()
		assert.Positive(t, ended[HoldReleased])
		h.mu.Lock()
		for _, x := range h.all {
			assert.Equal(t, HoldPaced, x.Reason)
		}
		h.mu.Unlock()

		time.Sleep(time.Hour)
		for name, k := range coordOf(rt).Stats(time.Now()) {
			assert.False(t, k.Facts.Paced(time.Now()), "%s: the pace lapsed", name)
		}
		before := st.calls.Load()
		n := len(b.admitted)
		require.NoError(t, callMany(t, rt, b.start, 1, 0, time.Minute, nil)[0].err)
		assert.Equal(t, before, st.calls.Load(), "a quiet key again: no store call")
		assert.Len(t, b.admitted, n+1)
	})
}

// 60 calls, one every 100 ms, meet a limit of 8 requests in flight: the
// first 429 limits the key's calls in flight to the 8 the provider took,
// so that the rest wait at the gate for room (HoldInFlight) instead of
// being refused: at most 2 more 429s, never more than 8 in flight, every
// call answered about as soon as the limit allows (the 60th admitted at
// 14.3 s when each goes as soon as one of the 8 ahead of it is answered:
// 16.3 s). An hour later the limit has lapsed.
func TestCoordinatedLimitsCallsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const calls, gen = 60, 2 * time.Second
		s := &slots{start: time.Now(), max: 8, gen: gen}
		var h holds
		rt, err := NewCoordinated(s, Policy{Waits: hostWaits, Reserve: time.Minute, OnHold: h.on}, Coordination{})
		require.NoError(t, err)
		results := callMany(t, rt, s.start, calls, 100*time.Millisecond, 10*time.Minute, nil)
		last := time.Duration(0)
		for _, r := range results {
			require.NoError(t, r.err)
			last = max(last, r.at)
		}
		s.mu.Lock()
		refused := slices.Clone(s.refused)
		most := s.most
		s.mu.Unlock()
		require.NotEmpty(t, refused)
		assert.LessOrEqual(t, len(refused), 3, "the first 429 (back at once), and at most 2 more")
		assert.Equal(t, 8, most)
		assert.LessOrEqual(t, last, 16300*time.Millisecond*6/5, "within 20 % of the limit's pace")
		reasons := map[HoldReason]int{}
		h.mu.Lock()
		for _, x := range h.all {
			reasons[x.Reason]++
		}
		h.mu.Unlock()
		assert.Positive(t, reasons[HoldInFlight])

		time.Sleep(time.Hour)
		for name, k := range coordOf(rt).Stats(time.Now()) {
			assert.False(t, k.Facts.Capped(time.Now()), "%s: the limit lapsed", name)
			assert.Zero(t, k.Facts.InFlight, "%s: no send lease left", name)
		}
	})
}

// A call whose turn under a pace comes after the last instant it may send
// ends at once, without sending, and says why.
func TestCoordinatedPaceGivesUpPastItsLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBucket(1, 30*time.Second, 0)
		rt, err := NewCoordinated(b, Policy{Reserve: time.Second}, Coordination{})
		require.NoError(t, err)
		require.NoError(t, callMany(t, rt, b.start, 1, 0, time.Minute, nil)[0].err) // spends the bucket: paced until 30 s
		start := time.Now()
		res := callMany(t, rt, b.start, 1, 0, 20*time.Second, nil)[0]
		var down *DownError
		require.ErrorAs(t, res.err, &down)
		assert.Equal(t, HoldPaced, down.Reason)
		assert.Equal(t, 30*time.Second, down.Left)
		assert.ErrorIs(t, res.err, ErrNoTimeLeft)
		assert.Equal(t, start.Sub(b.start), res.at, "at once")
		assert.Len(t, b.admitted, 1, "nothing sent")
		assert.Empty(t, b.refused)
	})
}

// A base that panics mid-attempt leaves no attempt counted in flight: the
// key's limit on calls in flight is not eaten by it.
func TestCoordinatedBasePanicEndsItsAttempt(t *testing.T) {
	base := roundTripFunc(func(*http.Request) (*http.Response, error) { panic("boom from the base") })
	rt, err := NewCoordinated(base, Policy{}, Coordination{})
	require.NoError(t, err)
	assert.PanicsWithValue(t, "boom from the base", func() { _, _ = rt.RoundTrip(mustRequest(t, context.Background())) })
	st := coordOf(rt).Stats(time.Now())
	for _, k := range st {
		assert.Zero(t, k.Unleased)
		assert.Zero(t, k.Calls)
	}
	assert.Len(t, st, 1)
}

// Under a limit on calls in flight, a stream stays in flight until its
// body is done: with a limit of 1, the second call waits (HoldInFlight)
// until the first one's stream is closed, then goes at once.
func TestCoordinatedStreamHoldsItsSlotUntilClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sent []time.Duration
		start := time.Now()
		var mu sync.Mutex
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			sent = append(sent, time.Since(start))
			mu.Unlock()
			return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{"Content-Type": {"text/event-stream"}},
				Body: io.NopCloser(strings.NewReader("data: {}\n\n")), ContentLength: -1, Request: req}, nil
		})
		st := NewMemoryStore()
		var h holds
		rt, err := NewCoordinated(base, Policy{OnHold: h.on}, Coordination{Store: st})
		require.NoError(t, err)
		req := mustRequest(t, context.Background())
		_, err = st.Report(context.Background(), st.Key(req.URL.Host, nil), // mustRequest carries no credential
			store.Report{At: time.Now(), Evidence: store.ProviderUp, Cut: true, Grow: time.Hour, CapUntil: time.Now().Add(time.Hour)}) // nothing in flight: a limit of 1
		require.NoError(t, err)

		first, err := rt.RoundTrip(req)
		require.NoError(t, err)
		done := make(chan *http.Response)
		go func() {
			resp, err := rt.RoundTrip(mustRequest(t, context.Background()))
			assert.NoError(t, err)
			done <- resp
		}()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		mu.Lock()
		assert.Len(t, sent, 1, "the second call waits while the first stream is open")
		mu.Unlock()
		_, _ = io.Copy(io.Discard, first.Body) // read to its end: done
		second := <-done
		second.Body.Close()
		first.Body.Close()
		mu.Lock()
		assert.Equal(t, []time.Duration{0, 10 * time.Second}, sent, "sent once the first was done")
		mu.Unlock()
		h.mu.Lock()
		require.NotEmpty(t, h.all)
		assert.Equal(t, HoldInFlight, h.all[0].Reason)
		h.mu.Unlock()
	})
}

// A provider key is its host and credential, not the model (decision 75):
// two models on one API key, each under its own request bucket (10, one
// back a second), share one pace once either is spent. Every call is
// answered with no more 429s than one bucket would cost, at the pace of
// one bucket: the price of keeping the request body unread on the success
// path. (A host that needs each model paced apart gives each its own API
// key.)
func TestCoordinatedKeyIsNotPerModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const perModel = 30
		a, b := newBucket(10, time.Second, 2*time.Second), newBucket(10, time.Second, 2*time.Second)
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Header.Get("X-Model") == "b" {
				return b.RoundTrip(req)
			}
			return a.RoundTrip(req)
		})
		rt, err := NewCoordinated(base, Policy{Waits: hostWaits, Reserve: time.Minute}, Coordination{})
		require.NoError(t, err)
		results := callMany(t, rt, a.start, 2*perModel, 0, 10*time.Minute, func(i int, req *http.Request) {
			if i%2 == 1 {
				req.Header.Set("X-Model", "b")
			}
		})
		last := time.Duration(0)
		for _, r := range results {
			require.NoError(t, r.err)
			last = max(last, r.at)
		}
		refused := len(a.refused) + len(b.refused)
		t.Logf("two models, one key: %d 429s, last answer at %v (each model alone: %v)", refused, last, 22*time.Second)
		assert.LessOrEqual(t, refused, 2*perModel-20+2, "the first burst, and at most 2 more")
		// 20 calls go before the first 429 (10 per bucket), the other 40
		// at one bucket's pace: the last at 40 s, answered at 42 s, where
		// two paces would answer every call by 22 s.
		assert.GreaterOrEqual(t, last, 40*time.Second, "paced as one bucket, though the provider has two")
	})
}

// The adapter converts the core's health and the engine's hold reasons
// and outcomes by number: the two sides number them alike.
func TestCoordinatedSeamNumbersAgree(t *testing.T) {
	assert.Equal(t, coord.HealthNone, coord.Health(healthNone))
	assert.Equal(t, coord.HealthUp, coord.Health(healthUp))
	assert.Equal(t, coord.HealthDown, coord.Health(healthDown))
	for _, c := range []struct {
		root   HoldReason
		engine coord.HoldReason
	}{{HoldDown, coord.HoldDown}, {HoldServerWait, coord.HoldServerWait}, {HoldBudget, coord.HoldBudget}, {HoldPaced, coord.HoldPaced}, {HoldInFlight, coord.HoldInFlight}} {
		assert.Equal(t, c.root, HoldReason(c.engine), c.root.String())
	}
	for _, c := range []struct {
		root   HoldOutcome
		engine coord.HoldOutcome
	}{{HoldWaiting, coord.HoldWaiting}, {HoldProbe, coord.HoldProbe}, {HoldReleased, coord.HoldReleased}, {HoldGaveUp, coord.HoldGaveUp}, {HoldCanceled, coord.HoldCanceled}} {
		assert.Equal(t, c.root, HoldOutcome(c.engine), c.root.String())
	}
}

// The engine's refusal reaches the user as a *DownError with its every
// field, and its last failure as an error whose text is its kind; any
// other error (the context's) passes as it is.
func TestCoordinatedRefusalIsADownError(t *testing.T) {
	since := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	r := &coord.Refused{Key: "x.test", Reason: coord.HoldPaced, Since: since, For: time.Minute, Until: since.Add(time.Hour), Left: time.Hour, Waited: 2 * time.Second, Last: "429 Too Many Requests"}
	var d *DownError
	require.ErrorAs(t, downErrorOf(fmt.Errorf("wrapped: %w", r)), &d)
	assert.Equal(t, "x.test", d.Key)
	assert.Equal(t, HoldPaced, d.Reason)
	assert.Equal(t, since, d.Since)
	assert.Equal(t, time.Minute, d.For)
	assert.Equal(t, since.Add(time.Hour), d.Until)
	assert.Equal(t, time.Hour, d.Left)
	assert.Equal(t, 2*time.Second, d.Waited)
	require.Error(t, d.Last)
	assert.Equal(t, "429 Too Many Requests", d.Last.Error())
	require.ErrorAs(t, downErrorOf(&coord.Refused{Key: "x.test", Reason: coord.HoldBudget}), &d)
	assert.Nil(t, d.Last, "no failure known: no Last")
	assert.Same(t, context.Canceled, downErrorOf(context.Canceled))
	assert.NoError(t, downErrorOf(nil))
}

// What the engine asks of a call's Policy: its MaxRetryAfter, its first
// attempt's bounds, and its holds as Hold records, to OnHold if set.
func TestCoordinatedCallPolicy(t *testing.T) {
	var got []Hold
	p := Policy{MaxRetries: 2, MaxRetryAfter: time.Minute, Reserve: time.Second, OnHold: func(h Hold) { got = append(got, h) }}.resolved()
	cp := (*callPolicy)(&p)
	assert.Equal(t, time.Minute, cp.MaxServerWait())
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	defer cancel()
	req := mustRequest(t, ctx)
	left, latest := cp.FirstBounds(ctx, req)
	lim := limitsOf(ctx, &p, req)
	assert.Equal(t, p.retryLimit(lim.hasDeadline())+1, left)
	assert.Equal(t, lim.latest(), latest)
	start := time.Now()
	cp.Held(coord.Hold{Request: req, N: 2, Key: "x.test", Reason: coord.HoldDown, Start: start, Outcome: coord.HoldWaiting})
	require.Len(t, got, 1)
	assert.Equal(t, Hold{Request: req, N: 2, Key: "x.test", Reason: HoldDown, Start: start, Outcome: HoldWaiting}, got[0])
	p.OnHold = nil
	assert.NotPanics(t, func() { cp.Held(coord.Hold{}) }, "no OnHold: nothing to tell")
}

// flakies sends each request to the flaky provider of its URL's host.
type flakies map[string]*flaky

func (m flakies) RoundTrip(r *http.Request) (*http.Response, error) {
	p, found := m[r.URL.Host]
	if !found {
		return nil, errors.New("no such host: " + r.URL.Host)
	}
	return p.RoundTrip(r)
}

// coordinatedRoutes returns a coordinated Transport over primary (at
// api.example.com, callMany's host) and fallback (at fallback.example.com,
// with its own key), policy p with the fallback route added.
func coordinatedRoutes(t *testing.T, p Policy, primary, fallback *flaky) *Transport {
	t.Helper()
	route, err := RouteTo("https://api.example.com/v1", "https://fallback.example.com/v1", http.Header{"Authorization": {"Bearer FB"}})
	require.NoError(t, err)
	p.Fallback = append(p.Fallback, route)
	rt, err := NewCoordinated(flakies{"api.example.com": primary, "fallback.example.com": fallback}, p, Coordination{})
	require.NoError(t, err)
	return rt
}

// during returns the arrivals in w.
func during(at []time.Duration, w window) []time.Duration {
	var in []time.Duration
	for _, a := range at {
		if a >= w.from && a < w.to {
			in = append(in, a)
		}
	}
	return in
}

// With one fallback, a primary that is down for a minute under a call a
// second: new calls start on the fallback and none waits; the primary
// sees one probe per probe interval for everyone; within a probe interval
// (and a call's arrival) of its recovery new calls return to it.
func TestCoordinatedFallbackSharesTheCircuit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const calls, outage, gen, every = 100, time.Minute, time.Second, time.Second
		primary := newFlaky(fail(502), gen, window{0, outage})
		fallback := newFlaky(fail(502), gen)
		var h holds
		rt := coordinatedRoutes(t, Policy{Waits: hostWaits, Reserve: time.Minute, OnHold: h.on}, primary, fallback)

		results := callMany(t, rt, primary.start, calls, every, 2*time.Minute, nil)

		for i, r := range results {
			require.NoError(t, r.err, "call %d", i)
			assert.LessOrEqual(t, r.at-time.Duration(i)*every, gen, "call %d: none waits", i)
		}
		at := primary.arrivals()
		sent := during(at, window{0, outage})
		require.NotEmpty(t, sent)
		assert.Zero(t, sent[0], "the first call's failure")
		for i := 2; i < len(sent); i++ {
			assert.GreaterOrEqual(t, sent[i]-sent[i-1], DefaultProbeInterval*4/5, "probe gap: %v", sent)
		}
		assert.LessOrEqual(t, len(sent), 1+int(outage/(DefaultProbeInterval*4/5))+1, "one probe per interval: %v", sent)
		assert.GreaterOrEqual(t, len(sent), int(outage/DefaultProbeInterval), "and probes throughout: %v", sent)

		// Back: the first call after the next probe is due goes as the
		// probe, and succeeds; every call after it goes to the primary.
		back := during(at, window{outage, time.Hour})
		require.NotEmpty(t, back)
		assert.LessOrEqual(t, back[0]-outage, DefaultProbeInterval+every, "the recovery found within a probe interval")
		moved := during(fallback.arrivals(), window{back[0] + gen + time.Nanosecond, time.Hour})
		assert.Empty(t, moved, "no call on the fallback once the primary answered")
		assert.Equal(t, calls, len(fallback.arrivals())+len(back), "every call answered once")
		assert.Empty(t, h.ended(), "no call was held")
	})
}

// A fallback to another model on the primary's host and API key is a key
// of its own: its primary's model down, new calls go straight to it (a key
// of host and credential alone would be down for them too), and it has
// its own facts in the store.
func TestCoordinatedRouteIsItsOwnKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const calls, gen = 20, time.Second
		var mu sync.Mutex
		models := map[string][]time.Duration{}
		start := time.Now()
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			b, _ := io.ReadAll(req.Body)
			model := "primary"
			if strings.Contains(string(b), "small") {
				model = "small"
			}
			mu.Lock()
			models[model] = append(models[model], time.Since(start))
			mu.Unlock()
			status := 200
			if model == "primary" {
				status = 529 // that model is overloaded, the other is not
			}
			if err := clock.Sleep(req.Context(), gen); err != nil {
				return nil, err
			}
			return &http.Response{StatusCode: status, Status: strconv.Itoa(status) + " " + http.StatusText(status), Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{}`)), Request: req}, nil
		})
		small := func(req *http.Request) (*http.Request, error) {
			b, err := io.ReadAll(req.Body)
			if err != nil {
				return nil, err
			}
			out := req.Clone(req.Context())
			body := strings.Replace(string(b), `"q":1`, `"q":1,"model":"small"`, 1)
			out.Body, out.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
			out.Header.Set("Authorization", "Bearer ONE")
			return out, nil
		}
		var rec recorder
		rt, err := NewCoordinated(base, Policy{Waits: hostWaits, Reserve: time.Minute, Fallback: []Route{small}, OnAttempt: rec.on}, Coordination{})
		require.NoError(t, err)
		results := callMany(t, rt, start, calls, time.Second, 5*time.Minute, func(_ int, req *http.Request) {
			req.Header.Set("Authorization", "Bearer ONE")
		})
		for i, r := range results {
			require.NoError(t, r.err, "call %d: %v", i, rec.attempts)
		}
		mu.Lock()
		defer mu.Unlock()
		assert.Len(t, models["small"], calls, "every call answered by the other model")
		assert.LessOrEqual(t, len(models["primary"]), 1+int(calls*time.Second/(DefaultProbeInterval*4/5)), "the first failure and the probes: %v", models["primary"])

		st := rt.keepers.(coordinated).co.Stats(time.Now())
		var names []string
		for name := range st {
			names = append(names, name)
		}
		slices.Sort(names)
		require.Len(t, names, 2, "two keys")
		assert.Equal(t, names[0]+"~route1", names[1])
		assert.True(t, st[names[0]].Facts.Down(time.Now()), "the primary's model down")
		assert.False(t, st[names[1]].Facts.Down(time.Now()), "the other's up")
	})
}

// A call on a primary whose server wait it cannot afford goes to the
// fallback at once, without a hold; one that can afford it waits it out
// on the primary, as without a fallback.
func TestCoordinatedServerWaitBeyondTheCallGoesAround(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const wait, gen = 30 * time.Second, time.Second
		primary := newFlaky(fail(429, "Retry-After", "30"), gen, window{0, time.Second})
		fallback := newFlaky(fail(502), gen)
		var h holds
		rt := coordinatedRoutes(t, Policy{Waits: hostWaits, OnHold: h.on}, primary, fallback)
		var wg sync.WaitGroup
		results := make([]callResult, 3)
		for i, c := range []struct{ at, deadline time.Duration }{
			{0, 2 * time.Minute},                // meets the 429, and can wait it out
			{time.Second / 2, 20 * time.Second}, // cannot: goes around
			{time.Second, 2 * time.Minute},      // can: waits on the primary
		} {
			wg.Go(func() {
				time.Sleep(c.at)
				results[i] = callMany(t, rt, primary.start.Add(c.at), 1, 0, c.deadline, nil)[0]
				results[i].at += c.at
			})
		}
		wg.Wait()
		for i, r := range results {
			require.NoError(t, r.err, "call %d", i)
		}
		assert.Equal(t, time.Second/2+gen, results[1].at, "around at once")
		assert.Equal(t, []time.Duration{time.Second / 2}, fallback.arrivals())
		at := primary.arrivals()
		require.Len(t, at, 3, "the 429, then the two calls that waited")
		for _, a := range at[1:] {
			assert.GreaterOrEqual(t, a, wait)
			assert.Less(t, a, wait+DefaultReleaseSpread, "released within the spread")
		}
		answered := []time.Duration{results[0].at - gen, results[2].at - gen}
		slices.Sort(answered)
		assert.Equal(t, at[1:], answered, "the primary answered them")
		assert.Equal(t, map[HoldOutcome]int{HoldReleased: 2}, h.ended(), "two holds: the call that went around was not held")
	})
}

// Calls held with every route down go to whichever route comes back
// first, within a probe interval and the release spread of its recovery:
// the fallback's, or the primary's. Each key sees one probe at a time.
func TestCoordinatedHeldCallsGoWhereFirstBack(t *testing.T) {
	const calls, gen, first, later = 10, time.Second, 20 * time.Second, 2 * time.Minute
	for _, fallbackFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "the fallback first", false: "the primary first"}[fallbackFirst], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				primary, fallback := newFlaky(fail(502), gen, window{0, first}), newFlaky(fail(502), gen, window{0, later})
				if fallbackFirst {
					primary.down[0].to, fallback.down[0].to = later, first
				}
				var h holds
				rt := coordinatedRoutes(t, Policy{Waits: hostWaits, OnHold: h.on}, primary, fallback)
				results := callMany(t, rt, primary.start, calls, time.Second, 90*time.Second, nil)
				for i, r := range results {
					require.NoError(t, r.err, "call %d", i)
					// A probe interval, the probe's answer, the spread, its own.
					assert.Less(t, r.at, first+DefaultProbeInterval+gen+DefaultReleaseSpread+gen, "call %d", i)
				}
				back, down := primary, fallback
				if fallbackFirst {
					back, down = fallback, primary
				}
				assert.Len(t, during(back.arrivals(), window{first, time.Hour}), calls, "every call answered by the route back first")
				assert.Empty(t, during(down.arrivals(), window{first + DefaultProbeInterval + gen, time.Hour}), "none sent to the other once they are answered")
				for _, p := range []*flaky{primary, fallback} {
					assert.Equal(t, 1, p.maxInFlight(window{time.Second, first}), "one probe at a time")
					sent := during(p.arrivals(), window{time.Second, first})
					assert.LessOrEqual(t, len(sent), 1+int(first/(DefaultProbeInterval*4/5)), "probes: %v", sent)
				}
				ended := h.ended()
				assert.Equal(t, 0, ended[HoldGaveUp]+ended[HoldCanceled], "%v", ended)
			})
		})
	}
}
