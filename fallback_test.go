package llmretry

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fallback's host in the tests: testURL's API at another base.
const (
	primaryBase  = "https://api.example.test/v1"
	fallbackBase = "https://fallback.example.test/v1"
	secondBase   = "https://second.example.test/v1"
)

// routeTo is RouteTo from the primary's base to base, with its own key.
func routeTo(t testing.TB, base, key string) Route {
	t.Helper()
	r, err := RouteTo(primaryBase, base, http.Header{"Authorization": {"Bearer " + key}})
	require.NoError(t, err)
	return r
}

// twoRoutes returns a primary and a fallback provider, their base, and a
// policy base p with the fallback route added.
func twoRoutes(t testing.TB, p Policy, primary, fallback []testkit.Reply) (*testkit.Provider, *testkit.Provider, http.RoundTripper, Policy) {
	prim, fb := testkit.NewProvider(primary...), testkit.NewProvider(fallback...)
	p.Fallback = append(p.Fallback, routeTo(t, fallbackBase, "FB-KEY"))
	return prim, fb, testkit.Hosts{"api.example.test": prim, "fallback.example.test": fb}, p
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

// downReplies are the failures that say a provider is down.
var downReplies = []struct {
	name string
	down testkit.Reply
}{
	{"500", testkit.Fail(500)}, {"502", testkit.Fail(502)}, {"503", testkit.Fail(503)}, {"529", testkit.Fail(529)},
	{"a failed connection", testkit.Refused()},
}

// One failure that says the provider is down is a blip: the call stays
// on its primary, retried after its wait, and the fallback sees nothing.
func TestFallbackBlipStaysHome(t *testing.T) {
	for _, tc := range downReplies {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var rec recorder
				prim, fb, base, p := twoRoutes(t, Policy{Waits: []time.Duration{time.Second}, OnAttempt: rec.on}, []testkit.Reply{tc.down, testkit.OK()}, []testkit.Reply{testkit.OK()})
				resp, err := post(t, mustNew(t, base, p), context.Background())
				require.NoError(t, err)
				assert.Equal(t, `{"answer":42}`, bodyOf(t, resp))
				assert.Equal(t, 2, prim.Attempts())
				assert.Equal(t, []time.Duration{time.Second}, prim.Gaps(), "after the schedule's wait")
				assert.Zero(t, fb.Attempts())
				assert.Equal(t, []int{0, 0}, routesOf(&rec))
				assert.Empty(t, rec.attempts[0].Moved)
			})
		})
	}
}

// A second failure in a row that says the provider is down moves the next
// attempt to the fallback at once; the caller reads the fallback's own
// answer.
func TestFallbackWhenDown(t *testing.T) {
	for _, tc := range downReplies {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var rec recorder
				prim, fb, base, p := twoRoutes(t, Policy{Waits: []time.Duration{time.Second, time.Second}, OnAttempt: rec.on}, []testkit.Reply{tc.down}, []testkit.Reply{{Status: 200, Body: `{"model":"fb"}`}})
				rt := mustNew(t, base, p)
				start := time.Now()
				resp, err := post(t, rt, context.Background())
				require.NoError(t, err)
				assert.Equal(t, `{"model":"fb"}`, bodyOf(t, resp), "the fallback's own answer")
				assert.Equal(t, time.Second, time.Since(start), "the blip's wait, then at once")
				assert.Equal(t, 2, prim.Attempts())
				assert.Equal(t, 1, fb.Attempts())
				assert.Equal(t, []int{0, 0, 1}, routesOf(&rec))
				assert.Equal(t, "provider down", rec.attempts[1].Moved)
				assert.Equal(t, []string{`{"model":"m"}`}, fb.Bodies(), "the whole body, fresh")
				assert.Equal(t, "Bearer FB-KEY", fb.Received()[0].Header.Get("Authorization"))
				assert.Equal(t, "fallback.example.test", rec.last().Request.URL.Host, "the record names the request the route sent")
			})
		})
	}
}

