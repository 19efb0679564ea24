package llmretry

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fallback's host in the tests: testURL's API at another base.
const (
	primaryBase  = "https://api.example.test/v1"
	fallbackBase = "https://fallback.example.test/v1"
	secondBase   = "https://second.example.test/v1"
)

// byHost sends each request to the provider of its URL's host, in memory.
type byHost map[string]*provider

func (b byHost) RoundTrip(r *http.Request) (*http.Response, error) {
	p, found := b[r.URL.Host]
	if !found {
		return nil, errors.New("no such host: " + r.URL.Host)
	}
	return p.mock.RoundTrip(r)
}

// routeTo is RouteTo from the primary's base to base, with its own key.
func routeTo(t testing.TB, base, key string) Route {
	t.Helper()
	r, err := RouteTo(primaryBase, base, http.Header{"Authorization": {"Bearer " + key}})
	require.NoError(t, err)
	return r
}

// twoRoutes returns a primary and a fallback provider, their base, and a
// policy base p with the fallback route added.
func twoRoutes(t testing.TB, p Policy, primary, fallback []step) (*provider, *provider, http.RoundTripper, Policy) {
	prim, fb := newProvider(primary...), newProvider(fallback...)
	p.Fallback = append(p.Fallback, routeTo(t, fallbackBase, "FB-KEY"))
	return prim, fb, byHost{"api.example.test": prim, "fallback.example.test": fb}, p
}

// routesOf returns the route of each recorded attempt.
func routesOf(rec *recorder) []int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var rs []int
	for _, a := range rec.attempts {
		rs = append(rs, a.Route)
	}
	return rs
}

// A failure that says the provider is down moves the next attempt to the
// fallback at once; the caller reads the fallback's own answer.
func TestFallbackWhenDown(t *testing.T) {
	for _, tc := range []struct {
		name string
		down step
	}{
		{"500", fail(500)}, {"502", fail(502)}, {"503", fail(503)}, {"529", fail(529)},
		{"a failed connection", refused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var rec recorder
				prim, fb, base, p := twoRoutes(t, Policy{OnAttempt: rec.on}, []step{tc.down}, []step{{status: 200, body: `{"model":"fb"}`}})
				rt := mustNew(t, base, p)
				start := time.Now()
				resp, err := post(t, rt, context.Background())
				require.NoError(t, err)
				assert.Equal(t, `{"model":"fb"}`, bodyOf(t, resp), "the fallback's own answer")
				assert.Zero(t, time.Since(start), "at once")
				assert.Equal(t, 1, prim.attempts())
				assert.Equal(t, 1, fb.attempts())
				assert.Equal(t, []int{0, 1}, routesOf(&rec))
				assert.Equal(t, []string{`{"model":"m"}`}, fb.bodies, "the whole body, fresh")
				assert.Equal(t, "Bearer FB-KEY", fb.reqs[0].Header.Get("Authorization"))
				assert.Equal(t, "fallback.example.test", rec.last().Request.URL.Host, "the record names the request the route sent")
			})
		})
	}
}

// An attempt that times out, and a stream that opens with an error event,
// say the provider is down too.
func TestFallbackOnTimeoutsAndFirstEvents(t *testing.T) {
	t.Run("attempt timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var rec recorder
			fb := newProvider(ok)
			silent := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.URL.Host == "fallback.example.test" {
					return fb.mock.RoundTrip(r)
				}
				<-r.Context().Done()
				return nil, r.Context().Err()
			})
			rt := mustNew(t, silent, Policy{AttemptTimeout: 10 * time.Second, OnAttempt: rec.on, Fallback: []Route{routeTo(t, fallbackBase, "FB")}})
			start := time.Now()
			resp, err := post(t, rt, context.Background())
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, 10*time.Second, time.Since(start))
			assert.Equal(t, []int{0, 1}, routesOf(&rec))
		})
	})
	t.Run("first event", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var rec recorder
			fb := newProvider(ok)
			overloaded := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.URL.Host == "fallback.example.test" {
					return fb.mock.RoundTrip(r)
				}
				return sseResponse(r, io.NopCloser(strings.NewReader(feOverloaded))), nil
			})
			rt := mustNew(t, overloaded, Policy{RetryStreams: true, OnAttempt: rec.on, Fallback: []Route{routeTo(t, fallbackBase, "FB")}})
			resp, err := rt.RoundTrip(streamRequest(t, testURL, `{"model":"m","stream":true}`))
			require.NoError(t, err)
			assert.Equal(t, `{"answer":42}`, bodyOf(t, resp))
			assert.Equal(t, []int{0, 1}, routesOf(&rec))
		})
	})
}

