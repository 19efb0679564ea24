package coord_test

// The coordinator's behaviour (coordinator.go) through coordinated
// Transports: facts that lapse, keys forgotten, stores shared, and stores
// that misbehave (testkit.Store); then routes (routes.go), in its section
// below.

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// Hundreds of calls with mixed policies, deadlines, cancellations,
// credentials and hosts through a provider that flaps: every call ends
// (synctest fails on a deadlock), every result is a response or an error,
// and the shared state ends clean: no retry, hold, probe or send lease
// left. (That every call leaves its key: the core's TestGatekeeperSeam
// and the engine's TestStats.)
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
			var keys keySet
			var h holds
			st := &testkit.Store{Store: coordination.NewMemoryStore(), After: keys.after}
			rt, err := llmretry.NewCoordinated(cp, llmretry.Policy{Waits: []time.Duration{2 * time.Second, 10 * time.Second}, Reserve: 5 * time.Second},
				coordination.Config{ProbeInterval: 3 * time.Second, MinRetries: 2, Store: st, OnHold: h.Add})
			require.NoError(t, err)
			policies := []llmretry.Policy{{}, {Waits: []time.Duration{time.Second}, Reserve: time.Second}, {MaxRetryAfter: 2 * time.Second, MaxRetries: 3}}
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
						ctx = llmretry.WithPolicy(ctx, policies[i%len(policies)])
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
						var down *coordination.HeldError
						switch {
						case errors.As(err, &down):
							what = "gave up held"
						case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
							what = "context"
						default:
							var ex *llmretry.Exhausted
							require.ErrorAs(t, err, &ex, "an error is the context's or an *llmretry.Exhausted")
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
			assert.Zero(t, h.open(), "held calls")
			require.NotEmpty(t, keys.list())
			for _, name := range keys.list() {
				f := load(t, st, name)
				assert.Zero(t, f.Retries, "%v: retries in flight", name)
				assert.False(t, f.Probing(time.Now()), "%v: a probe never reported", name)
				assert.Zero(t, f.InFlight, "%v: send leases", name)
			}
		})
	}
}

// A down state lapses: one 502 that nobody probed (its call could not
// wait), an hour of silence, then 50 calls with 30-s deadlines: every one
// goes straight out and answers. (That the view is marked quiet:
// TestLapsedViewIsQuietAgain.)
func TestCoordinatedDownLapses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(status(502), 20*time.Millisecond, window{0, 200 * time.Millisecond})
		var h holds
		st := &testkit.Store{Store: coordination.NewMemoryStore()}
		rt, err := llmretry.NewCoordinated(p, llmretry.Policy{Reserve: time.Minute}, coordination.Config{OnHold: h.Add, Store: st})
		require.NoError(t, err)
		// 30 s of deadline, 60 s of reserve: no retry fits, the 502 is
		// returned and the key is down with nobody to probe it.
		r := callMany(t, rt, p.start, 1, 0, 30*time.Second, nil)
		require.Error(t, r[0].err)
		require.True(t, load(t, st, "api.example.com").Down(time.Now()))

		time.Sleep(time.Hour)
		start := time.Now()
		results := callMany(t, rt, p.start, 50, 0, 30*time.Second, nil)
		for i, r := range results {
			assert.NoError(t, r.err, "call %d", i)
		}
		for _, a := range p.arrivals()[1:] {
			assert.Equal(t, start.Sub(p.start), a, "sent at once, not held")
		}
		assert.Empty(t, h.All(), "nobody was held")
		calls := st.Calls()
		require.NoError(t, callMany(t, rt, p.start, 1, 0, 30*time.Second, nil)[0].err)
		assert.Equal(t, calls, st.Calls(), "the lapsed view is quiet again: the next call takes the success path, with no store call")
	})
}