// An attempt that times out says waiting cannot win: the call moves at
// once. A stream that opens with an error event is a down failure like a
// 529: a blip first.
func TestFallbackOnTimeoutsAndFirstEvents(t *testing.T) {
	t.Run("attempt timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var rec recorder
			fb := testkit.NewProvider(testkit.OK())
			silent := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.URL.Host == "fallback.example.test" {
					return fb.RoundTrip(r)
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
			assert.Equal(t, "waiting cannot win", rec.attempts[0].Moved)
		})
	})
	t.Run("first event", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var rec recorder
			fb := testkit.NewProvider(testkit.OK())
			overloaded := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.URL.Host == "fallback.example.test" {
					return fb.RoundTrip(r)
				}
				return sseResponse(r, io.NopCloser(strings.NewReader(feOverloaded))), nil
			})
			rt := mustNew(t, overloaded, Policy{RetryStreams: true, Waits: []time.Duration{time.Second}, OnAttempt: rec.on, Fallback: []Route{routeTo(t, fallbackBase, "FB")}})
			resp, err := rt.RoundTrip(testkit.StainlessPost(t, testURL, `{"model":"m","stream":true}`))
			require.NoError(t, err)
			assert.Equal(t, `{"answer":42}`, bodyOf(t, resp))
			assert.Equal(t, []int{0, 0, 1}, routesOf(&rec))
		})
	})
	t.Run("x-should-retry: false", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var rec recorder
			prim, fb, base, p := twoRoutes(t, Policy{OnAttempt: rec.on}, []testkit.Reply{testkit.Fail(503, "X-Should-Retry", "false")}, []testkit.Reply{testkit.OK()})
			resp, err := post(t, mustNew(t, base, p), context.Background())
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, 1, prim.Attempts(), "waiting will not help: at once")
			assert.Equal(t, 1, fb.Attempts())
			assert.Equal(t, "waiting cannot win", rec.attempts[0].Moved)
		})
	})
}

// A call never goes around for the request's own fault or a status that
// says the request is wrong, nor for a stream the policy does not retry:
// the fallback sees nothing.
func TestFallbackNeverForTheRequestsFault(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reply  testkit.Reply
		stream bool
	}{
		{"400", testkit.Fail(400), false}, {"404", testkit.Fail(404), false}, {"422", testkit.Fail(422), false},
		{"a 403 for a region", testkit.Reply{Status: 403, Header: http.Header{"Content-Type": {"application/json"}}, Body: `{"error":{"code":"unsupported_country_region_territory","message":"Country, region, or territory not supported"}}`}, false},
		{"a stream the policy does not retry", testkit.Fail(503), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prim, fb, base, p := twoRoutes(t, Policy{}, []testkit.Reply{tc.reply}, []testkit.Reply{testkit.OK()})
				rt := mustNew(t, base, p)
				req := testkit.StainlessPost(t, testURL, `{"model":"m"}`)
				if tc.stream {
					req = testkit.StainlessPost(t, testURL, `{"model":"m","stream":true}`)
				}
				resp, err := rt.RoundTrip(req)
				require.NoError(t, err)
				resp.Body.Close()
				assert.Equal(t, tc.reply.Status, resp.StatusCode)
				assert.Equal(t, 1, prim.Attempts())
				assert.Zero(t, fb.Attempts())
				if ex := GaveUp(resp); assert.NotNil(t, ex) {
					assert.Equal(t, []int{0}, ex.Routes)
				}
			})
		})
	}
	t.Run("a body that fails", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prim, fb, base, p := twoRoutes(t, Policy{}, []testkit.Reply{testkit.Fail(503)}, []testkit.Reply{testkit.OK()})
			rt := mustNew(t, base, p)
			req, err := http.NewRequest(http.MethodPost, testURL, strings.NewReader(`{"model":"m"}`))
			require.NoError(t, err)
			req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("disk on fire") }
			_, err = rt.RoundTrip(req)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrNotRetryable)
			assert.Equal(t, 1, prim.Attempts())
			assert.Zero(t, fb.Attempts())
		})
	})
}