// A call never goes around for the request's own fault or a status that
// says the request is wrong, nor for a stream the policy does not retry:
// the fallback sees nothing.
func TestFallbackNeverForTheRequestsFault(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		stream bool
	}{
		{"400", 400, false}, {"401", 401, false}, {"404", 404, false}, {"422", 422, false},
		{"a stream the policy does not retry", 503, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prim, fb, base, p := twoRoutes(t, Policy{}, []step{fail(tc.status)}, []step{ok})
				rt := mustNew(t, base, p)
				req := streamRequest(t, testURL, `{"model":"m"}`)
				if tc.stream {
					req = streamRequest(t, testURL, `{"model":"m","stream":true}`)
				}
				resp, err := rt.RoundTrip(req)
				require.NoError(t, err)
				resp.Body.Close()
				assert.Equal(t, tc.status, resp.StatusCode)
				assert.Equal(t, 1, prim.attempts())
				assert.Zero(t, fb.attempts())
				if ex := GaveUp(resp); assert.NotNil(t, ex) {
					assert.Equal(t, []int{0}, ex.Routes)
				}
			})
		})
	}
	t.Run("a body that fails", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prim, fb, base, p := twoRoutes(t, Policy{}, []step{fail(503)}, []step{ok})
			rt := mustNew(t, base, p)
			req, err := http.NewRequest(http.MethodPost, testURL, strings.NewReader(`{"model":"m"}`))
			require.NoError(t, err)
			req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("disk on fire") }
			_, err = rt.RoundTrip(req)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrNotRetryable)
			assert.Equal(t, 1, prim.attempts())
			assert.Zero(t, fb.attempts())
		})
	})
}

// A 429 whose wait the call can afford is waited on the primary; one it
// cannot afford, or one that repeats until the retries are spent, moves
// the call.
func TestFallbackOnRateLimits(t *testing.T) {
	t.Run("an affordable wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var rec recorder
			prim, fb, base, p := twoRoutes(t, Policy{OnAttempt: rec.on}, []step{fail(429, "Retry-After", "2"), ok}, []step{ok})
			rt := mustNew(t, base, p)
			start := time.Now()
			resp, err := post(t, rt, withDeadline(t, time.Minute))
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, 2*time.Second, time.Since(start))
			assert.Equal(t, 2, prim.attempts())
			assert.Zero(t, fb.attempts())
		})
	})
	t.Run("a wait past the deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var rec recorder
			prim, fb, base, p := twoRoutes(t, Policy{OnAttempt: rec.on}, []step{fail(429, "Retry-After", "120")}, []step{ok})
			rt := mustNew(t, base, p)
			start := time.Now()
			resp, err := post(t, rt, withDeadline(t, time.Minute))
			require.NoError(t, err)
			resp.Body.Close()
			assert.Zero(t, time.Since(start))
			assert.Equal(t, 1, prim.attempts())
			assert.Equal(t, 1, fb.attempts())
		})
	})
	t.Run("retries spent", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var rec recorder
			prim, fb, base, p := twoRoutes(t, Policy{Waits: []time.Duration{time.Second, time.Second}, OnAttempt: rec.on}, []step{fail(429)}, []step{ok})
			rt := mustNew(t, base, p)
			start := time.Now()
			resp, err := post(t, rt, context.Background())
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, 2*time.Second, time.Since(start))
			assert.Equal(t, 3, prim.attempts(), "the schedule's retries on the primary")
			assert.Equal(t, 1, fb.attempts(), "then the route not taken yet")
			assert.Equal(t, []int{0, 0, 0, 1}, routesOf(&rec))
		})
	})
}

// FallbackAfter keeps a call on its primary, retried by the schedule,
// until it has passed; then the next failure moves it.
func TestFallbackAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder
		prim, fb, base, p := twoRoutes(t, Policy{Waits: []time.Duration{time.Second}, FallbackAfter: 3 * time.Second, OnAttempt: rec.on}, []step{fail(503)}, []step{ok})
		rt := mustNew(t, base, p)
		start := time.Now()
		resp, err := post(t, rt, withDeadline(t, time.Minute))
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 3*time.Second, time.Since(start))
		assert.Equal(t, 4, prim.attempts(), "at 0, 1, 2 and 3 s")
		assert.Equal(t, 1, fb.attempts())
		assert.Equal(t, []int{0, 0, 0, 0, 1}, routesOf(&rec))
	})
}