// An hour of silence after an outage leaves nothing behind: no key, no
// lease, no hold, in the store; a call then goes straight out. (That the
// engine forgets the keys too: TestSweepAfterSilence.)
func TestCoordinatedSilenceLeavesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(status(502), time.Second, window{0, 20 * time.Second})
		var h holds
		st := coordination.NewMemoryStore()
		rt, err := llmretry.NewCoordinated(p, llmretry.Policy{Waits: hostWaits, Reserve: time.Minute}, coordination.Config{Store: st, OnHold: h.Add})
		require.NoError(t, err)
		results := callMany(t, rt, p.start, 30, 100*time.Millisecond, 8*time.Minute, func(i int, req *http.Request) {
			req.Header.Set("Authorization", "Bearer key-"+strconv.Itoa(i%10))
		})
		for _, r := range results {
			require.NoError(t, r.err)
		}
		keys := h.keys()
		require.Len(t, keys, 10, "ten keys in use, each held")

		time.Sleep(time.Hour)
		start := time.Now()
		n := len(p.arrivals())
		results = callMany(t, rt, p.start, 1, 0, time.Minute, func(_ int, req *http.Request) {
			req.Header.Set("Authorization", "Bearer a-new-key")
		})
		require.NoError(t, results[0].err)
		assert.Equal(t, start.Sub(p.start), p.arrivals()[n], "straight out")
		assert.Zero(t, h.open(), "no call held")
		for name := range keys {
			assert.Equal(t, store.Facts{}, load(t, st, name), "%s: the store forgot it (no version kept)", name)
		}
	})
}

// Memory is bounded by the keys in use, not the keys ever used: rounds of
// 10,000 one-off credentials (one key per API key ever seen), each of which
// saw a 502 or a 429 with Retry-After: 2, are forgotten once their facts
// lapse, here (by the sweep a new key's arrival runs) and in the store, and
// the heap comes back to where it was. (What the engine keeps between two
// sweeps: TestSweepAfterSilence and TestStats.) (The calls of a round go
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
		// A few of each round's keys, by their holds: the store is asked of
		// them once they lapsed (no more, which would hold on to memory).
		var sample []string
		onHold := func(h coordination.Hold) {
			mu.Lock()
			defer mu.Unlock()
			if len(sample) < 10 && !slices.Contains(sample, h.Key) {
				sample = append(sample, h.Key)
			}
		}
		st := coordination.NewMemoryStore()
		rt, err := llmretry.NewCoordinated(base, llmretry.Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second}, coordination.Config{ProbeInterval: time.Second, Store: st, OnHold: onHold})
		require.NoError(t, err)
		// sweep makes a call on a key never used before: its arrival
		// sweeps the engine's keys and its store, once a minute at most.
		sweep := func(name string) {
			require.NoError(t, callMany(t, rt, time.Now(), 1, 0, time.Minute, func(_ int, req *http.Request) {
				req.Header.Set("Authorization", "Bearer "+name)
			})[0].err)
		}
		var heaps []uint64
		for round := range 4 {
			mu.Lock()
			seen = map[string]bool{} // the provider's own memory is not the point
			sample = nil
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
			sweep("sweep-" + strconv.Itoa(round) + "-a")
			mu.Lock()
			require.NotEmpty(t, sample)
			for _, name := range sample {
				assert.Equal(t, store.Facts{}, load(t, st, name), "round %d: the store kept %s", round, name)
			}
			mu.Unlock()
			time.Sleep(time.Minute) // the engine's sweepEvery
			sweep("sweep-" + strconv.Itoa(round) + "-b")
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
		p := newFlaky(status(429, "Retry-After", "5"), 0, window{0, time.Nanosecond})
		st := coordination.NewMemoryStore()
		a, err := llmretry.NewCoordinated(p, llmretry.Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second}, coordination.Config{Store: st})
		require.NoError(t, err)
		b, err := llmretry.NewCoordinated(p, llmretry.Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second}, coordination.Config{Store: st})
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

