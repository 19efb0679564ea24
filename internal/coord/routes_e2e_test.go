package coord_test

// Routes (routes.go) through coordinated Transports whose policy has a
// fallback: each route a key of its own, calls going around a key that
// is down, and calls held on every route going where the first comes
// back.

import (
	"errors"
	"io"
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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
// second: new calls start on the fallback and none waits; the primary
// sees one probe per probe interval for everyone; within a probe interval
// (and a call's arrival) of its recovery new calls return to it.
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
