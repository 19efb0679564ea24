package llmretry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
				for name, k := range coordOf(rt).stats(time.Now()) {
					assert.Zero(t, k.calls, name)
					assert.Zero(t, k.waiters, name)
					assert.False(t, k.facts.Probing(time.Now()), "%s: the probe lease is released", name)
					assert.Zero(t, k.facts.Retries, "%s: the budget is returned", name)
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
					if err := sleep(req.Context(), 20*time.Millisecond); err != nil {
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
				for name, k := range coordOf(rt).stats(time.Now()) {
					assert.False(t, k.facts.Down(time.Now()), "%s marked down by the request's own fault", name)
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
		st := coordOf(rt).stats(time.Now())["api.example.com"]
		require.Equal(t, held, st.waiters, "every call held (the probes fail at once)")
		var k *keyState
		coordOf(rt).keys.Range(func(_, v any) bool { k = v.(*keyState); return false })
		before, probes := k.woken.Load(), len(p.arrivals())
		time.Sleep(20 * time.Second)
		synctest.Wait()
		failed := len(p.arrivals()) - probes
		woken := k.woken.Load() - before
		t.Logf("%d failed probes woke %d held calls", failed, woken)
		require.Positive(t, failed)
		assert.LessOrEqual(t, woken, int64(3*failed), "a failed probe wakes the next prober only")
		cancel()
		wg.Wait()
	})
}

// The budget and the probes use leases named apart per coordinator and
// attempt, so that a fleet's stores never confuse two holders.
func TestHolderNamesAreUnique(t *testing.T) {
	rt1, _ := NewCoordinated(nil, Policy{}, Coordination{})
	rt2, _ := NewCoordinated(nil, Policy{}, Coordination{})
	seen := map[string]bool{}
	for range 1000 {
		for _, co := range []*coordinator{coordOf(rt1), coordOf(rt2)} {
			h := co.holder()
			require.False(t, seen[h], h)
			seen[h] = true
			require.False(t, strings.ContainsAny(h, " \n"), h)
		}
	}
	assert.Len(t, seen, 2000, fmt.Sprint(len(seen)))
}

// BenchmarkFailedProbe is what one failed probe costs the process with
// 10,000 calls held on its key: the prober leaves the gate (the next one is
// chosen among the held), and the failure's facts arrive and wake it.
func BenchmarkFailedProbe(b *testing.B) {
	rt, err := NewCoordinated(nil, Policy{}, Coordination{})
	if err != nil {
		b.Fatal(err)
	}
	co := coordOf(rt)
	k, _ := co.enter(mustRequest(&testing.T{}, context.Background()))
	now := time.Now()
	for i := range 10000 {
		k.register(i%7, now.Add(time.Duration(i)))
	}
	f := store.Facts{DownSince: now, DownUntil: now.Add(time.Hour), Reason: "502 Bad Gateway"}
	b.ReportAllocs()
	for b.Loop() {
		k.mu.Lock()
		prober := k.cand
		k.mu.Unlock()
		k.unregister(prober) // sent as the probe
		f.Version++
		f.NextProbe = f.NextProbe.Add(time.Second)
		co.learnt(k, f, now, fromShared)      // its failure, as the store answers
		k.register(prober.left, prober.since) // held again
		k.mu.Lock()
		select {
		case <-k.cand.wake: // the one woken
		default:
		}
		k.mu.Unlock()
	}
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
		b.full = later(b.full, now).Add(b.refill)
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
	if err := sleep(req.Context(), b.gen); err != nil {
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
	if err := sleep(req.Context(), s.gen); err != nil {
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
		for name, k := range coordOf(rt).stats(time.Now()) {
			assert.False(t, k.facts.Paced(time.Now()), "%s: the pace lapsed", name)
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
		for name, k := range coordOf(rt).stats(time.Now()) {
			assert.False(t, k.facts.Capped(time.Now()), "%s: the limit lapsed", name)
			assert.Zero(t, k.facts.InFlight, "%s: no send lease left", name)
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
	n := 0
	coordOf(rt).keys.Range(func(_, v any) bool {
		k := v.(*keyState)
		assert.Zero(t, k.unleasedIn.load())
		assert.Zero(t, k.calls.load())
		n++
		return true
	})
	assert.Equal(t, 1, n)
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
		_, err = st.Report(context.Background(), st.Key(req.URL.Host, credentialOf(req)),
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
