package coord_test

// The pace a spent rate limit sets and the limit on calls in flight
// (pace.go, and the gate's send leases) through coordinated Transports,
// against providers that enforce their limits as OpenAI's and Anthropic's
// do; then what a key's 429s teach it (taught.go), in its section below.

import (
	"context"
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

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/internal/clock"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/llmretry/llmretry/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
		st := &testkit.Store{Store: coordination.NewMemoryStore()}
		var h holds
		rt, err := llmretry.NewCoordinated(b, llmretry.Policy{Waits: hostWaits, Reserve: time.Minute}, coordination.Config{Store: st, OnHold: h.Add})
		require.NoError(t, err)
		last := lastAnswer(t, callMany(t, rt, b.start, calls, 0, 10*time.Minute, nil))
		assert.LessOrEqual(t, b.refusedAfter(0), 2, "after the first 429 came back (at once), at most 2 more")
		// The bucket allows the 60th request at 50 s: answered at 52 s.
		assert.GreaterOrEqual(t, last, 52*time.Second)
		assert.LessOrEqual(t, last, 53*time.Second, "at the limit's pace, not later")
		ended := h.ended()
		assert.Positive(t, ended[coordination.HoldReleased])
		for _, x := range h.All() {
			assert.Equal(t, coordination.HoldPaced, x.Reason)
		}

		time.Sleep(time.Hour)
		assert.False(t, load(t, st, "api.example.com").Paced(time.Now()), "the pace lapsed")
		before := st.Calls()
		n := len(b.admitted)
		require.NoError(t, callMany(t, rt, b.start, 1, 0, time.Minute, nil)[0].err)
		assert.Equal(t, before, st.Calls(), "a quiet key again: no store call")
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
		s := &refusing{start: time.Now(), max: 8, gen: gen}
		var h holds
		st := coordination.NewMemoryStore()
		rt, err := llmretry.NewCoordinated(s, llmretry.Policy{Waits: hostWaits, Reserve: time.Minute}, coordination.Config{OnHold: h.Add, Store: st})
		require.NoError(t, err)
		last := lastAnswer(t, callMany(t, rt, s.start, calls, 100*time.Millisecond, 10*time.Minute, nil))
		s.mu.Lock()
		refused := slices.Clone(s.refused)
		most := s.most
		s.mu.Unlock()
		require.NotEmpty(t, refused)
		assert.LessOrEqual(t, len(refused), 3, "the first 429 (back at once), and at most 2 more")
		assert.Equal(t, 8, most)
		assert.LessOrEqual(t, last, 16300*time.Millisecond*6/5, "within 20 % of the limit's pace")
		reasons := map[coordination.HoldReason]int{}
		for _, x := range h.All() {
			reasons[x.Reason]++
		}
		assert.Positive(t, reasons[coordination.HoldInFlight])

		time.Sleep(time.Hour)
		f := load(t, st, "api.example.com")
		assert.False(t, f.Capped(time.Now()), "the limit lapsed")
		assert.Zero(t, f.InFlight, "no send lease left")
	})
}

// Two processes meet a concurrency limit of 2 through one store whose
// reports take 50 ms (a loaded Redis): process A sends 3 calls (2
// admitted for 2 s, one refused), then process B 4 calls, all refused 10,
// 11, 12 and 13 ms after they left, before any of B's reports is answered
// (its view of the key still quiet). B's reports cut the key as they go;
// its last two refusals leave fewer than 2 of its own in flight, and its
// view shows no others: they must still take the count again, and tell the
// store B's attempts ended, or the limit stays at a count that held B's
// refused attempts (4), B's tally with it, and the retries sent after the
// server's wait (1 s) go past the provider's 2 (the fleet test's late
// 429s, redisstore TestFleetRateLimit/concurrency). The limit is the 2
// the provider took; no attempt sent under it is refused.
func TestCoordinatedCutCountsRefusalsOfAQuietView(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		p := &refusing{start: start, max: 2, gen: 2 * time.Second}
		st := coordination.NewMemoryStore()
		slow := slowReports{Store: st, d: 50 * time.Millisecond}
		policy := llmretry.Policy{Waits: hostWaits, Reserve: time.Minute}
		a := coordinated(t, p, policy, coordination.Config{Store: slow})
		b := coordinated(t, p, policy, coordination.Config{Store: slow})
		refuseIn := func(d func(i int) time.Duration) func(int, *http.Request) {
			return func(i int, req *http.Request) { req.Header.Set(refuseInHeader, d(i).String()) }
		}
		var wg sync.WaitGroup
		var ra, rb []callResult
		wg.Go(func() {
			ra = callMany(t, a, start, 3, 0, 10*time.Minute, refuseIn(func(int) time.Duration { return 5 * time.Millisecond }))
		})
		wg.Go(func() {
			time.Sleep(time.Millisecond)
			rb = callMany(t, b, start, 4, 0, 10*time.Minute, refuseIn(func(i int) time.Duration { return time.Duration(10+i) * time.Millisecond }))
		})
		var limit int
		wg.Go(func() {
			time.Sleep(500 * time.Millisecond) // every report of the first crowd told
			limit = load(t, st, "api.example.com").Cap(time.Now())
		})
		wg.Wait()
		for _, r := range append(ra, rb...) {
			require.NoError(t, r.err)
		}
		assert.Equal(t, 2, limit, "the limit on calls in flight: the 2 the provider took")
		p.mu.Lock()
		defer p.mu.Unlock()
		assert.Len(t, p.refused, 5, "the first crowd's refusals, and no more")
		assert.Equal(t, 2, p.most)
	})
}