// A 401 or 403 that refuses the primary's credential moves the call to
// the next route that sets a credential of its own, at once, and the
// primary is not sent it again; a route that sets none is passed over.
func TestFallbackKeyRefused(t *testing.T) {
	js := http.Header{"Content-Type": {"application/json"}}
	for _, tc := range []struct {
		name    string
		refusal testkit.Reply
	}{
		{"401", testkit.OpenAIError(401, "Incorrect API key provided: sk-proj-****abcd.", "invalid_request_error", "", "invalid_api_key")},
		{"403 permission", testkit.Reply{Status: 403, Header: js, Body: `{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var rec recorder
				keyless := Route(func(r *http.Request) (*http.Request, error) {
					r.URL.Host = "keyless.example.test"
					return r, nil
				})
				prim, second := testkit.NewProvider(tc.refusal), testkit.NewProvider(testkit.OK())
				base := testkit.Hosts{"api.example.test": prim, "second.example.test": second}
				rt := mustNew(t, base, Policy{Waits: []time.Duration{time.Second}, OnAttempt: rec.on, Fallback: []Route{keyless, routeTo(t, secondBase, "KEY-B")}})
				start := time.Now()
				resp, err := post(t, rt, context.Background())
				require.NoError(t, err)
				assert.Equal(t, `{"answer":42}`, bodyOf(t, resp))
				assert.Zero(t, time.Since(start), "at once")
				assert.Equal(t, 1, prim.Attempts(), "the primary's key is not sent again")
				assert.Equal(t, "Bearer KEY-B", second.Received()[0].Header.Get("Authorization"))
				assert.Equal(t, []int{0, 2}, routesOf(&rec), "the route that sets no credential is passed over")
				assert.Equal(t, "credential refused", rec.attempts[0].Moved)
			})
		})
	}
	t.Run("no route with a credential of its own", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			keyless := Route(func(r *http.Request) (*http.Request, error) { return r, nil })
			prim := testkit.NewProvider(testkit.Fail(401))
			rt := mustNew(t, prim, Policy{Fallback: []Route{keyless}})
			resp, err := post(t, rt, context.Background())
			ex := gaveUp(t, resp, err)
			assert.Equal(t, 401, resp.StatusCode, "returned at once")
			assert.Equal(t, 1, prim.Attempts())
			assert.ErrorIs(t, ex.Reason, ErrNotRetryable)
		})
	})
	t.Run("without a fallback, nothing is read", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prim := testkit.NewProvider(testkit.Fail(401))
			resp, err := post(t, mustNew(t, prim, Policy{}), context.Background())
			require.NoError(t, err)
			assert.Equal(t, "error 401", bodyOf(t, resp))
			assert.Equal(t, 1, prim.Attempts())
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
			prim, fb, base, p := twoRoutes(t, Policy{OnAttempt: rec.on}, []testkit.Reply{testkit.Fail(429, "Retry-After", "2"), testkit.OK()}, []testkit.Reply{testkit.OK()})
			rt := mustNew(t, base, p)
			start := time.Now()
			resp, err := post(t, rt, withDeadline(t, time.Minute))
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, 2*time.Second, time.Since(start))
			assert.Equal(t, 2, prim.Attempts())
			assert.Zero(t, fb.Attempts())
		})
	})
	t.Run("a wait past the deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var rec recorder
			prim, fb, base, p := twoRoutes(t, Policy{OnAttempt: rec.on}, []testkit.Reply{testkit.Fail(429, "Retry-After", "120")}, []testkit.Reply{testkit.OK()})
			rt := mustNew(t, base, p)
			start := time.Now()
			resp, err := post(t, rt, withDeadline(t, time.Minute))
			require.NoError(t, err)
			resp.Body.Close()
			assert.Zero(t, time.Since(start))
			assert.Equal(t, 1, prim.Attempts())
			assert.Equal(t, 1, fb.Attempts())
		})
	})
	t.Run("retries spent", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var rec recorder
			prim, fb, base, p := twoRoutes(t, Policy{Waits: []time.Duration{time.Second, time.Second}, OnAttempt: rec.on}, []testkit.Reply{testkit.Fail(429)}, []testkit.Reply{testkit.OK()})
			rt := mustNew(t, base, p)
			start := time.Now()
			resp, err := post(t, rt, context.Background())
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, 2*time.Second, time.Since(start))
			assert.Equal(t, 3, prim.Attempts(), "the schedule's retries on the primary")
			assert.Equal(t, 1, fb.Attempts(), "then the route not taken yet")
			assert.Equal(t, []int{0, 0, 0, 1}, routesOf(&rec))
		})
	})
}

// FallbackAfter keeps a call on its primary, retried by the schedule,
// until it has passed; then the next failure moves it.
func TestFallbackAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder
		prim, fb, base, p := twoRoutes(t, Policy{Waits: []time.Duration{time.Second}, FallbackAfter: 3 * time.Second, OnAttempt: rec.on}, []testkit.Reply{testkit.Fail(503)}, []testkit.Reply{testkit.OK()})
		rt := mustNew(t, base, p)
		start := time.Now()
		resp, err := post(t, rt, withDeadline(t, time.Minute))
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 3*time.Second, time.Since(start))
		assert.Equal(t, 4, prim.Attempts(), "at 0, 1, 2 and 3 s")
		assert.Equal(t, 1, fb.Attempts())
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
			prim, fb, second := testkit.NewProvider(testkit.Fail(503)), testkit.NewProvider(testkit.Fail(502)), testkit.NewProvider(testkit.OK())
			base := testkit.Hosts{"api.example.test": prim, "fallback.example.test": fb, "second.example.test": second}
			rt := mustNew(t, base, Policy{Waits: []time.Duration{time.Second, time.Second}, OnAttempt: rec.on, Fallback: []Route{routeTo(t, fallbackBase, "A"), routeTo(t, secondBase, "B")}})
			resp, err := post(t, rt, context.Background())
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, []int{0, 0, 1, 2}, routesOf(&rec), "the primary's blip, then at once from route to route")
			assert.Equal(t, "Bearer B", second.Received()[0].Header.Get("Authorization"))
		})
	})
	t.Run("all down", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var rec recorder
			prim, fb, base, p := twoRoutes(t, Policy{Waits: []time.Duration{time.Second, time.Second, time.Second}, OnAttempt: rec.on}, []testkit.Reply{testkit.Fail(503)}, []testkit.Reply{testkit.Fail(502)})
			rt := mustNew(t, base, p)
			start := time.Now()
			resp, err := post(t, rt, context.Background())
			ex := gaveUp(t, resp, err)
			assert.Equal(t, 503, resp.StatusCode, "the last attempt's")
			assert.Equal(t, []int{0, 0, 1, 0}, routesOf(&rec), "the blip's wait, a move at once, a wait, the primary again")
			assert.Equal(t, 2*time.Second, time.Since(start))
			assert.Equal(t, 3, prim.Attempts())
			assert.Equal(t, 1, fb.Attempts())
			assert.Equal(t, []int{0, 1}, ex.Routes)
			assert.ErrorIs(t, ex.Reason, ErrRetriesSpent)
			assert.Contains(t, ex.Error(), "on routes 0 (primary), 1, the last: 503")
		})
	})
}

// A move is never made past the call's limits: with no time left before
// the deadline minus its reserve, the call stops on the primary's result.
func TestFallbackKeepsTheCallsLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := testkit.NewProvider(testkit.OK())
		var prim int
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Host == "fallback.example.test" {
				return slow.RoundTrip(r)
			}
			prim++
			time.Sleep(50 * time.Second) // past the deadline minus the reserve (60 s − 12 s)
			return &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: http.Header{}, Body: io.NopCloser(strings.NewReader("down")), Request: r}, nil
		})
		rt := mustNew(t, base, Policy{Fallback: []Route{routeTo(t, fallbackBase, "FB")}})
		resp, err := post(t, rt, withDeadline(t, time.Minute))
		ex := gaveUp(t, resp, err)
		assert.Equal(t, 503, resp.StatusCode)
		assert.Equal(t, 1, prim)
		assert.Zero(t, slow.Attempts())
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
		prim := testkit.NewProvider(testkit.Refused())
		rt := mustNew(t, prim, Policy{Waits: []time.Duration{time.Second}, Fallback: []Route{broken}})
		_, err := post(t, rt, context.Background())
		require.Error(t, err)
		assert.Equal(t, 1, calls, "asked once")
		assert.Equal(t, 2, prim.Attempts(), "the primary, by its schedule")
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
		prim, fb, base, p := twoRoutes(t, Policy{Waits: []time.Duration{time.Second}}, []testkit.Reply{testkit.Fail(503)}, []testkit.Reply{testkit.OK()})
		rt := mustNew(t, base, p)
		req, err := http.NewRequest(http.MethodPost, testURL, strings.NewReader(`{}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261201/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc")
		req.Header.Set("X-Amz-Date", time.Now().UTC().Format("20060102T150405Z"))
		resp, err := rt.RoundTrip(req)
		ex := gaveUp(t, resp, err)
		assert.Equal(t, 2, prim.Attempts())
		assert.Zero(t, fb.Attempts())
		assert.ErrorIs(t, ex.Err, ErrNotRouted)
	})
}

// The record names each attempt's route: Attempt.String and LogAttempts.
func TestFallbackRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		var rec recorder
		log := LogAttempts(slog.New(slog.NewTextHandler(&buf, nil)))
		_, _, base, p := twoRoutes(t, Policy{Waits: []time.Duration{time.Second, time.Second}, OnAttempt: func(a Attempt) { rec.on(a); log(a) }}, []testkit.Reply{testkit.Fail(503)}, []testkit.Reply{testkit.OK()})
		rt := mustNew(t, base, p)
		resp, err := post(t, rt, context.Background())
		require.NoError(t, err)
		resp.Body.Close()
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		require.Len(t, lines, 3)
		assert.NotContains(t, lines[0], "route=")
		assert.NotContains(t, lines[0], "moved=", "a blip stays home")
		assert.Contains(t, lines[1], `moved="provider down"`)
		assert.Contains(t, lines[2], "route=1")
		assert.Contains(t, lines[2], "url=https://fallback.example.test/v1/chat/completions")
		assert.Contains(t, rec.attempts[1].String(), "(moved: provider down)")
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
		prim := testkit.NewProvider(testkit.Fail(503), testkit.Fail(503), testkit.OK())
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Host == "fallback.example.test" {
				return nil, errors.New("http: ContentLength=13 with Body length 20")
			}
			return prim.RoundTrip(r)
		})
		rt := mustNew(t, base, Policy{Waits: []time.Duration{time.Second, time.Second, time.Second}, OnAttempt: rec.on, Fallback: []Route{routeTo(t, fallbackBase, "FB")}})
		resp, err := post(t, rt, context.Background())
		require.NoError(t, err)
		assert.Equal(t, `{"answer":42}`, bodyOf(t, resp))
		assert.Equal(t, []int{0, 0, 1, 0}, routesOf(&rec), "the primary's blip, the primary, the route refused, then the primary by its schedule, whose retries the refused route did not spend")
		assert.Equal(t, 3, prim.Attempts())

		// Its record, when the call gives up: the primary's own failure,
		// with the route's.
		prim = testkit.NewProvider(testkit.Fail(503))
		resp, err = post(t, rt, context.Background())
		ex := gaveUp(t, resp, err)
		assert.Equal(t, 503, resp.StatusCode)
		assert.ErrorContains(t, ex.Err, "route 1: its request failed before any answer")
		assert.Contains(t, ex.Error(), "503 Service Unavailable (")
	})
}