// A held call whose store answers refuse the probe with facts the view will
// not take (no newer than its own) does not spin: it asks again at the
// next re-check, and gives up at its deadline minus its reserve.
func TestCoordinatedNoSpinOnStaleAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(status(502), 0, window{0, time.Hour})
		st := &testkit.Store{Store: coordination.NewMemoryStore(), Forgetful: true} // a store that has lost its versions
		rt, err := llmretry.NewCoordinated(p, llmretry.Policy{Reserve: 10 * time.Millisecond}, coordination.Config{Store: st, ProbeInterval: 200 * time.Millisecond})
		require.NoError(t, err)
		// One call takes the probe and hangs on to it (never reported
		// within the test); another is refused the lease over and over.
		results := callMany(t, rt, p.start, 2, 0, 500*time.Millisecond, nil)
		for _, r := range results {
			require.Error(t, r.err)
		}
		probes := st.Calls(testkit.OpTakeProbe)
		t.Logf("probes asked: %d, arrivals %v", probes, p.arrivals())
		assert.Less(t, probes, int64(50), "asked for the probe lease %d times in 500 ms", probes)
	})
}

// A refused lease whose answer contradicts itself never spins, and every
// turn of the gate checks the call's limits: the call ends at its deadline
// minus its reserve (before: it asked for the lease in a loop that never
// read the clock, past its deadline).
func TestCoordinatedRefusedLeaseNeverSpins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(status(502), 0, window{0, time.Hour})
		st := &testkit.Store{Store: coordination.NewMemoryStore(), Liar: true}
		rt, err := llmretry.NewCoordinated(p, llmretry.Policy{Reserve: 10 * time.Millisecond}, coordination.Config{Store: st, ProbeInterval: 200 * time.Millisecond})
		require.NoError(t, err)
		start := time.Now()
		results := callMany(t, rt, p.start, 3, 0, time.Second, nil)
		for _, r := range results {
			require.Error(t, r.err)
		}
		assert.LessOrEqual(t, time.Since(start), time.Second)
		probes := st.Calls(testkit.OpTakeProbe)
		assert.LessOrEqual(t, probes, int64(3*5*5+3), "asked for the probe lease %d times in 1 s (5 probe intervals)", probes)
	})
}

// A process whose store says it may have lost notices (its subscription
// was made again after a silent drop) reads each key it uses again on the
// key's next call, so another process's server wait still holds its calls
// (before: a quiet key was never read again); a quiet key otherwise makes
// no store call.
func TestCoordinatedDeafProcessRereads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(status(429, "Retry-After", "5"), 0, window{time.Second, time.Second + time.Nanosecond})
		st := coordination.NewMemoryStore()
		policy := llmretry.Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second}
		a, err := llmretry.NewCoordinated(p, policy, coordination.Config{Store: st, ProbeInterval: time.Second})
		require.NoError(t, err)
		deaf := &testkit.Store{Store: st, Deaf: true}
		b, err := llmretry.NewCoordinated(p, policy, coordination.Config{Store: deaf, ProbeInterval: time.Second})
		require.NoError(t, err)
		require.NoError(t, callMany(t, b, p.start, 1, 0, time.Minute, nil)[0].err) // b knows the key
		time.Sleep(time.Second)
		done := make(chan error, 1)
		go func() { done <- callMany(t, a, p.start, 1, 0, time.Minute, nil)[0].err }() // 429: wait until 6 s
		synctest.Wait()
		quietLoads := deaf.Calls(testkit.OpLoad)
		time.Sleep(500 * time.Millisecond)
		deaf.Reconnect() // b's store found its subscription dead and made it again
		time.Sleep(500 * time.Millisecond)
		require.NoError(t, callMany(t, b, p.start, 1, 0, time.Minute, nil)[0].err)
		require.NoError(t, <-done)
		at := p.arrivals()
		require.Len(t, at, 4)
		for _, x := range at[2:] {
			assert.GreaterOrEqual(t, x, 6*time.Second, "nothing before the shared wait ends: %v", at)
		}
		assert.Zero(t, quietLoads, "a quiet key's call made no store call")
		assert.Positive(t, deaf.Calls(testkit.OpLoad), "after the reconnect the key was read again")
	})
}

