package llmretry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/internal/coord"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/llmretry/llmretry/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The core's side of the seam (coordinate.go): what a Transport gives its
// calls, what it asks of them and tells them, in what order, and what it
// makes of their answers. The engine's behaviour behind it is tested in
// internal/coord, through Transports made by NewCoordinated.

// A Transport made by New, or the zero Transport, is not coordinated: its
// calls' gatekeeper is open, which is zero-size: holding it and calling
// it allocate nothing.
func TestOpenGatekeeperCostsNothing(t *testing.T) {
	assert.Zero(t, unsafe.Sizeof(open{}))

	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		var gk coord.Gatekeeper = open{}
		if _, err := gk.Admit(ctx, coord.Admission{N: 1}); err != nil {
			t.Fatal(err)
		}
		gk.Begin()
		gk.End(ctx, nil)
		gk.Sent()
		gk.Report(ctx, coord.Outcome{Health: coord.HealthUp, Status: http.StatusOK})
		gk.Leave()
	})
	assert.Zero(t, allocs)
}

// seamCall is one call a gatekeeper received.
type seamCall struct {
	what string
	a    coord.Admission // Admit's
	o    coord.Outcome   // Report's
}

// fakeKeeper is a coord.Gatekeeper (and the Transport's
// coord.Gatekeepers) that records what the core tells it, and answers
// from its fields.
type fakeKeeper struct {
	mu      sync.Mutex
	calls   []seamCall
	refuse  int           // the attempt number Admit refuses; 0: none
	probe   int           // the attempt number that goes as the probe; 0: none
	verdict coord.Verdict // what Report returns
}

func (f *fakeKeeper) Join(*http.Request, coord.Policy, int) coord.Gatekeeper { return f }

func (f *fakeKeeper) AdmitAny(ctx context.Context, a coord.Admission, _ []coord.Gatekeeper) (int, bool, error) {
	probe, err := f.Admit(ctx, a)
	return 0, probe, err
}

func (f *fakeKeeper) add(c seamCall) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
}

func (f *fakeKeeper) Admit(_ context.Context, a coord.Admission) (bool, error) {
	f.add(seamCall{what: "admit", a: a})
	if a.N == f.refuse {
		return false, errors.New("held too long")
	}
	return a.N == f.probe, nil
}
func (f *fakeKeeper) Begin()                              { f.add(seamCall{what: "begin"}) }
func (f *fakeKeeper) End(context.Context, *http.Response) { f.add(seamCall{what: "end"}) }
func (f *fakeKeeper) Sent()                               { f.add(seamCall{what: "sent"}) }
func (f *fakeKeeper) Leave()                              { f.add(seamCall{what: "leave"}) }
func (f *fakeKeeper) Report(_ context.Context, o coord.Outcome) coord.Verdict {
	f.add(seamCall{what: "report", o: o})
	return f.verdict
}

// sequence returns the names of the calls received, in order.
func (f *fakeKeeper) sequence() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var s []string
	for _, c := range f.calls {
		s = append(s, c.what)
	}
	return strings.Join(s, " ")
}

// of returns the calls received named what.
func (f *fakeKeeper) of(what string) []seamCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []seamCall
	for _, c := range f.calls {
		if c.what == what {
			out = append(out, c)
		}
	}
	return out
}