// A RouteTo route that does not apply to a request's URL (a policy shared
// by two APIs) is passed over silently, and is no move: the call takes
// the next route that applies, or, with none, waits its schedule's wait as
// if the route were not there; its record carries no error for it.
func TestFallbackRouteThatDoesNotApply(t *testing.T) {
	other, err := RouteTo("https://api.other.test/v1", fallbackBase, http.Header{"Api-Key": {"OTHER"}})
	require.NoError(t, err)
	t.Run("the next route that applies", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var rec recorder
			prim, second := testkit.NewProvider(testkit.Fail(503)), testkit.NewProvider(testkit.OK())
			base := testkit.Hosts{"api.example.test": prim, "second.example.test": second}
			rt := mustNew(t, base, Policy{Waits: []time.Duration{time.Second, time.Second}, OnAttempt: rec.on, Fallback: []Route{other, routeTo(t, secondBase, "B")}})
			resp, err := post(t, rt, context.Background())
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, []int{0, 0, 2}, routesOf(&rec))
			assert.Equal(t, 1, second.Attempts())
		})
	})
	t.Run("none applies: no move", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var rec recorder
			prim := testkit.NewProvider(testkit.Fail(503), testkit.Fail(503), testkit.OK())
			rt := mustNew(t, prim, Policy{Waits: []time.Duration{time.Second, time.Second}, OnAttempt: rec.on, Fallback: []Route{other}})
			resp, err := post(t, rt, context.Background())
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, 200, resp.StatusCode)
			assert.Equal(t, []time.Duration{time.Second, time.Second}, prim.Gaps(), "each retry after its wait: the route that does not apply took no wait's place")
			assert.Equal(t, []int{0, 0, 0}, routesOf(&rec))
			for _, a := range rec.attempts {
				assert.Empty(t, a.Moved)
			}
		})
	})
	t.Run("its record", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prim := testkit.NewProvider(testkit.Fail(503))
			rt := mustNew(t, prim, Policy{Waits: []time.Duration{time.Second, time.Second}, Fallback: []Route{other}})
			resp, err := post(t, rt, context.Background())
			ex := gaveUp(t, resp, err)
			assert.NotErrorIs(t, ex.Err, ErrNotRouted)
			assert.Equal(t, []int{0}, ex.Routes)
		})
	})
}