// A process that learns of a limit on calls in flight (another's cut)
// tells the store its attempts in flight without a lease as its next call
// meets the key, not at that call's first send after the server's wait:
// the provider takes 4; A and B each send 2 at once (B's first answered
// at 1 s, the others at 2 s); A's third, at 0.5 s, is refused, and A's
// cut counts its own 2 alone (B's not told yet). B's third call, at 0.6
// s, is held for the server's wait (until 1.5 s); told then, B's count
// (1 left) would raise the limit to 3. Told at 0.6 s, it raises it to
// the 4 in flight.
func TestCoordinatedLearntLimitTellsTheCountAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		p := &refusing{start: start, max: 4, gen: 2 * time.Second}
		st := coordination.NewMemoryStore()
		policy := llmretry.Policy{Waits: hostWaits, Reserve: time.Minute}
		a := coordinated(t, p, policy, coordination.Config{Store: st})
		b := coordinated(t, p, policy, coordination.Config{Store: st})
		answerIn := func(d func(i int) time.Duration) func(int, *http.Request) {
			return func(i int, req *http.Request) {
				req.Header.Set(answerInHeader, d(i).String())
				req.Header.Set(refuseInHeader, "10ms")
			}
		}
		var wg sync.WaitGroup
		var results []callResult
		var mu sync.Mutex
		run := func(rt http.RoundTripper, after time.Duration, n int, d func(int) time.Duration) {
			wg.Go(func() {
				time.Sleep(after)
				r := callMany(t, rt, start, n, 0, 10*time.Minute, answerIn(d))
				mu.Lock()
				defer mu.Unlock()
				results = append(results, r...)
			})
		}
		twoS := func(int) time.Duration { return 2 * time.Second }
		run(a, 0, 2, twoS)
		run(b, 0, 2, func(i int) time.Duration { return time.Duration(1+i) * time.Second })
		synctest.Wait()
		run(a, 500*time.Millisecond, 1, twoS)
		run(b, 600*time.Millisecond, 1, twoS)
		var limit int
		wg.Go(func() {
			time.Sleep(1200 * time.Millisecond)
			limit = load(t, st, "api.example.com").Cap(time.Now())
		})
		wg.Wait()
		for _, r := range results {
			require.NoError(t, r.err)
		}
		assert.Equal(t, 4, limit, "the limit on calls in flight: the 4 the provider took")
	})
}

// slowReports is a store whose Reports take d: the reporting process's
// view of the key learns each report d after it was sent.
type slowReports struct {
	store.Store
	d time.Duration
}

func (s slowReports) Report(ctx context.Context, key string, r store.Report) (store.Facts, error) {
	time.Sleep(s.d)
	return s.Store.Report(ctx, key, r)
}

// refuseInHeader and answerInHeader carry, on a request to a refusing
// provider, how long its 429 takes, and its answer if admitted (Go
// durations; the provider's gen if none).
const (
	refuseInHeader = "X-Refuse-In"
	answerInHeader = "X-Answer-In"
)