// A quiet key's calls read nothing from a shared store, however long the
// process runs: the success path makes no store call.
func TestCoordinatedQuietKeyMakesNoStoreCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(status(502), 0)
		counted := &testkit.Store{Store: coordination.NewMemoryStore()}
		rt, err := llmretry.NewCoordinated(p, llmretry.Policy{}, coordination.Config{Store: counted, ProbeInterval: time.Second})
		require.NoError(t, err)
		for range 60 {
			require.NoError(t, callMany(t, rt, p.start, 1, 0, time.Minute, nil)[0].err)
			time.Sleep(time.Second) // a probe interval between calls
		}
		assert.Zero(t, counted.Calls(testkit.OpLoad))
	})
}

// Routes (routes.go) through coordinated Transports whose policy has a
// fallback: each route a key of its own, calls going around a key that
// is down, and calls held on every route going where the first comes
// back.

// flakies sends each request to the flaky provider of its URL's host.
type flakies map[string]*flaky

func (m flakies) RoundTrip(r *http.Request) (*http.Response, error) {
	p, found := m[r.URL.Host]
	if !found {
		return nil, errors.New("no such host: " + r.URL.Host)
	}
	return p.RoundTrip(r)
}

// coordinatedRoutes returns a coordinated Transport (under c) over primary
// (at api.example.com, callMany's host) and fallback (at
// fallback.example.com, with its own key), policy p with the fallback
// route added.
func coordinatedRoutes(t *testing.T, p llmretry.Policy, c coordination.Config, primary, fallback *flaky) *llmretry.Transport {
	t.Helper()
	route, err := llmretry.RouteTo("https://api.example.com/v1", "https://fallback.example.com/v1", http.Header{"Authorization": {"Bearer FB"}})
	require.NoError(t, err)
	p.Fallback = append(p.Fallback, route)
	return coordinated(t, flakies{"api.example.com": primary, "fallback.example.com": fallback}, p, c)
}

// With one fallback, a primary that is down for a minute under a call a
// second: the first failure is a blip, retried on the primary after the
// first call's own wait (decision 102), then the call moves; new calls
// start on the fallback and none waits; the primary sees one probe per
// probe interval for everyone; within a probe interval (and a call's
// arrival) of its recovery new calls return to it.
func TestCoordinatedFallbackSharesTheCircuit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const calls, outage, gen, every = 100, time.Minute, time.Second, time.Second
		primary := newFlaky(status(502), gen, window{0, outage})
		fallback := newFlaky(status(502), gen)
		var h holds
		rt := coordinatedRoutes(t, llmretry.Policy{Waits: hostWaits, Reserve: time.Minute}, coordination.Config{OnHold: h.Add}, primary, fallback)

		results := callMany(t, rt, primary.start, calls, every, 2*time.Minute, nil)

		for i, r := range results {
			require.NoError(t, r.err, "call %d", i)
			if i == 0 {
				assert.LessOrEqual(t, r.at, hostWaits[0]+2*gen, "call 0: its blip's wait, then the fallback")
				continue
			}
			assert.LessOrEqual(t, r.at-time.Duration(i)*every, gen, "call %d: none waits", i)
		}
		at := primary.arrivals()
		sent := during(at, window{0, outage})
		require.NotEmpty(t, sent)
		assert.Zero(t, sent[0], "the first call's failure")
		for i := 2; i < len(sent); i++ {
			assert.GreaterOrEqual(t, sent[i]-sent[i-1], probeInterval*4/5, "probe gap: %v", sent)
		}
		assert.LessOrEqual(t, len(sent), 1+int(outage/(probeInterval*4/5))+1, "one probe per interval: %v", sent)
		assert.GreaterOrEqual(t, len(sent), int(outage/probeInterval), "and probes throughout: %v", sent)

		// Back: the first call after the next probe is due goes as the
		// probe, and succeeds; every call after it goes to the primary.
		back := during(at, window{outage, time.Hour})
		require.NotEmpty(t, back)
		assert.LessOrEqual(t, back[0]-outage, probeInterval+every, "the recovery found within a probe interval")
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
		var rec testkit.Log[llmretry.Attempt]
		var keys keySet
		st := &testkit.Store{Store: coordination.NewMemoryStore(), After: keys.after}
		rt, err := llmretry.NewCoordinated(base, llmretry.Policy{Waits: hostWaits, Reserve: time.Minute, Fallback: []llmretry.Route{small}, OnAttempt: rec.Add}, coordination.Config{Store: st})
		require.NoError(t, err)
		results := callMany(t, rt, start, calls, time.Second, 5*time.Minute, func(_ int, req *http.Request) {
			req.Header.Set("Authorization", "Bearer ONE")
		})
		for i, r := range results {
			require.NoError(t, r.err, "call %d: %v", i, rec.All())
		}
		mu.Lock()
		defer mu.Unlock()
		assert.Len(t, models["small"], calls, "every call answered by the other model")
		assert.LessOrEqual(t, len(models["primary"]), 1+int(calls*time.Second/(probeInterval*4/5)), "the first failure and the probes: %v", models["primary"])

		names := keys.list()
		slices.Sort(names)
		require.Len(t, names, 2, "two keys")
		assert.Equal(t, names[0]+"~route1", names[1])
		assert.True(t, load(t, st, names[0]).Down(time.Now()), "the primary's model down")
		assert.False(t, load(t, st, names[1]).Down(time.Now()), "the other's up")
	})
}