// The seam's contract, as the core keeps it: the order of its calls, what
// each admission and outcome carries, and what the core does with a
// refusal, a probe and a verdict.
func TestGatekeeperSeam(t *testing.T) {
	transport := func(t *testing.T, base http.RoundTripper, p Policy, fk *fakeKeeper) *Transport {
		rt, err := gated(base, p, fk)
		require.NoError(t, err)
		return rt
	}
	waits := Policy{Waits: []time.Duration{time.Second, 2 * time.Second}}
	t.Run("a first-try answer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fk := &fakeKeeper{}
			resp, err := post(t, transport(t, testkit.NewProvider(testkit.OK()), waits, fk), context.Background())
			require.NoError(t, err)
			assert.Equal(t, 200, resp.StatusCode)
			assert.Equal(t, "admit begin end report leave", fk.sequence())
			assert.Equal(t, coord.Admission{N: 1}, fk.of("admit")[0].a, "a first admission carries its number only")
			o := fk.of("report")[0].o
			assert.Equal(t, coord.HealthUp, o.Health)
			assert.Equal(t, 200, o.Status)
			assert.Same(t, resp, o.Resp)
			assert.False(t, o.Own.Set, "no retry of its own follows an answer")
		})
	})

	t.Run("a retry", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fk := &fakeKeeper{}
			prov := testkit.NewProvider(testkit.Fail(503, "Retry-After", "3"), testkit.OK())
			ctx := withDeadline(t, 10*time.Minute)
			start := time.Now()
			p := waits
			p.MaxRetries = 2
			_, err := post(t, transport(t, prov, p, fk), ctx)
			require.NoError(t, err)
			assert.Equal(t, "admit begin end report admit begin end sent report leave", fk.sequence())
			down := fk.of("report")[0].o
			assert.Equal(t, coord.HealthDown, down.Health)
			assert.Equal(t, 503, down.Status)
			assert.Equal(t, coord.Pause{D: 3 * time.Second, Set: true}, down.Server)
			assert.Equal(t, coord.Pause{D: time.Second, Set: true}, down.Own)
			assert.Equal(t, "error 503", string(down.Body), "the body read for the server's signals")
			a := fk.of("admit")[1].a
			assert.Equal(t, 2, a.N)
			assert.Equal(t, 2, a.Left, "this retry and the one the schedule allows after it")
			assert.Equal(t, start.Add(3*time.Second), a.NotBefore, "the server's wait")
			deadline, _ := ctx.Deadline()
			assert.Equal(t, deadline.Add(-time.Minute), a.Latest, "the deadline less the reserve")
			assert.Equal(t, coord.HealthUp, fk.of("report")[1].o.Health)
		})
	})

	t.Run("a refused first attempt", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fk := &fakeKeeper{refuse: 1}
			prov := testkit.NewProvider(testkit.OK())
			resp, err := post(t, transport(t, prov, waits, fk), context.Background())
			assert.Nil(t, resp)
			var ex *Exhausted
			require.ErrorAs(t, err, &ex)
			assert.Equal(t, ErrNoTimeLeft, ex.Reason)
			assert.EqualError(t, ex.Err, "held too long")
			assert.Zero(t, prov.Attempts(), "nothing sent")
			assert.Equal(t, "admit leave", fk.sequence())
		})
	})

	t.Run("a refused retry", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fk := &fakeKeeper{refuse: 2}
			prov := testkit.NewProvider(testkit.Fail(503))
			var rec recorder
			p := waits
			p.OnAttempt = rec.on
			resp, err := post(t, transport(t, prov, p, fk), context.Background())
			assert.Nil(t, resp)
			var ex *Exhausted
			require.ErrorAs(t, err, &ex)
			assert.Equal(t, ErrNoTimeLeft, ex.Reason)
			assert.Equal(t, 1, ex.Attempts)
			assert.Equal(t, 1, prov.Attempts())
			assert.Equal(t, "admit begin end report admit leave", fk.sequence(), "no report of an attempt never sent")
			assert.Equal(t, 1, rec.count(), "the refused attempt was never made: no record")
		})
	})

	t.Run("a probe and a hold", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fk := &fakeKeeper{probe: 2, verdict: coord.Verdict{Held: true}}
			var probes []bool
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				a, _ := AttemptFromContext(r.Context())
				probes = append(probes, a.Probe)
				return testkit.NewProvider(testkit.Fail(503, "Retry-After", "1")).RoundTrip(r)
			})
			var rec recorder
			p := Policy{Waits: []time.Duration{time.Minute}, OnAttempt: rec.on}
			start := time.Now()
			resp, err := post(t, transport(t, base, p, fk), context.Background())
			require.NoError(t, err)
			assert.Equal(t, 503, resp.StatusCode)
			assert.Equal(t, []bool{false, true}, probes, "the probe is marked in its attempt's context")
			require.Equal(t, 2, rec.count())
			first := rec.attempts[0]
			assert.True(t, first.Held)
			assert.Equal(t, time.Second, first.RetryIn, "held: the server's wait only, not the schedule's minute")
			assert.Zero(t, time.Since(start), "the core does not sleep a held call's wait: its gatekeeper holds it")
			assert.Equal(t, start.Add(time.Second), fk.of("admit")[1].a.NotBefore)
			assert.True(t, rec.attempts[1].Probe)
		})
	})

	t.Run("a paced key and a reset-only wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			for _, paced := range []bool{false, true} {
				fk := &fakeKeeper{verdict: coord.Verdict{Held: true, Paced: paced}}
				prov := testkit.NewProvider(testkit.Fail(429, "X-Ratelimit-Reset-Requests", "20s"), testkit.OK())
				_, err := post(t, transport(t, prov, waits, fk), context.Background())
				require.NoError(t, err)
				a := fk.of("admit")[1].a
				if paced {
					assert.Zero(t, a.NotBefore, "a paced call goes at its turn, not at the reset")
				} else {
					assert.False(t, a.NotBefore.IsZero(), fmt.Sprintf("the reset binds a call that is not paced: %v", a.NotBefore))
				}
			}
		})
	})
}

