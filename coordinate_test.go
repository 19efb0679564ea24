package llmretry

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

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
			if err := sleep(req.Context(), f.slow); err != nil {
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
	if err := sleep(req.Context(), f.gen); err != nil {
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

		co := coordOf(rt)
		a1 := mustRequest(t, context.Background())
		a1.Header.Set("Authorization", "Bearer A")
		a2 := a1.Clone(context.Background())
		assert.Equal(t, keyOf(co.seed, a1), keyOf(co.seed, a2), "same host and credential: same key")
		b := a1.Clone(context.Background())
		b.Header.Set("Authorization", "Bearer B")
		assert.NotEqual(t, keyOf(co.seed, a1), keyOf(co.seed, b))
		g1 := mustRequest(t, context.Background())
		g1.URL.RawQuery = "key=AIzaOne"
		g2 := mustRequest(t, context.Background())
		g2.URL.RawQuery = "key=AIzaTwo"
		assert.NotEqual(t, keyOf(co.seed, g1), keyOf(co.seed, g2), "Gemini's key= query value is a credential")
		x := mustRequest(t, context.Background())
		x.Header.Set("X-Goog-Api-Key", "AIzaThree")
		name := co.shared.Key(x.URL.Host, credentialOf(x))
		assert.NotContains(t, name, "AIza")
		assert.Regexp(t, `^api\.example\.com#[0-9a-f]{8}$`, name)
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
			if err := sleep(req.Context(), 500*time.Millisecond); err != nil {
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
			if err := sleep(req.Context(), 500*time.Millisecond); err != nil {
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
		st := coordOf(rt).stats(time.Now())
		require.Len(t, st, 1)
		for _, k := range st {
			assert.True(t, k.facts.Down(time.Now()), "the key stays down for later calls")
			assert.Zero(t, k.waiters)
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
		if err := sleep(req.Context(), time.Duration(rand.N(300))*time.Millisecond); err != nil {
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
	if err := sleep(req.Context(), time.Duration(100+rand.N(2900))*time.Millisecond); err != nil {
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
			for name, k := range coordOf(rt).stats(time.Now()) {
				assert.Zero(t, k.calls, "%v: calls", name)
				assert.Zero(t, k.waiters, "%v: held calls", name)
				assert.Zero(t, k.facts.Retries, "%v: retries in flight", name)
				assert.False(t, k.facts.Probing(time.Now()), "%v: a probe never reported", name)
			}
		})
	}
}