// A request its provider refuses as longer than the model's window moves
// at once to the LongContext routes, and never goes back to the primary
// or a Fallback route; any other 400 never moves; without LongContext the
// refusal is returned at once.
func TestLongContext(t *testing.T) {
	tooLong := testkit.OpenAIError(400, "This model's maximum context length is 8192 tokens. However, your messages resulted in 9631 tokens. Please reduce the length of the messages.", "invalid_request_error", "messages", "context_length_exceeded")
	long := func(t testing.TB) Route {
		r, err := RouteTo(primaryBase, "https://long.example.test/v1", http.Header{"Authorization": {"Bearer LONG"}})
		require.NoError(t, err)
		return r
	}
	t.Run("moves at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var rec recorder
			prim, fb, lc := testkit.NewProvider(tooLong), testkit.NewProvider(testkit.OK()), testkit.NewProvider(testkit.Reply{Status: 200, Body: `{"model":"long"}`})
			base := testkit.Hosts{"api.example.test": prim, "fallback.example.test": fb, "long.example.test": lc}
			rt := mustNew(t, base, Policy{OnAttempt: rec.on, Fallback: []Route{routeTo(t, fallbackBase, "FB")}, LongContext: []Route{long(t)}})
			start := time.Now()
			resp, err := post(t, rt, context.Background())
			require.NoError(t, err)
			assert.Equal(t, `{"model":"long"}`, bodyOf(t, resp))
			assert.Zero(t, time.Since(start))
			assert.Equal(t, 1, prim.Attempts(), "never resent to the primary")
			assert.Zero(t, fb.Attempts(), "nor to a Fallback route")
			assert.Equal(t, []int{0, 2}, routesOf(&rec), "LongContext[0] is route len(Fallback)+1")
			assert.Equal(t, "context too long", rec.attempts[0].Moved)
			assert.Equal(t, "Bearer LONG", lc.Received()[0].Header.Get("Authorization"))
		})
	})
	t.Run("a long-context route that is down is retried, never the primary", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var rec recorder
			prim, lc := testkit.NewProvider(tooLong), testkit.NewProvider(testkit.Fail(503), testkit.Fail(503), testkit.OK())
			base := testkit.Hosts{"api.example.test": prim, "long.example.test": lc}
			rt := mustNew(t, base, Policy{Waits: []time.Duration{time.Second, time.Second, time.Second}, OnAttempt: rec.on, LongContext: []Route{long(t)}})
			resp, err := post(t, rt, context.Background())
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, 200, resp.StatusCode)
			assert.Equal(t, 1, prim.Attempts())
			assert.Equal(t, []int{0, 1, 1, 1}, routesOf(&rec))
			assert.Equal(t, []time.Duration{time.Second, time.Second}, lc.Gaps(), "by the schedule")
		})
	})
	t.Run("without LongContext", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prim, fb, base, p := twoRoutes(t, Policy{}, []testkit.Reply{tooLong}, []testkit.Reply{testkit.OK()})
			resp, err := post(t, mustNew(t, base, p), context.Background())
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, 400, resp.StatusCode, "returned at once")
			assert.Equal(t, 1, prim.Attempts())
			assert.Zero(t, fb.Attempts())
		})
	})
	t.Run("another 400 never moves", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			bad := testkit.OpenAIError(400, "Your request was rejected as a result of our safety system.", "invalid_request_error", "", "content_policy_violation")
			prim, lc := testkit.NewProvider(bad), testkit.NewProvider(testkit.OK())
			base := testkit.Hosts{"api.example.test": prim, "long.example.test": lc}
			resp, err := post(t, mustNew(t, base, Policy{LongContext: []Route{long(t)}}), context.Background())
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, 400, resp.StatusCode)
			assert.Equal(t, 1, prim.Attempts())
			assert.Zero(t, lc.Attempts())
		})
	})
	t.Run("a down primary does not go to a long-context route", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prim, lc := testkit.NewProvider(testkit.Fail(503), testkit.Fail(503), testkit.OK()), testkit.NewProvider(testkit.OK())
			base := testkit.Hosts{"api.example.test": prim, "long.example.test": lc}
			resp, err := post(t, mustNew(t, base, Policy{Waits: []time.Duration{time.Second, time.Second}, LongContext: []Route{long(t)}}), context.Background())
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, 3, prim.Attempts())
			assert.Zero(t, lc.Attempts())
		})
	})
	t.Run("the next long-context route when the first is too short too", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var rec recorder
			longer, err := RouteTo(primaryBase, "https://longer.example.test/v1", http.Header{"Authorization": {"Bearer LONGER"}})
			require.NoError(t, err)
			prim, lc, lc2 := testkit.NewProvider(tooLong), testkit.NewProvider(tooLong), testkit.NewProvider(testkit.OK())
			base := testkit.Hosts{"api.example.test": prim, "long.example.test": lc, "longer.example.test": lc2}
			resp, err := post(t, mustNew(t, base, Policy{OnAttempt: rec.on, LongContext: []Route{long(t), longer}}), context.Background())
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, 200, resp.StatusCode)
			assert.Equal(t, []int{0, 1, 2}, routesOf(&rec))
		})
	})
	t.Run("a stream the policy does not retry", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prim, lc := testkit.NewProvider(tooLong), testkit.NewProvider(testkit.OK())
			base := testkit.Hosts{"api.example.test": prim, "long.example.test": lc}
			resp, err := mustNew(t, base, Policy{LongContext: []Route{long(t)}}).RoundTrip(testkit.StainlessPost(t, testURL, `{"model":"m","stream":true}`))
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, 400, resp.StatusCode)
			assert.Zero(t, lc.Attempts())
		})
	})
	t.Run("Validate", func(t *testing.T) {
		assert.ErrorContains(t, Policy{LongContext: []Route{nil}}.Validate(), "Policy.LongContext[0] is nil")
	})
}