// A base that panics mid-attempt: the panic reaches the caller as it is,
// and the call still leaves its gatekeeper (no end: the attempt never
// ended), so that the engine uncounts it (its
// TestLeaveEndsAnAttemptLeftInFlight).
func TestGatekeeperSeamBasePanics(t *testing.T) {
	fk := &fakeKeeper{}
	base := roundTripFunc(func(*http.Request) (*http.Response, error) { panic("boom from the base") })
	rt, err := gated(base, Policy{}, fk)
	require.NoError(t, err)
	assert.PanicsWithValue(t, "boom from the base", func() { _, _ = post(t, rt, context.Background()) })
	assert.Equal(t, "admit begin leave", fk.sequence())
}

// What the engine asks of a call's Policy: its MaxRetryAfter, and its
// first attempt's bounds.
func TestCoordinatedCallPolicy(t *testing.T) {
	p := Policy{MaxRetries: 2, MaxRetryAfter: time.Minute, Reserve: time.Second}.resolved()
	cp := (*callPolicy)(&p)
	assert.Equal(t, time.Minute, cp.MaxServerWait())
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, testURL, nil)
	require.NoError(t, err)
	left, latest := cp.FirstBounds(ctx, req)
	lim := limitsOf(ctx, &p, req)
	assert.Equal(t, p.retryLimit(lim.hasDeadline())+1, left)
	assert.Equal(t, lim.latest(), latest)
}

// NewCoordinated makes no Transport of an invalid configuration or
// policy, and says which field is wrong (every one, prefixed once each).
func TestNewCoordinatedValidates(t *testing.T) {
	// Each field's own words: coordination's TestConfigValidate.
	invalid := []coordination.Config{{ProbeInterval: -time.Second}, {ReleaseSpread: -1}, {RetryBudget: 1.5}, {RetryBudget: -0.1}, {MinRetries: -2}}
	for _, c := range invalid {
		rt, err := NewCoordinated(nil, Policy{}, c)
		assert.Nil(t, rt)
		require.Error(t, err)
		assert.Equal(t, c.Validate().Error(), err.Error())
		assert.True(t, strings.HasPrefix(err.Error(), "llmretry: "))
	}
	rt, err := NewCoordinated(nil, Policy{Reserve: -1}, coordination.Config{ProbeInterval: -1})
	assert.Nil(t, rt)
	assert.ErrorContains(t, err, "Policy.Reserve is negative")
	assert.ErrorContains(t, err, "ProbeInterval is negative", "both")
	rt, err = NewCoordinated(nil, Policy{}, coordination.Config{RetryBudget: 1})
	assert.NoError(t, err)
	assert.NotNil(t, rt)
}

// A coordinated Transport's calls go through the engine: a 503 holds the
// retry at the gate (Attempt.Held), which sends it as the key's probe,
// and every hold is told to the Config's OnHold, not to any Policy's.
func TestNewCoordinatedCoordinates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var holds []coordination.Hold
		var rec recorder
		prov := testkit.NewProvider(testkit.Fail(503), testkit.OK())
		rt, err := NewCoordinated(prov, Policy{OnAttempt: rec.on}, coordination.Config{OnHold: func(h coordination.Hold) { holds = append(holds, h) }})
		require.NoError(t, err)
		resp, err := post(t, rt, context.Background())
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 2, rec.count())
		assert.True(t, rec.attempts[0].Held, "the retry waits at the gate")
		assert.True(t, rec.attempts[1].Probe, "and goes as the probe")
		require.Len(t, holds, 2, fmt.Sprint(holds))
		assert.Equal(t, coordination.HoldProbe, holds[1].Outcome)
	})
}

// countingRefusals is a shared store (the in-process one) that counts the
// calls to its store.PrefillRefusals.
type countingRefusals struct {
	store.Store
	calls atomic.Int64
}

func (s *countingRefusals) RefusePrefill(ctx context.Context, key, model string, at time.Time, ttl time.Duration) error {
	s.calls.Add(1)
	return s.Store.(store.PrefillRefusals).RefusePrefill(ctx, key, model, at, ttl)
}