// refusing is an in-memory provider enforcing a limit on requests in
// flight the way Anthropic does: it takes at most max at once, each
// answered gen (or its answerInHeader) after it arrived, and refuses the
// others with 429 "Number of concurrent connections has exceeded your
// rate limit" and retry-after: 1, at once (or after the request's
// refuseInHeader).
type refusing struct {
	start time.Time
	max   int
	gen   time.Duration

	mu       sync.Mutex
	inFlight int
	most     int             // the most in flight at once
	refused  []time.Duration // arrivals, since start
}

func (p *refusing) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	p.mu.Lock()
	if p.inFlight >= p.max {
		p.refused = append(p.refused, time.Since(p.start))
		p.mu.Unlock()
		d, _ := time.ParseDuration(req.Header.Get(refuseInHeader))
		if err := clock.Sleep(req.Context(), d); err != nil {
			return nil, err
		}
		body := `{"type":"error","error":{"type":"rate_limit_error","message":"Number of concurrent connections has exceeded your rate limit."}}`
		return &http.Response{StatusCode: 429, Status: "429 Too Many Requests", Header: http.Header{"Retry-After": {"1"}, "Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), ContentLength: -1, Request: req}, nil
	}
	p.inFlight++
	p.most = max(p.most, p.inFlight)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inFlight--
		p.mu.Unlock()
	}()
	gen := p.gen
	if d, err := time.ParseDuration(req.Header.Get(answerInHeader)); err == nil {
		gen = d
	}
	if err := clock.Sleep(req.Context(), gen); err != nil {
		return nil, err
	}
	return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(`{"ok":true}`)), ContentLength: -1, Request: req}, nil
}

// A call whose turn under a pace comes after the last instant it may send
// ends at once, without sending, and says why.
func TestCoordinatedPaceGivesUpPastItsLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBucket(1, 30*time.Second, 0)
		rt, err := llmretry.NewCoordinated(b, llmretry.Policy{Reserve: time.Second}, coordination.Config{})
		require.NoError(t, err)
		require.NoError(t, callMany(t, rt, b.start, 1, 0, time.Minute, nil)[0].err) // spends the bucket: paced until 30 s
		start := time.Now()
		res := callMany(t, rt, b.start, 1, 0, 20*time.Second, nil)[0]
		var down *coordination.HeldError
		require.ErrorAs(t, res.err, &down)
		assert.Equal(t, coordination.HoldPaced, down.Reason)
		assert.Equal(t, 30*time.Second, down.Left)
		assert.ErrorIs(t, res.err, llmretry.ErrNoTimeLeft)
		assert.Equal(t, start.Sub(b.start), res.at, "at once")
		assert.Len(t, b.admitted, 1, "nothing sent")
		assert.Empty(t, b.refused)
	})
}

// A pace whose next turn is further off than a call's MaxRetryAfter paces
// nothing for it (coordination.md): under the pace a patient call wrote (a
// bucket of one, back in 30 s), a call that honours waits up to 10 s goes
// at once, meets the provider's 429, and returns it (its wait too long).
func TestCoordinatedPaceBeyondMaxRetryAfterPacesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBucket(1, 30*time.Second, 0)
		st := coordination.NewMemoryStore()
		patient, err := llmretry.NewCoordinated(b, llmretry.Policy{}, coordination.Config{Store: st})
		require.NoError(t, err)
		hasty, err := llmretry.NewCoordinated(b, llmretry.Policy{MaxRetryAfter: 10 * time.Second}, coordination.Config{Store: st})
		require.NoError(t, err)
		require.NoError(t, callMany(t, patient, b.start, 1, 0, time.Minute, nil)[0].err) // paced until 30 s
		res := callMany(t, hasty, b.start, 1, 0, time.Minute, nil)[0]
		assert.Zero(t, res.at, "at once")
		assert.ErrorContains(t, res.err, "429")
		assert.Len(t, b.admitted, 1)
		assert.Len(t, b.refused, 1, "sent, not paced")
	})
}

// forgedSlot grants its first TakeSends (all of them if first is 0) at
// slot, past the lease asked for: an answer no store that keeps the
// contract gives (store.Store: nothing is granted after l.Until), taking
// what the store it wraps grants (a send lease) all the same.
type forgedSlot struct {
	store.Store
	slot  time.Time
	first int64
	taken atomic.Int64
}

func (s *forgedSlot) TakeSend(ctx context.Context, key string, l store.Lease, limit int) (store.Facts, time.Time, bool, error) {
	f, at, ok, err := s.Store.TakeSend(ctx, key, l, limit)
	if n := s.taken.Add(1); s.slot.IsZero() || s.first > 0 && n > s.first {
		return f, at, ok, err
	}
	return f, s.slot, true, err
}