// A call on a primary whose server wait it cannot afford goes to the
// fallback at once, without a hold; one that can afford it waits it out
// on the primary, as without a fallback.
func TestCoordinatedServerWaitBeyondTheCallGoesAround(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const wait, gen = 30 * time.Second, time.Second
		primary := newFlaky(status(429, "Retry-After", "30"), gen, window{0, time.Second})
		fallback := newFlaky(status(502), gen)
		var h holds
		rt := coordinatedRoutes(t, llmretry.Policy{Waits: hostWaits}, coordination.Config{OnHold: h.Add}, primary, fallback)
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
			assert.Less(t, a, wait+releaseSpread, "released within the spread")
		}
		answered := []time.Duration{results[0].at - gen, results[2].at - gen}
		slices.Sort(answered)
		assert.Equal(t, at[1:], answered, "the primary answered them")
		assert.Equal(t, map[coordination.HoldOutcome]int{coordination.HoldReleased: 2}, h.ended(), "two holds: the call that went around was not held")
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
				primary, fallback := newFlaky(status(502), gen, window{0, first}), newFlaky(status(502), gen, window{0, later})
				if fallbackFirst {
					primary.down[0].to, fallback.down[0].to = later, first
				}
				var h holds
				rt := coordinatedRoutes(t, llmretry.Policy{Waits: hostWaits}, coordination.Config{OnHold: h.Add}, primary, fallback)
				results := callMany(t, rt, primary.start, calls, time.Second, 90*time.Second, nil)
				for i, r := range results {
					require.NoError(t, r.err, "call %d", i)
					// A probe interval, the probe's answer, the spread, its own.
					assert.Less(t, r.at, first+probeInterval+gen+releaseSpread+gen, "call %d", i)
				}
				back, down := primary, fallback
				if fallbackFirst {
					back, down = fallback, primary
				}
				assert.Len(t, during(back.arrivals(), window{first, time.Hour}), calls, "every call answered by the route back first")
				assert.Empty(t, during(down.arrivals(), window{first + probeInterval + gen, time.Hour}), "none sent to the other once they are answered")
				for _, p := range []*flaky{primary, fallback} {
					assert.Equal(t, 1, p.maxInFlight(window{time.Second, first}), "one probe at a time")
					sent := during(p.arrivals(), window{time.Second, first})
					assert.LessOrEqual(t, len(sent), 1+int(first/(probeInterval*4/5)), "probes: %v", sent)
				}
				ended := h.ended()
				assert.Equal(t, 0, ended[coordination.HoldGaveUp]+ended[coordination.HoldCanceled], "%v", ended)
			})
		})
	}
}