func (s *countingRefusals) PrefillRefused(ctx context.Context, key, model string, now time.Time) (time.Time, error) {
	s.calls.Add(1)
	return s.Store.(store.PrefillRefusals).PrefillRefused(ctx, key, model, now)
}

// refusingRoute is a route that refuses every prefill, and answers the
// other requests of each call with a stream cut after "Hello wor", then
// (the regeneration) the whole answer. It counts the prefills it was sent
// per credential.
type refusingRoute struct {
	final    bool // its refusal says x-should-retry: false, as Anthropic's 400s do
	mu       sync.Mutex
	n        int
	prefills map[string]int
}

func (r *refusingRoute) RoundTrip(req *http.Request) (*http.Response, error) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if strings.Contains(string(b), `"assistant"`) {
		if r.prefills == nil {
			r.prefills = map[string]int{}
		}
		r.prefills[req.Header.Get("Authorization")]++
		resp := status(400, `{"type":"error","error":{"type":"invalid_request_error","message":"This model does not support assistant message prefill. The conversation must end with a user message."}}`)(req)
		if r.final {
			resp.Header.Set("X-Should-Retry", "false")
		}
		return resp, nil
	}
	r.n++
	if r.n%2 == 1 {
		return stream(chatStream("c1", false, "Hello", " wor"), syscall.ECONNRESET)(req), nil
	}
	return stream(chatStream("c2", true, "Hello world!"), nil)(req), nil
}

// A refused prefill is remembered per provider key (host and credential)
// and model: another credential on the same host is still sent one.
// Coordinated, it is remembered through the store, for every Transport
// (every process) that shares it: the second never sends one. The store
// is asked only when a stream is cut: a call that succeeds never asks it.
func TestContinueStreamsRefusalsPerKeyAndThroughCoordination(t *testing.T) {
	const body = `{"model":"m","messages":[{"role":"user","content":"Say hello"}],"stream":true}`
	p := Policy{RetryStreams: true, ContinueStreams: true}
	call := func(t *testing.T, rt http.RoundTripper, credential string) {
		t.Helper()
		req := testkit.StainlessPost(t, testURL, body)
		req.Header.Set("Authorization", "Bearer "+credential)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		got, err := readAll(resp)
		require.NoError(t, err)
		text, _, _, _ := chatText(t, got)
		assert.Equal(t, "Hello world!", text)
	}
	t.Run("per credential", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			route := &refusingRoute{}
			rt := mustNew(t, route, p)
			for _, cred := range []string{"sk-A", "sk-A", "sk-B", "sk-B"} {
				call(t, rt, cred)
			}
			assert.Equal(t, map[string]int{"Bearer sk-A": 1, "Bearer sk-B": 1}, route.prefills, "one refusal per key")
		})
	})
	t.Run("x-should-retry: false", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			route := &refusingRoute{final: true}
			var rec recorder
			q := p
			q.OnAttempt = rec.on
			rt := mustNew(t, route, q)
			call(t, rt, "sk-A")
			call(t, rt, "sk-A")
			assert.Equal(t, map[string]int{"Bearer sk-A": 1}, route.prefills, "the provider's last word on the prefill, not on the call")
			require.Greater(t, rec.count(), 1)
			assert.Equal(t, "prefill refused, regenerating", rec.attempts[1].Moved)
		})
	})
	t.Run("through the store", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			shared := &countingRefusals{Store: coordination.NewMemoryStore()}
			route := &refusingRoute{}
			one, err := NewCoordinated(route, p, coordination.Config{Store: shared})
			require.NoError(t, err)
			two, err := NewCoordinated(route, p, coordination.Config{Store: shared})
			require.NoError(t, err)

			healthy := &streams{replies: []func(*http.Request) *http.Response{stream(chatStream("c1", true, "Hello world!"), nil)}}
			ok, err := NewCoordinated(healthy, p, coordination.Config{Store: shared})
			require.NoError(t, err)
			call(t, ok, "sk-A")
			assert.Zero(t, shared.calls.Load(), "a call that succeeds asks the store nothing")

			call(t, one, "sk-A")
			call(t, two, "sk-A")
			assert.Equal(t, map[string]int{"Bearer sk-A": 1}, route.prefills, "one prefill for every Transport that shares the store")
			assert.Positive(t, shared.calls.Load())
		})
	})
}