// A send slot a shared store grants past the lease's end (the year 3000)
// is no grant: the call, paced or limited, gives up at once as past its
// limits, with a *coordination.HeldError whose Until is no further off
// than its own facts could put it, nothing sent and the lease released; a
// call without a deadline waits no longer than that before it asks again.
// (Before, each slept to the slot: to its deadline, or for ever.)
func TestCoordinatedForgedSendSlotIsNoGrant(t *testing.T) {
	far := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		slot     time.Time
		first    int64         // forged TakeSends, 0 for all
		limited  bool          // the key's calls in flight are limited too
		deadline time.Duration // 0 for none
		gaveUp   bool
		took     time.Duration // at most
	}{
		{name: "the store's own slot", deadline: 2 * time.Minute},
		{name: "the year 3000, paced", slot: far, deadline: 2 * time.Minute, gaveUp: true},
		{name: "the year 3000, limited", slot: far, limited: true, deadline: 2 * time.Minute, gaveUp: true},
		{name: "the year 3000 once, no deadline", slot: far, first: 1, took: 20 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := coordination.NewMemoryStore()
				st := &forgedSlot{Store: mem, slot: tc.slot, first: tc.first}
				var sent atomic.Int64
				base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
					sent.Add(1)
					return status(200).response(req)
				})
				rt := coordinated(t, base, llmretry.Policy{Waits: []time.Duration{time.Second}, Reserve: 30 * time.Second}, coordination.Config{Store: st})
				// Paced as another process's report makes it: a bucket
				// of 10, one back a second, full in 5 s (a send now);
				// limited to 4 calls in flight, none in flight.
				now := time.Now()
				reports := []store.Report{{At: now, Burst: 10, Every: time.Second, Full: now.Add(5 * time.Second)}}
				if tc.limited {
					until := now.Add(time.Minute)
					reports = append(reports,
						store.Report{At: now, Evidence: store.ProviderUp, Owner: "other", Unleased: 4, Seq: 1, TallyUntil: until, Cut: true, Grow: 30 * time.Second, CapUntil: until},
						store.Report{At: now, Evidence: store.ProviderUp, Owner: "other", Seq: 2, TallyUntil: until})
				}
				for _, r := range reports {
					_, err := mem.Report(context.Background(), "api.example.com", r)
					require.NoError(t, err)
				}

				ctx := context.Background()
				if tc.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.deadline)
					defer cancel()
				}
				start := time.Now()
				resp, err := rt.RoundTrip(mustRequest(t, ctx))
				took := time.Since(start)
				if !tc.gaveUp {
					require.NoError(t, err)
					resp.Body.Close()
					assert.LessOrEqual(t, took, tc.took)
					assert.Equal(t, int64(1), sent.Load())
					return
				}
				var held *coordination.HeldError
				require.ErrorAs(t, err, &held)
				assert.ErrorIs(t, err, llmretry.ErrNoTimeLeft)
				assert.Equal(t, coordination.HoldPaced, held.Reason)
				assert.Equal(t, time.Duration(0), took, "at once")
				assert.Zero(t, sent.Load(), "nothing sent")
				assert.Less(t, held.Left, time.Hour, "Until %v: no further off than its own facts could put it", held.Until)
				assert.Zero(t, load(t, mem, "api.example.com").InFlight, "the lease released")
			})
		})
	}
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
		st := coordination.NewMemoryStore()
		var h holds
		rt, err := llmretry.NewCoordinated(base, llmretry.Policy{}, coordination.Config{Store: st, OnHold: h.Add})
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
		require.NotEmpty(t, h.All())
		assert.Equal(t, coordination.HoldInFlight, h.All()[0].Reason)
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
		rt, err := llmretry.NewCoordinated(base, llmretry.Policy{Waits: hostWaits, Reserve: time.Minute}, coordination.Config{})
		require.NoError(t, err)
		results := callMany(t, rt, a.start, 2*perModel, 0, 10*time.Minute, func(i int, req *http.Request) {
			if i%2 == 1 {
				req.Header.Set("X-Model", "b")
			}
		})
		last := lastAnswer(t, results)
		refused := len(a.refused) + len(b.refused)
		t.Logf("two models, one key: %d 429s, last answer at %v (each model alone: %v)", refused, last, 22*time.Second)
		assert.LessOrEqual(t, refused, 2*perModel-20+2, "the first burst, and at most 2 more")
		// 20 calls go before the first 429 (10 per bucket), the other 40
		// at one bucket's pace: the last at 40 s, answered at 42 s, where
		// two paces would answer every call by 22 s.
		assert.GreaterOrEqual(t, last, 40*time.Second, "paced as one bucket, though the provider has two")
	})
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
	stated   int  // the limit its headers state (0: capacity)
	silent   bool // its 429s state no wait

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
	h.Set("X-Ratelimit-Limit-Requests", strconv.Itoa(max(b.stated, b.capacity)))
	h.Set("X-Ratelimit-Remaining-Requests", strconv.Itoa(remaining))
	h.Set("X-Ratelimit-Reset-Requests", untilFull.String())
	if !ok {
		body := fmt.Sprintf(`{"error":{"message":"Rate limit reached for requests. Please try again in %v.","type":"requests","code":"rate_limit_exceeded"}}`, untilOne)
		if b.silent {
			body = `{"error":{"message":"Rate limit reached for requests.","type":"requests","code":"rate_limit_exceeded"}}`
		}
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

// What a key's 429s teach it (taught.go) through coordinated Transports,
// against a provider whose headers state a per-minute figure while it
// enforces a bucket of a tenth of it (issue 31).

// 60 calls at once, the zero Policy, against a bucket of 10 refilled at
// 1/s whose headers state 60: read alone they pace the key at 6 a second.
// The first 429s state the wait for one request (1 s): the lesson's floor
// is the bucket's true interval, every later send goes at it, no 429
// reaches the provider after the first came back, and the calls are
// answered as soon as the bucket allows (the 60th admitted at 50 s). An
// hour later the lesson has lapsed: a call goes straight out, with no
// store call.
func TestCoordinatedBelievesThe429(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const calls, gen = 60, 2 * time.Second
		b := newBucket(10, time.Second, gen)
		b.stated = 60
		st := &testkit.Store{Store: coordination.NewMemoryStore()}
		rt, err := llmretry.NewCoordinated(b, llmretry.Policy{}, coordination.Config{Store: st})
		require.NoError(t, err)
		last := lastAnswer(t, callMany(t, rt, b.start, calls, 0, 10*time.Minute, nil))
		f := load(t, st, "api.example.com")
		assert.Equal(t, time.Second, f.Floor, "the bucket's true interval")
		assert.True(t, f.Taught(time.Now()))
		assert.Zero(t, b.refusedAfter(0), "no 429 after the first burst's")
		assert.GreaterOrEqual(t, last, 52*time.Second)
		assert.LessOrEqual(t, last, 53*time.Second, "at the bucket's pace, not slower")

		time.Sleep(time.Hour)
		assert.False(t, load(t, st, "api.example.com").Taught(time.Now()), "the lesson lapsed")
		before := st.Calls()
		require.NoError(t, callMany(t, rt, b.start, 1, 0, time.Minute, nil)[0].err)
		assert.Equal(t, before, st.Calls(), "a quiet key again: no store call")
	})
}