// A route that fails as if down is passed for the next; when every route
// is down the call waits as on its primary and tries again from it, and
// its record names the routes it took.
func TestFallbackRoutesInOrder(t *testing.T) {
	t.Run("passed for the next", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var rec recorder
			prim, fb, second := newProvider(fail(503)), newProvider(fail(502)), newProvider(ok)
			base := byHost{"api.example.test": prim, "fallback.example.test": fb, "second.example.test": second}
			rt := mustNew(t, base, Policy{OnAttempt: rec.on, Fallback: []Route{routeTo(t, fallbackBase, "A"), routeTo(t, secondBase, "B")}})
			resp, err := post(t, rt, context.Background())
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, []int{0, 1, 2}, routesOf(&rec))
			assert.Equal(t, "Bearer B", second.reqs[0].Header.Get("Authorization"))
		})
	})
	t.Run("all down", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var rec recorder
			prim, fb, base, p := twoRoutes(t, Policy{Waits: []time.Duration{time.Second, time.Second, time.Second}, OnAttempt: rec.on}, []step{fail(503)}, []step{fail(502)})
			rt := mustNew(t, base, p)
			start := time.Now()
			resp, err := post(t, rt, context.Background())
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, 502, resp.StatusCode, "the last attempt's")
			assert.Equal(t, []int{0, 1, 0, 1}, routesOf(&rec), "a move at once, a wait, the primary again, a move")
			assert.Equal(t, time.Second, time.Since(start))
			assert.Equal(t, 2, prim.attempts())
			assert.Equal(t, 2, fb.attempts())
			ex := GaveUp(resp)
			require.NotNil(t, ex)
			assert.Equal(t, []int{0, 1}, ex.Routes)
			assert.ErrorIs(t, ex.Reason, ErrRetriesSpent)
			assert.Contains(t, ex.Error(), "on routes 0 (primary), 1, the last: 502")
		})
	})
}

// A move is never made past the call's limits: with no time left before
// the deadline minus its reserve, the call stops on the primary's result.
func TestFallbackKeepsTheCallsLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := newProvider(ok)
		var prim int
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Host == "fallback.example.test" {
				return slow.mock.RoundTrip(r)
			}
			prim++
			time.Sleep(50 * time.Second) // past the deadline minus the reserve (60 s − 12 s)
			return &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: http.Header{}, Body: io.NopCloser(strings.NewReader("down")), Request: r}, nil
		})
		rt := mustNew(t, base, Policy{Fallback: []Route{routeTo(t, fallbackBase, "FB")}})
		resp, err := post(t, rt, withDeadline(t, time.Minute))
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 503, resp.StatusCode)
		assert.Equal(t, 1, prim)
		assert.Zero(t, slow.attempts())
		ex := GaveUp(resp)
		require.NotNil(t, ex)
		assert.ErrorIs(t, ex.Reason, ErrNoTimeLeft)
	})
}

// A Route that fails passes its route over, for the rest of the call: the
// call stays on its primary, and its error says why the route was not
// taken.
func TestFallbackRouteThatFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls int
		broken := Route(func(*http.Request) (*http.Request, error) {
			calls++
			return nil, errors.New("no deployment")
		})
		prim := newProvider(refused)
		rt := mustNew(t, prim.mock, Policy{Waits: []time.Duration{time.Second}, Fallback: []Route{broken}})
		_, err := post(t, rt, context.Background())
		require.Error(t, err)
		assert.Equal(t, 1, calls, "asked once")
		assert.Equal(t, 2, prim.attempts(), "the primary, by its schedule")
		assert.ErrorContains(t, err, "route 1: no deployment")
		var ex *Exhausted
		require.ErrorAs(t, err, &ex)
		assert.Equal(t, []int{0}, ex.Routes)
	})
}

