package llmretry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tool is a scripted tool call: it returns the next error of its script
// (nil for success; the last entry repeats) and records when it was called.
type tool struct {
	mu     sync.Mutex
	script []error
	times  []time.Time
	ctxs   []context.Context
}

func (tl *tool) call(ctx context.Context) (string, error) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	i := len(tl.times)
	tl.times = append(tl.times, time.Now())
	tl.ctxs = append(tl.ctxs, ctx)
	if err := tl.script[min(i, len(tl.script)-1)]; err != nil {
		return fmt.Sprintf("partial %d", i+1), err
	}
	return fmt.Sprintf("result %d", i+1), nil
}

func (tl *tool) calls() int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return len(tl.times)
}

func (tl *tool) gaps() []time.Duration {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var g []time.Duration
	for i := 1; i < len(tl.times); i++ {
		g = append(g, tl.times[i].Sub(tl.times[i-1]))
	}
	return g
}

var errBusy = errors.New("tool busy")

// The seed's first case for a tool: fails twice, then answers, after
// exactly the listed waits; the record has one entry per call, with no
// request, and the waits as RetryIn.
func TestDoFailsTwiceThenAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := &tool{script: []error{errBusy, errBusy, nil}}
		var rec recorder
		start := time.Now()
		v, err := Do(context.Background(), Policy{Waits: []time.Duration{10 * time.Millisecond, 30 * time.Millisecond}, OnAttempt: rec.on}, tl.call)
		require.NoError(t, err)
		assert.Equal(t, "result 3", v)
		assert.Equal(t, []time.Duration{10 * time.Millisecond, 30 * time.Millisecond}, tl.gaps())
		assert.Equal(t, 40*time.Millisecond, time.Since(start))
		require.Len(t, rec.attempts, 3)
		ids := map[string]bool{}
		for i, a := range rec.attempts {
			assert.Equal(t, i+1, a.N)
			assert.Nil(t, a.Request)
			assert.Nil(t, a.Response)
			assert.Len(t, a.ID, 16)
			ids[a.ID] = true
		}
		assert.Len(t, ids, 3)
		assert.ErrorIs(t, rec.attempts[0].Err, errBusy)
		assert.NoError(t, rec.attempts[2].Err)
		assert.Equal(t, []time.Duration{10 * time.Millisecond, 30 * time.Millisecond, 0}, rec.retryIns())
	})
}

// Without a deadline the list is the bound; the last call's value comes
// back with an *Exhausted error (no request) wrapping its error.
func TestDoRetriesRunOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := &tool{script: []error{errBusy, fmt.Errorf("still: %w", errBusy)}}
		v, err := Do(context.Background(), Policy{Waits: []time.Duration{time.Second, 2 * time.Second}}, tl.call)
		assert.Equal(t, "partial 3", v, "the last call's value")
		var ex *Exhausted
		require.ErrorAs(t, err, &ex)
		assert.Nil(t, ex.Request)
		assert.Nil(t, ex.Response)
		assert.Equal(t, 3, ex.Attempts)
		assert.ErrorIs(t, err, errBusy)
		assert.ErrorIs(t, err, ErrRetriesSpent)
		assert.EqualError(t, err, "llmretry: gave up after 3 attempts, retries spent: still: tool busy")
		assert.Equal(t, []time.Duration{time.Second, 2 * time.Second}, tl.gaps())
	})
}

// With a deadline the last wait repeats while the reserve still fits after
// it; then Do gives up without waiting.
func TestDoKeepsTheReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := &tool{script: []error{errBusy}}
		ctx := withDeadline(t, 2*time.Minute)
		start := time.Now()
		_, err := Do(ctx, Policy{Waits: []time.Duration{5 * time.Second, 10 * time.Second}, Reserve: time.Minute}, tl.call)
		assert.ErrorIs(t, err, errBusy)
		// calls at 0, 5, 15, 25, 35, 45, 55 s
		assert.Equal(t, []time.Duration{5 * time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second}, tl.gaps())
		assert.Equal(t, 55*time.Second, time.Since(start))
		deadline, _ := ctx.Deadline()
		assert.GreaterOrEqual(t, time.Until(deadline), time.Minute)
	})
}