// A retry held by the retry budget until its deadline less its reserve
// gives up with a HeldError whose Reason is what held it last: the budget
// (coordination/held.go: "Reason is what held the call last"), and whose
// text does not claim the provider is down.
func TestCoordinatedGiveUpSaysWhatHeldItLast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Call "a": 408 at once, then its retry hangs for 10 minutes (it
		// holds the one retry lease the budget allows). Call "b": 408,
		// then its retry is held by the budget.
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			at, _ := AttemptFromContext(r.Context())
			if r.Header.Get("X-Who") == "a" && at.N > 1 {
				select {
				case <-time.After(10 * time.Minute):
				case <-r.Context().Done():
					return nil, r.Context().Err()
				}
			}
			return testkit.Fail(408).Response(r), nil
		})
		var h testkit.Log[coordination.Hold]
		rt, err := NewCoordinated(base, Policy{Waits: []time.Duration{time.Second}, MaxRetries: 5, Reserve: 5 * time.Second},
			coordination.Config{MinRetries: 1, RetryBudget: 0.01, OnHold: h.Add})
		require.NoError(t, err)
		send := func(who string, ctx context.Context) (*http.Response, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, testURL, strings.NewReader(`{"model":"m"}`))
			require.NoError(t, err)
			req.Header.Set("X-Who", who)
			return rt.RoundTrip(req)
		}
		go func() {
			resp, err := send("a", withDeadline(t, 20*time.Minute))
			if err == nil {
				resp.Body.Close()
			}
		}()
		time.Sleep(3 * time.Second) // a's retry is in flight, holding the retry lease
		_, err = send("b", withDeadline(t, time.Minute))
		var held *coordination.HeldError
		require.ErrorAs(t, err, &held, "%v", err)
		hs := h.All()
		require.NotEmpty(t, hs)
		assert.Equal(t, coordination.HoldBudget, hs[0].Reason, "the hold began for the budget")
		assert.Equal(t, coordination.HoldBudget, held.Reason, "HeldError.Reason: what held the call last")
		assert.NotContains(t, err.Error(), "provider down", "the key was never down")
	})
}

// A coordinated call that gives up because the key's server wait is
// above its MaxRetryAfter stops with ErrWaitTooLong, not ErrNoTimeLeft
// ("no time left before the deadline less the reserve") — it has no
// deadline at all. stop.go: ErrWaitTooLong is "the server asked for a wait
// ... longer than Policy.MaxRetryAfter"; decisions 122; guarantees "Every
// stop says why ... (a coordinated give-up too)".
func TestCoordinatedServerWaitAboveMaxRetryAfterIsWaitTooLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(429, "Retry-After", "120"))
		rt, err := NewCoordinated(prov, Policy{}, coordination.Config{})
		require.NoError(t, err)
		done := make(chan struct{})
		go func() {
			defer close(done)
			resp, err := post(t, rt, context.Background())
			if err == nil {
				resp.Body.Close()
			}
		}()
		time.Sleep(time.Second)
		ctx := WithPolicy(context.Background(), Policy{MaxRetryAfter: time.Minute})
		_, err = post(t, rt, ctx)
		var held *coordination.HeldError
		require.ErrorAs(t, err, &held)
		assert.Equal(t, 1, prov.Attempts(), "the second call sent nothing")
		assert.ErrorIs(t, err, ErrWaitTooLong, "the server's wait is above the call's MaxRetryAfter: %v", err)
		assert.NotErrorIs(t, err, ErrNoTimeLeft, "the call has no deadline: %v", err)
		<-done
	})
}