// A SigV4-signed request is not routed by RouteTo (its signature binds the
// host): the call stays on its primary.
func TestFallbackRefusesSigV4(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prim, fb, base, p := twoRoutes(t, Policy{Waits: []time.Duration{time.Second}}, []step{fail(503)}, []step{ok})
		rt := mustNew(t, base, p)
		req, err := http.NewRequest(http.MethodPost, testURL, strings.NewReader(`{}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261201/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc")
		req.Header.Set("X-Amz-Date", time.Now().UTC().Format("20060102T150405Z"))
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 2, prim.attempts())
		assert.Zero(t, fb.attempts())
		ex := GaveUp(resp)
		require.NotNil(t, ex)
		assert.ErrorIs(t, ex.Err, ErrNotRouted)
	})
}

// The record names each attempt's route: Attempt.String and LogAttempts.
func TestFallbackRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		var rec recorder
		log := LogAttempts(slog.New(slog.NewTextHandler(&buf, nil)))
		_, _, base, p := twoRoutes(t, Policy{OnAttempt: func(a Attempt) { rec.on(a); log(a) }}, []step{fail(503)}, []step{ok})
		rt := mustNew(t, base, p)
		resp, err := post(t, rt, context.Background())
		require.NoError(t, err)
		resp.Body.Close()
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		require.Len(t, lines, 2)
		assert.NotContains(t, lines[0], "route=")
		assert.Contains(t, lines[1], "route=1")
		assert.Contains(t, lines[1], "url=https://fallback.example.test/v1/chat/completions")
		assert.Contains(t, rec.last().String(), "[route 1]")
		assert.NotContains(t, buf.String(), "FB-KEY")
	})
}

// A policy whose Fallback holds a nil Route is refused, as is a negative
// FallbackAfter.
func TestFallbackPolicyValidate(t *testing.T) {
	err := Policy{Fallback: []Route{nil}, FallbackAfter: -time.Second}.Validate()
	assert.ErrorContains(t, err, "Policy.Fallback[0] is nil")
	assert.ErrorContains(t, err, "Policy.FallbackAfter is negative")
}

// A fallback's request that fails before any provider answers, for its own
// fault (a Route that changed the body and not ContentLength, say), passes
// the route over: the call goes on with its primary, and its record says
// why the route was not asked.
func TestFallbackRouteRequestFault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder
		prim := newProvider(fail(503), fail(503), ok)
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Host == "fallback.example.test" {
				return nil, errors.New("http: ContentLength=13 with Body length 20")
			}
			return prim.mock.RoundTrip(r)
		})
		rt := mustNew(t, base, Policy{Waits: []time.Duration{time.Second, time.Second, time.Second}, OnAttempt: rec.on, Fallback: []Route{routeTo(t, fallbackBase, "FB")}})
		resp, err := post(t, rt, context.Background())
		require.NoError(t, err)
		assert.Equal(t, `{"answer":42}`, bodyOf(t, resp))
		assert.Equal(t, []int{0, 1, 0, 0}, routesOf(&rec), "the primary, the route refused, then the primary by its schedule, whose retries the refused route did not spend")
		assert.Equal(t, 3, prim.attempts())

		// Its record, when the call gives up: the primary's own failure,
		// with the route's.
		prim = newProvider(fail(503))
		resp, err = post(t, rt, context.Background())
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 503, resp.StatusCode)
		ex := GaveUp(resp)
		require.NotNil(t, ex)
		assert.ErrorContains(t, ex.Err, "route 1: its request failed before any answer")
		assert.Contains(t, ex.Error(), "503 Service Unavailable (")
	})
}

// A RouteTo route that does not apply to a request's URL (a policy shared
// by two APIs) is passed over silently: the call takes the next route, and
// its record carries no error for it.
func TestFallbackRouteThatDoesNotApply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder
		other, err := RouteTo("https://api.other.test/v1", fallbackBase, nil)
		require.NoError(t, err)
		prim, second := newProvider(fail(503)), newProvider(fail(502))
		base := byHost{"api.example.test": prim, "second.example.test": second}
		rt := mustNew(t, base, Policy{Waits: []time.Duration{time.Second}, OnAttempt: rec.on, Fallback: []Route{other, routeTo(t, secondBase, "B")}})
		resp, err := post(t, rt, context.Background())
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, []int{0, 2}, routesOf(&rec))
		ex := GaveUp(resp)
		require.NotNil(t, ex)
		assert.NotErrorIs(t, ex.Err, ErrNotRouted)
		assert.Equal(t, []int{0, 2}, ex.Routes)
	})
}