// The same bucket whose 429s state no wait: nothing proves its interval,
// so each 429 at the pace's turn cuts the key's rate to 0.7 of what it was
// until the sends fit (turns granted before a cut keep their instants, and
// some of them meet 429s too): each such 429 the pace's error, not the
// call's: under the zero Policy every call answers all the same. The
// price of a silent provider is turns: those granted before a cut keep
// their instants, and each spends a 429 until the queue's turns are the
// cut pace's (34 in this run; a stated wait proves the interval at the
// first 429, above, and costs none).
func TestCoordinatedMispacedSpendsOneRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const calls, gen = 40, 2 * time.Second
		b := newBucket(10, time.Second, gen)
		b.stated, b.silent = 60, true
		st := &testkit.Store{Store: coordination.NewMemoryStore()}
		rt, err := llmretry.NewCoordinated(b, llmretry.Policy{}, coordination.Config{Store: st})
		require.NoError(t, err)
		results := callMany(t, rt, b.start, calls, 0, 10*time.Minute, nil)
		for i, r := range results {
			assert.NoError(t, r.err, "call %d", i)
		}
		late := b.refusedAfter(0)
		assert.Positive(t, late, "the pace was wrong, and was told")
		assert.LessOrEqual(t, late, calls, "at most one a call, past the first burst's")
		assert.True(t, load(t, st, "api.example.com").Taught(time.Now()))
		t.Logf("%d 429s after the first burst's", late)
	})
}