// The zero Policy: up to 6 retries after full-jitter waits.
func TestDoExponentialByDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := &tool{script: []error{errBusy}}
		_, err := Do(context.Background(), Policy{}, tl.call)
		var ex *Exhausted
		require.ErrorAs(t, err, &ex)
		assert.Equal(t, defaultMaxRetries+1, ex.Attempts)
		for k, g := range tl.gaps() {
			assert.LessOrEqual(t, g, time.Duration(1<<k)*time.Second, "retry %d", k+1)
		}
	})
}

// A cancel during a wait ends Do at once with the context's error, and no
// further call is made.
func TestDoCancelDuringWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := &tool{script: []error{errBusy, nil}}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(time.Minute)
			cancel()
		}()
		start := time.Now()
		v, err := Do(ctx, Policy{Waits: []time.Duration{4 * time.Minute}}, tl.call)
		assert.Equal(t, "partial 1", v)
		assert.ErrorIs(t, err, context.Canceled)
		var ex *Exhausted
		require.ErrorAs(t, err, &ex)
		assert.Equal(t, 1, ex.Attempts)
		assert.Equal(t, time.Minute, time.Since(start))
		assert.Equal(t, 1, tl.calls())
	})
}

// An error the call returns once the context has ended is the context's
// own and is not retried.
func TestDoDoesNotRetryTheContextsOwnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := withDeadline(t, time.Hour)
		calls := 0
		start := time.Now()
		_, err := Do(ctx, Policy{Waits: []time.Duration{time.Second}}, func(ctx context.Context) (int, error) {
			calls++
			<-ctx.Done() // a tool that runs until the turn's deadline
			return 0, ctx.Err()
		})
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 1, calls)
		assert.Equal(t, time.Hour, time.Since(start))
	})
}

// A tool's own per-call timeout is not the context's: it is retried.
func TestDoRetriesAToolsOwnTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := &tool{script: []error{context.DeadlineExceeded, nil}}
		v, err := Do(context.Background(), Policy{Waits: []time.Duration{time.Second}}, tl.call)
		require.NoError(t, err)
		assert.Equal(t, "result 2", v)
	})
}

func TestDoPermanentStopsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cause := &pathError{path: "/etc/shadow"}
		tl := &tool{script: []error{errBusy, fmt.Errorf("read: %w", Permanent(cause)), nil}}
		var rec recorder
		start := time.Now()
		_, err := Do(context.Background(), Policy{Waits: []time.Duration{time.Second, time.Second, time.Second}, OnAttempt: rec.on}, tl.call)
		assert.Equal(t, 2, tl.calls())
		assert.Equal(t, time.Second, time.Since(start), "no wait after the permanent error")
		var ex *Exhausted
		require.ErrorAs(t, err, &ex)
		assert.Equal(t, 2, ex.Attempts)
		var pe *pathError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, "/etc/shadow", pe.path)
		assert.ErrorIs(t, err, cause)
		assert.Equal(t, []time.Duration{time.Second, 0}, rec.retryIns())
	})
}

// waitErr is a tool's error that states the wait its provider asked for.
type waitErr struct{ wait time.Duration }

func (e *waitErr) Error() string             { return "rate limited, retry after " + e.wait.String() }
func (e *waitErr) RetryAfter() time.Duration { return e.wait }