// streamsByHost sends each request to the streams of its URL's host.
type streamsByHost map[string]*streams

func (h streamsByHost) RoundTrip(r *http.Request) (*http.Response, error) {
	return h[r.URL.Host].RoundTrip(r)
}

// A continuation is an attempt of the call that committed the stream: it
// keeps what the call learnt of its routes. After a prompt too long for
// the primary the continuation stays on the LongContext route; after the
// primary's credential was refused it never goes back to the primary,
// however its first try on the fallback fails.
func TestFallbackContinuationKeepsTheRoutesLeftBehind(t *testing.T) {
	const prompt = `{"model":"m","messages":[{"role":"user","content":"Say hello"}],"stream":true}`
	t.Run("too long for the primary", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tooLong := `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9631 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
			base := streamsByHost{
				"api.example.test": {replies: []func(*http.Request) *http.Response{status(400, tooLong)}},
				"long.example.test": {replies: []func(*http.Request) *http.Response{
					stream(chatStream("c1", false, "Hello", " wor"), syscall.ECONNRESET),
					stream(chatStream("c2", true, "ld!"), nil),
				}},
			}
			var rec recorder
			p := Policy{RetryStreams: true, ContinueStreams: true, LongContext: []Route{routeTo(t, "https://long.example.test/v1", "LONG")}, OnAttempt: rec.on}
			resp, err := mustNew(t, base, p).RoundTrip(testkit.StainlessPost(t, testURL, prompt))
			require.NoError(t, err)
			got, err := readAll(resp)
			require.NoError(t, err)
			assert.Contains(t, got, "ld!")
			assert.Equal(t, 1, len(base["api.example.test"].sent()), "the too-long request is never sent to the primary again")
			assert.Equal(t, []int{0, 1, 1}, routesOf(&rec), "the continuation goes to the route the stream came from")
		})
	})
	t.Run("a refused credential", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			refused := `{"error":{"message":"Incorrect API key provided: sk-proj-****abcd.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`
			base := streamsByHost{
				"api.example.test": {replies: []func(*http.Request) *http.Response{status(401, refused), stream(chatStream("c9", true, "from the primary"), nil)}},
				"fallback.example.test": {replies: []func(*http.Request) *http.Response{
					stream(chatStream("c1", false, "Hello", " wor"), syscall.ECONNRESET),
					status(503, `{"error":{"message":"down"}}`),
					stream(chatStream("c2", true, "ld!"), nil),
				}},
			}
			var rec recorder
			p := Policy{RetryStreams: true, ContinueStreams: true, Waits: []time.Duration{time.Second, time.Second, time.Second},
				Fallback: []Route{routeTo(t, fallbackBase, "FB-KEY")}, OnAttempt: rec.on}
			req := testkit.StainlessPost(t, testURL, prompt)
			req.Header.Set("Authorization", "Bearer PRIMARY-KEY")
			resp, err := mustNew(t, base, p).RoundTrip(req)
			require.NoError(t, err)
			got, err := readAll(resp)
			require.NoError(t, err)
			assert.Contains(t, got, "ld!")
			assert.Equal(t, 1, len(base["api.example.test"].sent()), "the refused credential is never sent again")
			assert.Equal(t, []int{0, 1, 1, 1}, routesOf(&rec))
		})
	})
}