// While a key is down, at most one probe goes per ProbeInterval (a random
// 0–20 % sooner): a probe whose caller cancels it mid-flight was sent all
// the same, and must not let the next probe go at once.
func TestCoordinatedCanceledProbeKeepsTheInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		var arrivals []time.Duration
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			arrivals = append(arrivals, time.Since(start))
			n := len(arrivals)
			mu.Unlock()
			if n == 1 {
				return testkit.Fail(502).Response(r), nil
			}
			// Probes hang until their caller gives up.
			<-r.Context().Done()
			return nil, r.Context().Err()
		})
		rt, err := NewCoordinated(base, Policy{Reserve: time.Second}, coordination.Config{ProbeInterval: 10 * time.Second})
		require.NoError(t, err)
		var wg sync.WaitGroup
		call := func(ctx context.Context) {
			defer wg.Done()
			resp, err := post(t, rt, ctx)
			if err == nil {
				resp.Body.Close()
			}
		}
		// The first call marks the key down (502) and goes as the first
		// probe (within its own first wait, < 1 s), which hangs; it is
		// canceled at 3 s.
		ctx1, cancel1 := context.WithCancel(context.Background())
		t.Cleanup(cancel1)
		wg.Add(1)
		go call(ctx1)
		time.Sleep(1500 * time.Millisecond)
		// Another call, held, with a deadline far off.
		wg.Add(1)
		go call(withDeadline(t, 2*time.Minute))
		time.Sleep(1500 * time.Millisecond)
		mu.Lock()
		require.Len(t, arrivals, 2, "the 502 and the first probe: %v", arrivals)
		probe1 := arrivals[1]
		mu.Unlock()
		cancel1()
		time.Sleep(3 * time.Minute)
		wg.Wait()
		mu.Lock()
		got := append([]time.Duration(nil), arrivals...)
		mu.Unlock()
		require.GreaterOrEqual(t, len(got), 3, "the held call went as the next probe: %v", got)
		assert.GreaterOrEqual(t, got[2]-probe1, 8*time.Second, "the next probe waits at least 80 %% of ProbeInterval after the previous one was sent: %v", got)
	})
}

// OnHold "is called when a call of the Transport is held back before an
// attempt" (coordination/config.go): a call without a deadline whose turn
// under a pace is more than 10 minutes off is held all the same, and its
// hold is recorded as it begins.
func TestCoordinatedFarPacedTurnIsRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.OK().With("X-Ratelimit-Limit-Requests", "60").
			With("X-Ratelimit-Remaining-Requests", "0").With("X-Ratelimit-Reset-Requests", "1h"))
		var h testkit.Log[coordination.Hold]
		rt, err := NewCoordinated(prov, Policy{}, coordination.Config{OnHold: h.Add})
		require.NoError(t, err)
		resp, err := post(t, rt, context.Background())
		require.NoError(t, err)
		resp.Body.Close()
		const calls = 15
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := post(t, rt, ctx)
				if err == nil {
					resp.Body.Close()
				}
			}()
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Second)
		assert.Equal(t, 1, prov.Attempts(), "every call is held by the pace")
		waiting := 0
		for _, x := range h.All() {
			if x.Outcome == coordination.HoldWaiting {
				waiting++
			}
		}
		assert.Equal(t, calls, waiting, "every held call's hold is recorded as it begins")
		cancel()
		wg.Wait()
		ended := 0
		for _, x := range h.All() {
			if x.Outcome == coordination.HoldCanceled {
				ended++
			}
		}
		assert.Equal(t, calls, ended, "every held call's hold ends, canceled")
	})
}

// A panic in OnAttempt on a stream's success under a limit on calls in
// flight reaches the caller and leaves no send lease held: the body the
// caller will never get is closed, and the next call is not held for it.
func TestCoordinatedOnAttemptPanicEndsTheStreamsLease(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replies []testkit.Reply
	}{
		{"first try", []testkit.Reply{testkit.OpenAIChatStream("Hi")}},
		{"after a 429 retry", []testkit.Reply{testkit.Fail(429), testkit.OpenAIChatStream("Hi")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(tc.replies...)
				var once sync.Once
				p := Policy{Waits: []time.Duration{time.Second}, OnAttempt: func(a Attempt) {
					if a.Response != nil && a.Response.StatusCode == 200 {
						once.Do(func() { panic("boom from OnAttempt") })
					}
				}}
				// The key has learnt a limit of 1 call in flight (a cut with
				// none in flight, for an hour).
				st := coordination.NewMemoryStore()
				rt, err := NewCoordinated(prov, p, coordination.Config{Store: st})
				require.NoError(t, err)
				key := st.Key("api.example.test", nil)
				_, err = st.Report(context.Background(), key, store.Report{At: time.Now(), Evidence: store.ProviderUp, Cut: true, Grow: time.Hour, CapUntil: time.Now().Add(time.Hour)})
				require.NoError(t, err)
				inFlight := func() int {
					f, err := st.Load(context.Background(), key, time.Now())
					require.NoError(t, err)
					return f.InFlight
				}

				assert.PanicsWithValue(t, "boom from OnAttempt", func() { _, _ = post(t, rt, context.Background()) })
				assert.Zero(t, inFlight(), "no send lease left held by the call that panicked")
				start := time.Now()
				resp, err := post(t, rt, context.Background())
				require.NoError(t, err)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				assert.Zero(t, time.Since(start), "the next call is not held for it")
			})
		})
	}
}