// A wait an error states is honoured like a server's Retry-After: the
// next call waits the longer of it and the schedule's wait (Waits 1 s,
// 2 s here); above MaxRetryAfter (10 s), or past the deadline less the
// reserve, Do stops at once without waiting. The error may be wrapped, or
// joined with others; Permanent still wins, and the schedule still bounds
// the retries.
func TestDoHonoursAStatedWait(t *testing.T) {
	stated := func(d time.Duration) error { return &waitErr{wait: d} }
	twice := func(err error) []error { return []error{err, err, nil} }
	cases := []struct {
		name     string
		script   []error       // the calls' errors; the last repeats
		deadline time.Duration // 0: none; the reserve is 1 minute
		gaps     []time.Duration
		retryIns []time.Duration
		reason   error // nil: the last call answers
	}{
		{name: "longer than the schedule's", script: twice(stated(3 * time.Second)),
			gaps: []time.Duration{3 * time.Second, 3 * time.Second}, retryIns: []time.Duration{3 * time.Second, 3 * time.Second, 0}},
		{name: "shorter than the schedule's", script: twice(stated(time.Second / 2)),
			gaps: []time.Duration{time.Second, 2 * time.Second}, retryIns: []time.Duration{time.Second, 2 * time.Second, 0}},
		{name: "wrapped", script: twice(fmt.Errorf("search: %w", stated(5*time.Second))),
			gaps: []time.Duration{5 * time.Second, 5 * time.Second}, retryIns: []time.Duration{5 * time.Second, 5 * time.Second, 0}},
		{name: "joined", script: twice(errors.Join(errBusy, stated(5*time.Second))),
			gaps: []time.Duration{5 * time.Second, 5 * time.Second}, retryIns: []time.Duration{5 * time.Second, 5 * time.Second, 0}},
		{name: "negative counts as zero", script: twice(stated(-time.Hour)),
			gaps: []time.Duration{time.Second, 2 * time.Second}, retryIns: []time.Duration{time.Second, 2 * time.Second, 0}},
		{name: "above MaxRetryAfter", script: twice(stated(time.Hour)),
			retryIns: []time.Duration{0}, reason: ErrWaitTooLong},
		{name: "past the deadline less the reserve", script: twice(stated(8 * time.Second)), deadline: time.Minute + 5*time.Second,
			retryIns: []time.Duration{0}, reason: ErrNoTimeLeft},
		{name: "Permanent wins", script: twice(Permanent(stated(time.Second))),
			retryIns: []time.Duration{0}, reason: ErrNotRetryable},
		{name: "the schedule still bounds the retries", script: []error{stated(time.Second)},
			gaps: []time.Duration{time.Second, 2 * time.Second}, retryIns: []time.Duration{time.Second, 2 * time.Second, 0}, reason: ErrRetriesSpent},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := withDeadline(t, tc.deadline)
				tl := &tool{script: tc.script}
				var rec recorder
				p := Policy{Waits: []time.Duration{time.Second, 2 * time.Second}, MaxRetryAfter: 10 * time.Second, Reserve: time.Minute, OnAttempt: rec.on}
				start := time.Now()
				v, err := Do(ctx, p, tl.call)
				assert.Equal(t, tc.gaps, tl.gaps())
				assert.Equal(t, tc.retryIns, rec.retryIns())
				var total time.Duration
				for _, g := range tc.gaps {
					total += g
				}
				assert.Equal(t, total, time.Since(start), "no wait but the ones taken")
				if tc.reason == nil {
					require.NoError(t, err)
					assert.Equal(t, "result 3", v)
					return
				}
				var ex *Exhausted
				require.ErrorAs(t, err, &ex)
				assert.Equal(t, tc.reason, ex.Reason)
				assert.Equal(t, tc.reason, rec.last().Stop)
				assert.Equal(t, len(tc.gaps)+1, ex.Attempts)
				var we *waitErr
				assert.ErrorAs(t, err, &we, "the stating error is still reached")
			})
		})
	}
}

func TestDoInvalidPolicyMakesNoCall(t *testing.T) {
	tl := &tool{script: []error{nil}}
	v, err := Do(context.Background(), Policy{Reserve: -time.Second}, tl.call)
	assert.Empty(t, v)
	assert.EqualError(t, err, Policy{Reserve: -time.Second}.Validate().Error())
	assert.Zero(t, tl.calls())

	_, err = Do[int](context.Background(), Policy{}, nil)
	assert.EqualError(t, err, "llmretry: Do: nil call")
}

// The first success returns at once, recorded once with nothing after it.
func TestDoSuccessFirstTime(t *testing.T) {
	tl := &tool{script: []error{nil}}
	var rec recorder
	v, err := Do(context.Background(), Policy{OnAttempt: rec.on}, tl.call)
	require.NoError(t, err)
	assert.Equal(t, "result 1", v)
	require.Len(t, rec.attempts, 1)
	assert.Equal(t, 1, rec.attempts[0].N)
	assert.Zero(t, rec.attempts[0].RetryIn)
	assert.NoError(t, rec.attempts[0].Err)
}

