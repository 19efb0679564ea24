package llmretry

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAttemptFromContextNumbersEachAttempt: the base sees 1, 2, 3 on the
// attempts of one call, and 0 outside any llmretry call.
func TestAttemptFromContextNumbersEachAttempt(t *testing.T) {
	var mu sync.Mutex
	var seen []int
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		a, _ := AttemptFromContext(r.Context())
		seen = append(seen, a.N)
		mu.Unlock()
		status := 503
		if len(seen) == 3 {
			status = 200
		}
		return &http.Response{StatusCode: status, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
	})
	rt, err := New(base, Policy{Waits: []time.Duration{0, 0}})
	require.NoError(t, err)
	req, _ := http.NewRequest("POST", "https://api.example.com/v1", strings.NewReader(`{}`))
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, []int{1, 2, 3}, seen)
	a, ok := AttemptFromContext(context.Background())
	assert.False(t, ok)
	assert.Zero(t, a)
	//lint:ignore SA1012 a nil context is answered, not dereferenced
	_, ok = AttemptFromContext(nil)
	assert.False(t, ok)
}

// A policy from WithPolicy replaces the Transport's for that request; an
// invalid one is refused before anything is sent.
func TestWithPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(502))
		var rec recorder
		rt := mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}})
		ctx := WithPolicy(context.Background(), Policy{Waits: []time.Duration{time.Minute, time.Minute}, OnAttempt: rec.on})
		_, err := post(t, rt, ctx)
		require.NoError(t, err)
		assert.Equal(t, []time.Duration{time.Minute, time.Minute}, prov.Gaps())
		assert.Len(t, rec.attempts, 3)

		prov = testkit.NewProvider(testkit.OK())
		body := &countingBody{Reader: strings.NewReader("x")}
		req, err := http.NewRequestWithContext(WithPolicy(context.Background(), Policy{MaxWait: -time.Second}), http.MethodPost, testURL, body)
		require.NoError(t, err)
		resp, err := mustNew(t, prov, Policy{}).RoundTrip(req)
		assert.Nil(t, resp)
		assert.ErrorContains(t, err, "Policy.MaxWait")
		assert.Zero(t, prov.Attempts(), "nothing sent")
		assert.Equal(t, 1, body.closes(), "the body is closed all the same")
	})
}

// wrapperLM is a base that, like an SDK wrapper or a host's LM calling an
// LM, sends each request on through a second http.Client with its own
// llmretry Transport. With propagate, the inner request carries the outer
// request's context, as it should.
func wrapperLM(t *testing.T, inner *Transport, propagate bool, withPolicy *Policy) roundTripFunc {
	client := &http.Client{Transport: inner}
	return func(r *http.Request) (*http.Response, error) {
		ctx := context.Background()
		if propagate {
			ctx = r.Context()
		}
		if withPolicy != nil {
			ctx = WithPolicy(ctx, *withPolicy)
		}
		req, err := http.NewRequestWithContext(ctx, r.Method, r.URL.String(), r.Body)
		require.NoError(t, err)
		return client.Do(req)
	}
}

// Only the outermost Transport retries: against a provider that always
// fails, an outer layer with k retries over an inner one with k retries
// makes k+1 provider attempts, not (k+1)². Dropping the context (the
// control) shows what nesting would cost otherwise.
func TestOnlyTheOutermostRetries(t *testing.T) {
	cases := []struct {
		name      string
		script    testkit.Reply
		propagate bool
		attempts  int
	}{
		{"503, context propagated", testkit.Fail(503), true, 3},
		{"refused, context propagated", testkit.Refused(), true, 3},
		{"refused, context dropped (control)", testkit.Refused(), false, 9},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(c.script)
				var innerRec, outerRec recorder
				k2 := []time.Duration{time.Second, time.Second} // k = 2 retries
				inner := mustNew(t, prov, Policy{Waits: k2, OnAttempt: innerRec.on})
				outer := mustNew(t, wrapperLM(t, inner, c.propagate, nil), Policy{Waits: k2, OnAttempt: outerRec.on})
				resp, err := post(t, outer, context.Background())
				assert.Equal(t, c.attempts, prov.Attempts())
				assert.Len(t, outerRec.attempts, 3)
				if c.propagate {
					assert.Empty(t, innerRec.attempts, "the inner layer passed the requests through")
				}
				if c.script.Err != nil {
					assert.Nil(t, resp)
					assert.ErrorIs(t, err, syscall.ECONNREFUSED)
					return
				}
				require.NoError(t, err)
				assert.Equal(t, 503, resp.StatusCode)
				assert.Equal(t, "error 503", bodyOf(t, resp))
			})
		})
	}
}

