package llmretry

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A provider that accepts the connection and never answers costs one
// AttemptTimeout, not the turn: the attempt is abandoned (its context
// canceled), counts as a failed connection, and the retry answers.
func TestAttemptTimeoutBoundsASilentProvider(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &silentThen{silent: 2}
		var rec recorder
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		start := time.Now()
		resp, err := post(t, mustNew(t, base, Policy{Waits: []time.Duration{time.Second}, AttemptTimeout: 20 * time.Second, OnAttempt: rec.on}), ctx)
		require.NoError(t, err)
		assert.Equal(t, `{"answer":42}`, bodyOf(t, resp))
		starts, canceled := base.attempts()
		require.Len(t, starts, 3)
		assert.Equal(t, []time.Duration{0, 21 * time.Second, 42 * time.Second}, []time.Duration{starts[0].Sub(start), starts[1].Sub(start), starts[2].Sub(start)})
		assert.True(t, canceled[0] && canceled[1], "abandoned attempts' contexts are canceled")
		require.Len(t, rec.attempts, 3)
		var ne net.Error
		require.ErrorAs(t, rec.attempts[0].Err, &ne)
		assert.True(t, ne.Timeout())
		assert.Contains(t, rec.attempts[0].Err.Error(), "no response headers within Policy.AttemptTimeout (20s)")
		assert.Equal(t, time.Second, rec.attempts[0].RetryIn, "retried like a failed connection")
		synctest.Wait()
		_, canceled = base.attempts()
		assert.True(t, canceled[2], "the answer's context ends when its body is closed")
	})
}

// Headers in time: the body stays readable past the AttemptTimeout, and
// the attempt's context ends only when the caller closes the body.
func TestAttemptTimeoutLeavesTheBodyAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pr, pw := io.Pipe()
		var attemptCtx context.Context
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			attemptCtx = r.Context()
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: pr, Request: r}, nil
		})
		resp, err := post(t, mustNew(t, base, Policy{AttemptTimeout: time.Second}), context.Background())
		require.NoError(t, err)
		go func() {
			time.Sleep(time.Minute) // a slow body, well past the AttemptTimeout
			pw.Write([]byte("late but fine"))
			pw.Close()
		}()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, "late but fine", string(b))
		assert.NoError(t, attemptCtx.Err())
		require.NoError(t, resp.Body.Close())
		assert.ErrorIs(t, attemptCtx.Err(), context.Canceled)
	})
}

// An abandoned attempt is evidence that the provider is down: a silent
// provider under coordination puts its key down, and the call gives up at
// its limits with ErrNoTimeLeft instead of spending its deadline on one
// attempt.
func TestAttemptTimeoutIsEvidenceOfDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &silentThen{silent: 1 << 30}
		rt, err := NewCoordinated(base, Policy{Waits: []time.Duration{time.Second}, Reserve: 10 * time.Second, AttemptTimeout: 5 * time.Second}, Coordination{ProbeInterval: 5 * time.Second})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		_, err = post(t, rt, ctx)
		assert.ErrorIs(t, err, ErrNoTimeLeft)
		starts, _ := base.attempts()
		assert.Greater(t, len(starts), 2, "several bounded attempts, not one that ate the turn")
		for _, at := range starts {
			assert.LessOrEqual(t, at.Sub(start), 50*time.Second, "no attempt sent past the deadline less the reserve")
		}
		assert.LessOrEqual(t, time.Since(start), 55*time.Second, "the last attempt ends within its AttemptTimeout")
		stats := coordOf(rt).Stats(time.Now())
		require.Contains(t, stats, "api.example.test")
		assert.True(t, stats["api.example.test"].Facts.Down(time.Now()), "the key is down")
	})
}

// A committed stream that goes silent ends with an error from Body.Read
// within StreamIdleTimeout, never a clean end; a stream that keeps coming
// is read to its end.
func TestStreamIdleTimeout(t *testing.T) {
	for _, retryStreams := range []bool{false, true} {
		t.Run(map[bool]string{false: "committed at once", true: "after the guard"}[retryStreams], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				pr, pw := io.Pipe()
				base := roundTripFunc(func(r *http.Request) (*http.Response, error) { return sseResponse(r, pr), nil })
				go func() {
					for i := 0; i < 5; i++ { // 4 s apart: under the bound
						pw.Write([]byte("data: {\"delta\":\"x\"}\n\n"))
						time.Sleep(4 * time.Second)
					}
					// then silence, with the connection open
				}()
				req := streamRequest(t, testURL, `{"model":"m","stream":true}`)
				resp, err := mustNew(t, base, Policy{RetryStreams: retryStreams, StreamIdleTimeout: 5 * time.Second}).RoundTrip(req)
				require.NoError(t, err)
				start := time.Now()
				b, err := io.ReadAll(resp.Body)
				assert.Equal(t, strings.Repeat("data: {\"delta\":\"x\"}\n\n", 5), string(b))
				require.Error(t, err, "a stall is never a clean end")
				assert.NotErrorIs(t, err, io.EOF)
				var ne net.Error
				require.ErrorAs(t, err, &ne)
				assert.True(t, ne.Timeout())
				assert.Contains(t, err.Error(), "Policy.StreamIdleTimeout (5s)")
				assert.Equal(t, 16*time.Second+5*time.Second, time.Since(start), "the last bytes at 16 s, then 5 s of silence")
				require.NoError(t, resp.Body.Close())
				pw.Close()
			})
		})
	}
	t.Run("a stream that keeps coming", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			pr, pw := io.Pipe()
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) { return sseResponse(r, pr), nil })
			go func() {
				for i := 0; i < 10; i++ {
					time.Sleep(4 * time.Second)
					pw.Write([]byte("data: {\"delta\":\"x\"}\n\n"))
				}
				pw.Close()
			}()
			resp, err := mustNew(t, base, Policy{StreamIdleTimeout: 5 * time.Second}).RoundTrip(streamRequest(t, testURL, `{"stream":true}`))
			require.NoError(t, err)
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, strings.Repeat("data: {\"delta\":\"x\"}\n\n", 10), string(b))
			require.NoError(t, resp.Body.Close())
		})
	})
	t.Run("not a stream", func(t *testing.T) {
		body := io.NopCloser(strings.NewReader("{}"))
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: body, Request: r}, nil
		})
		resp, err := post(t, mustNew(t, base, Policy{StreamIdleTimeout: time.Second}), context.Background())
		require.NoError(t, err)
		assert.True(t, resp.Body == body, "a JSON answer is handed over as it is")
	})
}

func TestHasMediaType(t *testing.T) {
	for _, c := range []struct {
		ct   string
		want bool
	}{
		{"text/event-stream", true},
		{"text/event-stream; charset=utf-8", true},
		{" Text/Event-Stream", true},
		{"text/event-streams", false},
		{"application/json", false},
		{"", false},
	} {
		assert.Equal(t, c.want, hasMediaType(c.ct, "text/event-stream"), c.ct)
	}
	assert.False(t, errors.Is(&boundError{}, context.DeadlineExceeded), "a bound of the policy is not the caller's deadline")
}