// OnExhausted is asked once per round with the calls so far and the last
// error; yes calls again at once, then runs the schedule again from
// Waits[0], numbers continuing.
func TestDoAskRounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := &tool{script: []error{errBusy}}
		ask := &asked{answers: []bool{true, false}}
		var rec recorder
		v, err := Do(context.Background(), Policy{Waits: []time.Duration{time.Second, 2 * time.Second}, OnAttempt: rec.on, OnExhausted: ask.Ask}, tl.call)
		assert.Equal(t, "partial 6", v)
		var ex *Exhausted
		require.ErrorAs(t, err, &ex)
		assert.Equal(t, 6, ex.Attempts)
		assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 0, time.Second, 2 * time.Second}, tl.gaps())
		q := ask.questions()
		require.Len(t, q, 2)
		assert.Equal(t, []int{3, 6}, []int{q[0].Attempts, q[1].Attempts})
		assert.Nil(t, q[0].Request)
		assert.ErrorIs(t, q[0].Err, errBusy)
		require.Len(t, rec.attempts, 6)
		assert.Equal(t, 6, rec.attempts[5].N)

		// A yes that comes after the context ended is overruled.
		tl = &tool{script: []error{errBusy}}
		ctx, cancel := context.WithCancel(context.Background())
		_, err = Do(ctx, Policy{Waits: []time.Duration{time.Second}, OnExhausted: func(context.Context, *Exhausted) bool {
			cancel()
			return true
		}}, tl.call)
		assert.ErrorIs(t, err, errBusy)
		assert.Equal(t, 2, tl.calls())
	})
}

// The call's context is marked as retrying (an llmretry Transport inside
// passes through) and keeps the caller's values and deadline; Do inside
// such a context runs its call once.
func TestDoMarksTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type key struct{}
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), key{}, "v"), time.Hour)
		defer cancel()
		outer := &tool{script: []error{nil}}
		_, err := Do(ctx, Policy{}, outer.call)
		require.NoError(t, err)
		inner := outer.ctxs[0]
		_, nested := lookup(inner)
		assert.True(t, nested)
		assert.Equal(t, "v", inner.Value(key{}))
		d1, _ := ctx.Deadline()
		d2, _ := inner.Deadline()
		assert.Equal(t, d1, d2)

		tl := &tool{script: []error{errBusy, nil}}
		v, err := Do(inner, Policy{Waits: []time.Duration{time.Second}}, tl.call)
		assert.Equal(t, "partial 1", v)
		assert.Same(t, errBusy, err, "passed through unchanged")
		assert.Equal(t, 1, tl.calls())
	})
}

// pathError is a typed cause for errors.As.
type pathError struct{ path string }

func (e *pathError) Error() string { return "permission denied: " + e.path }

// signerError is a typed cause a middleware under the Transport returns.
type signerError struct{ reason string }

func (e *signerError) Error() string { return "signer: " + e.reason }

// A base that returns a Permanent error ends the call at once, first
// attempt or later; errors.Is and errors.As reach the cause through the
// *Exhausted.
func TestPermanentFromTheBaseStopsAtOnce(t *testing.T) {
	for _, failFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("after a 503 %v", failFirst), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cause := &signerError{reason: "key revoked"}
				calls := 0
				base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
					calls++
					if failFirst && calls == 1 {
						return &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: http.Header{}, Body: http.NoBody, Request: r}, nil
					}
					return nil, fmt.Errorf("middleware: %w", Permanent(cause))
				})
				var rec recorder
				start := time.Now()
				resp, err := post(t, mustNew(t, base, Policy{Waits: []time.Duration{time.Second, time.Second, time.Second}, OnAttempt: rec.on}), context.Background())
				assert.Nil(t, resp)
				want := 1
				if failFirst {
					want = 2
				}
				assert.Equal(t, want, calls)
				assert.Equal(t, time.Duration(want-1)*time.Second, time.Since(start))
				var ex *Exhausted
				require.ErrorAs(t, err, &ex)
				assert.Equal(t, want, ex.Attempts)
				assert.ErrorIs(t, err, cause)
				var se *signerError
				require.ErrorAs(t, err, &se)
				assert.Equal(t, "key revoked", se.reason)
				assert.Contains(t, err.Error(), "middleware: signer: key revoked", "Permanent adds nothing to the message")
				require.Len(t, rec.attempts, want)
				assert.Zero(t, rec.attempts[want-1].RetryIn)
			})
		})
	}
}

func TestPermanent(t *testing.T) {
	assert.NoError(t, Permanent(nil))
	assert.True(t, Permanent(nil) == nil, "an untyped nil, not a typed one")

	cause := errors.New("bad arguments")
	p := Permanent(cause)
	assert.Equal(t, "bad arguments", p.Error())
	assert.ErrorIs(t, p, cause)
	assert.True(t, isPermanent(p))
	assert.True(t, isPermanent(fmt.Errorf("tool: %w", p)), "still permanent when wrapped")
	assert.True(t, isPermanent(errors.Join(errors.New("x"), p)))
	assert.False(t, isPermanent(cause))
	assert.False(t, Retryable(nil, fmt.Errorf("tool: %w", p)))
}