// WithPolicy inside a marked context does not make the inner layer retry.
func TestWithPolicyInsideARetryingCallPassesThrough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(503))
		inner := mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}})
		eager := Policy{Waits: []time.Duration{time.Second, time.Second, time.Second}}
		outer := mustNew(t, wrapperLM(t, inner, true, &eager), Policy{Waits: []time.Duration{time.Second, time.Second}})
		resp, err := post(t, outer, context.Background())
		require.NoError(t, err)
		assert.Equal(t, 503, resp.StatusCode)
		assert.Equal(t, 3, prov.Attempts())

		// WithPolicy on a marked context keeps the mark, and marking a
		// context that carries a policy replaces it.
		marked := markRetrying(context.Background())
		cp, nested := lookup(WithPolicy(marked, eager))
		assert.True(t, nested)
		require.NotNil(t, cp)
		_, nested = lookup(WithPolicy(WithPolicy(marked, eager), Policy{}))
		assert.True(t, nested, "the mark survives stacked WithPolicy calls")
		_, nested = lookup(WithPolicy(context.Background(), eager))
		assert.False(t, nested)
	})
}

// A tool run by Do that sends model requests through an llmretry
// Transport: Do's retries are the only ones.
func TestTransportInsideDoPassesThrough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(503))
		client := &http.Client{Transport: mustNew(t, prov, Policy{Waits: []time.Duration{time.Second, time.Second}})}
		calls := 0
		_, err := Do(context.Background(), Policy{Waits: []time.Duration{time.Second, time.Second}}, func(ctx context.Context) (int, error) {
			calls++
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, testURL, nil)
			if err != nil {
				return 0, Permanent(err)
			}
			resp, err := client.Do(req)
			if err != nil {
				return 0, err
			}
			defer resp.Body.Close()
			return resp.StatusCode, &statusError{code: resp.StatusCode}
		})
		var se *statusError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, 503, se.code)
		assert.Equal(t, 3, calls)
		assert.Equal(t, 3, prov.Attempts(), "k+1, not (k+1)²")
	})
}

// statusError is a tool's error for a failed HTTP status.
type statusError struct{ code int }

func (e *statusError) Error() string { return http.StatusText(e.code) }

// AttemptFromContext says, as each attempt is sent, the route that
// Attempt.Route reports afterwards.
func TestAttemptFromContextRoute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var seen []int
		prim, fb := testkit.NewProvider(testkit.Fail(503)), testkit.NewProvider(testkit.Fail(503), testkit.OK())
		hosts := testkit.Hosts{"api.example.test": prim, "fallback.example.test": fb}
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			a, _ := AttemptFromContext(r.Context())
			seen = append(seen, a.Route)
			mu.Unlock()
			return hosts.RoundTrip(r)
		})
		var rec recorder
		rt := mustNew(t, base, Policy{Waits: []time.Duration{time.Second, time.Second, time.Second}, OnAttempt: rec.on, Fallback: []Route{routeTo(t, fallbackBase, "FB")}})
		resp, err := post(t, rt, context.Background())
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, []int{0, 0, 1, 0}, seen, "the primary's blip, a move, the fallback down: back to the primary after a wait, its retries then spent")
		assert.Equal(t, seen, routesOf(&rec))
	})
}

// An invalid WithPolicy refuses the request before anything is sent, also
// inside Do (or an outer Transport), where the request is not retried.
func TestWithPolicyInvalidIsRefusedInsideDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.OK())
		rt := mustNew(t, prov, Policy{})
		_, err := Do(context.Background(), Policy{MaxRetries: 1}, func(ctx context.Context) (int, error) {
			ctx = WithPolicy(ctx, Policy{MaxWait: -time.Second})
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, testURL, strings.NewReader(`{}`))
			require.NoError(t, err)
			resp, err := rt.RoundTrip(req)
			if err != nil {
				return 0, Permanent(err)
			}
			resp.Body.Close()
			return resp.StatusCode, nil
		})
		assert.ErrorContains(t, err, "Policy.MaxWait")
		assert.Zero(t, prov.Attempts(), "an invalid WithPolicy request is refused before anything is sent")
	})
}
