package llmretry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The seed's first case: fails twice, then answers. Three attempts, the
// failures carry RetryIn 10 ms and 30 ms, the answer none; only the answer
// reaches the caller, 40 ms later.
func TestSeedFailsTwiceThenAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(502), testkit.Fail(503), testkit.OK())
		var rec recorder
		rt := mustNew(t, prov, Policy{Waits: []time.Duration{10 * time.Millisecond, 30 * time.Millisecond}, OnAttempt: rec.on})
		start := time.Now()
		resp, err := post(t, rt, context.Background())
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, `{"answer":42}`, bodyOf(t, resp))
		assert.Equal(t, 40*time.Millisecond, time.Since(start))
		assert.Equal(t, 3, prov.Attempts())
		assert.Equal(t, []time.Duration{10 * time.Millisecond, 30 * time.Millisecond, 0}, rec.retryIns())
		ids := map[string]bool{}
		for i, a := range rec.attempts {
			assert.Equal(t, i+1, a.N)
			assert.Len(t, a.ID, 16)
			ids[a.ID] = true
		}
		assert.Len(t, ids, 3, "each attempt has its own ID")
		assert.Equal(t, 502, rec.attempts[0].Response.StatusCode)
		assert.Equal(t, 200, rec.attempts[2].Response.StatusCode)
		// every attempt carried the whole body
		assert.Equal(t, []string{`{"model":"m"}`, `{"model":"m"}`, `{"model":"m"}`}, prov.Bodies())
	})
}

// The caller's request is never modified, and its body is closed once.
func TestCallerRequestUntouched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(503), testkit.Fail(503), testkit.OK())
		body := &countingBody{Reader: strings.NewReader(`{"prompt":"hi"}`)}
		ctx := withDeadline(t, time.Hour)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, testURL+"?key=SECRET", body)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer SECRET")
		before := *req
		beforeHeader := req.Header.Clone()
		resp, err := mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}, MaxRetries: 5}).RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, beforeHeader, req.Header)
		assert.Equal(t, before.URL.String(), req.URL.String())
		assert.True(t, req.Context() == ctx)
		assert.True(t, req.Body == before.Body)
		assert.Nil(t, req.GetBody, "no GetBody was set on the caller's request")
		assert.Equal(t, 1, body.closes())
		assert.Equal(t, []string{`{"prompt":"hi"}`, `{"prompt":"hi"}`, `{"prompt":"hi"}`}, prov.Bodies())
	})
}

func TestUnreadableBodyIsAnError(t *testing.T) {
	prov := testkit.NewProvider(testkit.OK())
	req, err := http.NewRequest(http.MethodPost, testURL, errBody{})
	require.NoError(t, err)
	resp, err := mustNew(t, prov, Policy{}).RoundTrip(req)
	assert.Nil(t, resp)
	assert.ErrorContains(t, err, "disk on fire")
	assert.Zero(t, prov.Attempts())
}

// Redirects are returned to the outer client, not followed by the inner one.
func TestRedirectsAreNotFollowed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(503), testkit.Fail(302, "Location", "https://elsewhere.test/"))
		resp, err := post(t, mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}}), context.Background())
		require.NoError(t, err)
		assert.Equal(t, 302, resp.StatusCode)
		assert.Equal(t, 2, prov.Attempts())
	})
}

func TestZeroTransportAndNilBase(t *testing.T) {
	var zero Transport
	assert.Equal(t, http.DefaultTransport, zero.baseRT())
	rt := mustNew(t, nil, Policy{})
	assert.Equal(t, http.DefaultTransport, rt.base)
	assert.Equal(t, defaultMaxRetries, zero.policyFor(nil).MaxRetries)
	_, err := (&Transport{}).RoundTrip(nil)
	assert.Error(t, err)
	resp, err := (&Transport{}).RoundTrip(&http.Request{Method: "GET"})
	assert.Nil(t, resp)
	assert.ErrorContains(t, err, "no URL")
}

// misbehaving is a base that returns a response and an error together,
// or neither.
type misbehaving struct{ both bool }

func (m misbehaving) RoundTrip(*http.Request) (*http.Response, error) {
	if m.both {
		return &http.Response{StatusCode: 200, Body: http.NoBody}, Permanent(errors.New("both"))
	}
	return nil, nil
}

// A base that returns a response and an error together, or neither, still
// gives the caller one of them, and the same when the request is nested
// (passed straight through under an outer llmretry call).
func TestNeverResponseAndError(t *testing.T) {
	for _, nested := range []bool{false, true} {
		for _, both := range []bool{true, false} {
			ctx := context.Background()
			if nested {
				ctx = markRetrying(ctx) // what an outer call's attempt carries
			}
			resp, err := post(t, mustNew(t, misbehaving{both}, Policy{MaxRetries: 1, Waits: []time.Duration{0}}), ctx)
			assert.Nil(t, resp, "nested %v, both %v", nested, both)
			assert.Error(t, err, "nested %v, both %v", nested, both)
		}
	}
}

// 1,000 requests at once through one Transport, each failing once and
// retried: all complete with their own answer, and the Transport adds no
// goroutine per request (the peak stays at the callers' own goroutines
// plus a small constant).
func TestThousandConcurrentRetriedRequests(t *testing.T) {
	const n = 1000
	base := &failOnceBase{}
	var recorded atomic.Int64
	rt := mustNew(t, base, Policy{
		Waits:     []time.Duration{time.Millisecond},
		OnAttempt: func(Attempt) { recorded.Add(1) },
	})
	before := runtime.NumGoroutine()

	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			id := fmt.Sprint(i)
			req, err := http.NewRequest(http.MethodPost, testURL, strings.NewReader(`{"model":"m"}`))
			if err != nil {
				errs <- err
				return
			}
			req.Header.Set("X-Req-ID", id)
			resp, err := rt.RoundTrip(req)
			if err != nil {
				errs <- err
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || string(b) != id {
				errs <- fmt.Errorf("request %s: %d %q %v", id, resp.StatusCode, b, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	assert.Equal(t, int64(2*n), base.attempts.Load(), "each request: one failure, one answer")
	assert.Equal(t, int64(2*n), recorded.Load(), "each attempt recorded once")
	peak := base.peak.Load()
	t.Logf("goroutines: %d before, peak %d with %d requests in flight", before, peak, n)
	assert.LessOrEqual(t, peak, int64(before+n+16), "no goroutine per request beyond the caller's own")
}