// Once FallbackAfter has passed on the primary, any retryable failure
// moves the call, not only a down failure or a 429: a 408 or a 425 too.
func TestFallbackAfterMovesAnyRetryableFailure(t *testing.T) {
	for _, status := range []int{408, 425} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prim, fb, base, p := twoRoutes(t, Policy{Waits: []time.Duration{time.Second}, FallbackAfter: 3 * time.Second}, []testkit.Reply{testkit.Fail(status)}, []testkit.Reply{testkit.OK()})
				resp, err := post(t, mustNew(t, base, p), withDeadline(t, 20*time.Second))
				require.NoError(t, err)
				resp.Body.Close()
				assert.Equal(t, 200, resp.StatusCode)
				assert.Equal(t, 4, prim.Attempts(), "at 0, 1, 2 and 3 s; then FallbackAfter has passed")
				assert.Equal(t, 1, fb.Attempts())
			})
		})
	}
}

// The blip rule counts down failures in a row: 503, 429, 503 are two
// blips, each retried on the primary, not a move.
func TestFallbackBlipsInARow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prim, fb, base, p := twoRoutes(t, Policy{Waits: []time.Duration{time.Second}}, []testkit.Reply{testkit.Fail(503), testkit.Fail(429, "Retry-After", "1"), testkit.Fail(503), testkit.OK()}, []testkit.Reply{testkit.OK()})
		resp, err := post(t, mustNew(t, base, p), withDeadline(t, time.Minute))
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 4, prim.Attempts())
		assert.Zero(t, fb.Attempts())
	})
}

// Coordinated, a blip stays home too: the first failure marks the
// primary's key down, yet the call's retry waits its own wait and goes to
// the primary as the key's probe, not around it (the key was not down
// before this call's failure said so).
func TestCoordinatedBlipStaysOnThePrimary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder
		prim, fb, base, p := twoRoutes(t, Policy{Waits: []time.Duration{time.Second, time.Second}, OnAttempt: rec.on}, []testkit.Reply{testkit.Fail(503), testkit.OK()}, []testkit.Reply{testkit.OK()})
		rt, err := NewCoordinated(base, p, coordination.Config{})
		require.NoError(t, err)
		resp, err := post(t, rt, context.Background())
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, []int{0, 0}, routesOf(&rec))
		assert.Equal(t, []time.Duration{time.Second, 0}, rec.retryIns(), "its own wait, not a hold")
		assert.Equal(t, 2, prim.Attempts())
		assert.Zero(t, fb.Attempts())
	})
}
