package llmretry

import (
	"context"
	"net/http"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
		script    step
		propagate bool
		attempts  int
	}{
		{"503, context propagated", fail(503), true, 3},
		{"refused, context propagated", refused, true, 3},
		{"refused, context dropped (control)", refused, false, 9},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := newProvider(c.script)
				var innerRec, outerRec recorder
				k2 := []time.Duration{time.Second, time.Second} // k = 2 retries
				inner := mustNew(t, prov.mock, Policy{Waits: k2, OnAttempt: innerRec.on})
				outer := mustNew(t, wrapperLM(t, inner, c.propagate, nil), Policy{Waits: k2, OnAttempt: outerRec.on})
				resp, err := post(t, outer, context.Background())
				assert.Equal(t, c.attempts, prov.attempts())
				assert.Len(t, outerRec.attempts, 3)
				if c.propagate {
					assert.Empty(t, innerRec.attempts, "the inner layer passed the requests through")
				}
				if c.script.err != nil {
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
		prov := newProvider(fail(503))
		inner := mustNew(t, prov.mock, Policy{Waits: []time.Duration{time.Second}})
		eager := Policy{Waits: []time.Duration{time.Second, time.Second, time.Second}}
		outer := mustNew(t, wrapperLM(t, inner, true, &eager), Policy{Waits: []time.Duration{time.Second, time.Second}})
		resp, err := post(t, outer, context.Background())
		require.NoError(t, err)
		assert.Equal(t, 503, resp.StatusCode)
		assert.Equal(t, 3, prov.attempts())

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
		prov := newProvider(fail(503))
		client := &http.Client{Transport: mustNew(t, prov.mock, Policy{Waits: []time.Duration{time.Second, time.Second}})}
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
		assert.Equal(t, 3, prov.attempts(), "k+1, not (k+1)²")
	})
}

// statusError is a tool's error for a failed HTTP status.
type statusError struct{ code int }

func (e *statusError) Error() string { return http.StatusText(e.code) }
