package llmretry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
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

// A failed connection on the last attempt reaches the caller as an
// *Exhausted error that says how many attempts were made and still
// unwraps to the cause; never with a response.
func TestLastErrorIsWrapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(502), testkit.Refused())
		var rec recorder
		resp, err := post(t, mustNew(t, prov, Policy{Waits: []time.Duration{time.Second, time.Second}, OnAttempt: rec.on}), context.Background())
		assert.Nil(t, resp)
		require.Error(t, err)
		assert.ErrorIs(t, err, syscall.ECONNREFUSED)
		var ex *Exhausted
		require.ErrorAs(t, err, &ex)
		assert.Equal(t, 3, ex.Attempts)
		assert.Contains(t, err.Error(), "3 attempts")
		assert.ErrorIs(t, err, ErrRetriesSpent)
		assert.Contains(t, err.Error(), "retries spent")
		require.Len(t, rec.attempts, 3)
		assert.Nil(t, rec.attempts[1].Stop, "a retry followed")
		assert.ErrorIs(t, rec.attempts[2].Stop, ErrRetriesSpent)
		assert.Nil(t, rec.attempts[2].Response)
		assert.ErrorIs(t, rec.attempts[2].Err, syscall.ECONNREFUSED)
	})
}

func TestCancelDuringWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(503), testkit.OK())
		rt := mustNew(t, prov, Policy{Waits: []time.Duration{4 * time.Minute}})
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(time.Minute)
			cancel()
		}()
		start := time.Now()
		resp, err := post(t, rt, ctx)
		assert.Nil(t, resp)
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, time.Minute, time.Since(start))
		assert.Equal(t, 1, prov.Attempts(), "no attempt after the cancel")
	})
}

// Cancelling the request's context during a 4-minute wait returns at once
// (real clock), with the context's error, and sends nothing more.
func TestCancelDuringLongWaitReturnsPromptly(t *testing.T) {
	base := &failOnceBase{}
	waiting := make(chan struct{})
	rt := mustNew(t, base, Policy{
		Waits: []time.Duration{4 * time.Minute},
		OnAttempt: func(a Attempt) {
			if a.RetryIn == 4*time.Minute {
				close(waiting)
			}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		resp *http.Response
		err  error
		at   time.Time
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, testURL, strings.NewReader(`{"model":"m"}`))
	require.NoError(t, err)
	done := make(chan result, 1)
	go func() {
		resp, err := rt.RoundTrip(req)
		done <- result{resp, err, time.Now()}
	}()
	<-waiting // the first attempt failed; the 4-minute wait is starting
	waitBlockedIn(t, "go-retryablehttp.(*Client).Do")
	cancelled := time.Now()
	cancel()
	r := <-done
	took := r.at.Sub(cancelled)
	bound := timeBound(10*time.Millisecond, 500*time.Millisecond)
	t.Logf("returned %v after the cancel", took)
	assert.Less(t, took, bound, "returned within %v of the cancel", bound)
	assert.Nil(t, r.resp)
	require.ErrorIs(t, r.err, context.Canceled)
	var ex *Exhausted
	require.ErrorAs(t, r.err, &ex)
	assert.Equal(t, 1, ex.Attempts)
	assert.Equal(t, int64(1), base.attempts.Load(), "no attempt after the cancel")
}

// waitBlockedIn returns once a goroutine is blocked in a select in the
// function named frame (a fragment of its name in a stack trace): then a
// timed wait there has really begun. It fails the test after 10 s.
func waitBlockedIn(t *testing.T, frame string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for give := time.Now().Add(10 * time.Second); time.Now().Before(give); runtime.Gosched() {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			if strings.Contains(g, " [select") && strings.Contains(g, frame) {
				return
			}
		}
	}
	t.Fatalf("no goroutine blocked in %s", frame)
}

// chaosSend sends request id through a fresh Transport over base, with its
// own record.
func chaosSend(t *testing.T, base http.RoundTripper, url, id string) (*recorder, *http.Response, error) {
	t.Helper()
	rec := &recorder{}
	rt := mustNew(t, base, Policy{Waits: chaosWaits, OnAttempt: rec.on})
	req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(chaosReqHeader, id)
	resp, err := rt.RoundTrip(req)
	return rec, resp, err
}

// checkChaosOutcome checks one request against what the provider did to
// it: every attempt but the last met a retryable fault, the last met a
// final one or was the last the schedule allows, and the caller got
// exactly the last attempt's result, with a body that reads as the provider
// sent it.
func checkChaosOutcome(t *testing.T, faults []fault, rec *recorder, resp *http.Response, err error) {
	t.Helper()
	maxAttempts := len(chaosWaits) + 1
	require.NotEmpty(t, faults, "the provider saw the request")
	require.LessOrEqual(t, len(faults), maxAttempts)
	for i, f := range faults[:len(faults)-1] {
		assert.True(t, f.retryable(), "attempt %d met %v and was retried", i+1, f)
	}
	last := faults[len(faults)-1]
	if len(faults) < maxAttempts {
		assert.False(t, last.retryable(), "the last attempt met %v: retries remained, so it was final", last)
	}
	require.Equal(t, len(faults), rec.count(), "one record per attempt the provider saw")
	assertFinalIsLastAttempt(t, rec, resp, err)

	switch last {
	case faultOK:
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, chaosOKBody, bodyOf(t, resp), "the whole answer")
	case faultTruncated, fault503Truncated:
		// The headers arrived: a response, not an error. The truncation
		// shows when the caller reads, as with a bare http.Transport.
		require.NoError(t, err)
		want := http.StatusOK
		if last == fault503Truncated {
			want = http.StatusServiceUnavailable
		}
		assert.Equal(t, want, resp.StatusCode)
		got, rerr := io.ReadAll(resp.Body)
		assert.ErrorIs(t, rerr, io.ErrUnexpectedEOF)
		assert.Equal(t, chaosOKBody[:len(chaosOKBody)/2], string(got), "every byte sent, from the first")
		assert.NoError(t, resp.Body.Close())
	case fault503:
		require.NoError(t, err)
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"), "retries spent: SDKs above must not resend")
		assert.Equal(t, chaos503Body, bodyOf(t, resp))
	case fault400:
		require.NoError(t, err)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		assert.Empty(t, resp.Header.Get("X-Should-Retry"), "a final status is returned as the provider sent it")
		assert.Equal(t, chaos400Body, bodyOf(t, resp))
	case faultReset, faultPartialHeaders, faultStall:
		assert.Nil(t, resp)
		var ex *Exhausted
		require.ErrorAs(t, err, &ex)
		assert.Equal(t, len(faults), ex.Attempts)
		switch last {
		case faultReset:
			assert.True(t, errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF),
				"a reset connection: %v", err)
		case faultPartialHeaders:
			assert.True(t, errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF), "cut headers: %v", err)
		case faultStall:
			assert.ErrorContains(t, err, "timeout awaiting response headers")
		}
	}
}

// Each fault alone, and in the sequences that matter.
func TestChaosFaults(t *testing.T) {
	cases := []struct {
		name   string
		script []fault
	}{
		{"reset then answer", []fault{faultReset, faultOK}},
		{"partial headers then answer", []fault{faultPartialHeaders, faultOK}},
		{"stall then answer", []fault{faultStall, faultOK}},
		{"503 three times then answer", []fault{fault503, fault503, fault503, faultOK}},
		{"503 truncated then answer", []fault{fault503Truncated, faultOK}},
		{"503 until retries are spent", []fault{fault503}},
		{"503 truncated until retries are spent", []fault{fault503Truncated}},
		{"reset until retries are spent", []fault{faultReset}},
		{"partial headers until retries are spent", []fault{faultPartialHeaders}},
		{"stall until retries are spent", []fault{faultStall}},
		{"truncated answer is returned", []fault{faultTruncated, faultOK}},
		{"reset then truncated answer", []fault{faultReset, faultTruncated, faultOK}},
		{"400 is returned", []fault{fault400, faultOK}},
		{"mixed then 400", []fault{fault503, faultReset, fault400, faultOK}},
		{"every retryable fault then answer", []fault{faultPartialHeaders, faultStall, faultReset, faultOK}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plan := script(c.script...)
			prov := newChaosProvider(t, plan)
			rec, resp, err := chaosSend(t, chaosBase(t), prov.srv.URL, "r")
			checkChaosOutcome(t, prov.faultsOf("r"), rec, resp, err)
			want := 0 // attempts: up to the first final fault, within the schedule
			for want < len(chaosWaits)+1 {
				want++
				if !plan(want - 1).retryable() {
					break
				}
			}
			assert.Len(t, prov.faultsOf("r"), want, "attempts")
		})
	}
}

// The provider flips between every fault at random (seeded, so a failure
// can be replayed), over connections that the shared base pools and
// reuses: each request must still end as its attempts say.
func TestChaosRandomFaults(t *testing.T) {
	// Weights: stalls are rare because each costs a header timeout.
	weighted := []fault{
		faultOK, faultOK, faultOK, faultOK,
		fault503, fault503, fault503, fault503Truncated,
		faultReset, faultReset, faultPartialHeaders, faultPartialHeaders,
		faultTruncated, fault400, faultStall,
	}
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x11a7e7))
			prov := newChaosProvider(t, func(int) fault { return weighted[rng.IntN(len(weighted))] })
			base := chaosBase(t)
			seen := map[fault]int{}
			for i := range 25 {
				id := strconv.Itoa(i)
				rec, resp, err := chaosSend(t, base, prov.srv.URL, id)
				faults := prov.faultsOf(id)
				for _, f := range faults {
					seen[f]++
				}
				checkChaosOutcome(t, faults, rec, resp, err)
				if t.Failed() {
					t.Fatalf("request %s (seed %d) met %v", id, seed, faults)
				}
			}
			assert.Greater(t, len(seen), 4, "the seed exercised several faults: %v", seen)
		})
	}
}

// A base's error that states a wait (a method RetryAfter() time.Duration
// in its chain, as Do's operations state theirs) is honoured like a
// server's Retry-After: the longer of it and the schedule's wait, and one
// above MaxRetryAfter ends the call at once (before, the Transport read
// waits from headers alone).
func TestTransportHonoursABaseErrorsStatedWait(t *testing.T) {
	for _, tc := range []struct {
		name   string
		wait   time.Duration
		gap    time.Duration // between the two attempts; 0: no second
		reason error
	}{
		{"longer than the schedule's", 3 * time.Second, 3 * time.Second, nil},
		{"shorter than the schedule's", time.Second / 2, time.Second, nil},
		{"above MaxRetryAfter", time.Hour, 0, ErrWaitTooLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var times []time.Time
				base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
					times = append(times, time.Now())
					if len(times) == 1 {
						return nil, fmt.Errorf("dial: %w", &waitErr{wait: tc.wait})
					}
					return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
				})
				rt := mustNew(t, base, Policy{Waits: []time.Duration{time.Second}})
				resp, err := post(t, rt, context.Background())
				if tc.reason != nil {
					require.Error(t, err)
					assert.ErrorIs(t, err, tc.reason)
					assert.Len(t, times, 1)
					return
				}
				require.NoError(t, err)
				resp.Body.Close()
				require.Len(t, times, 2)
				assert.Equal(t, tc.gap, times[1].Sub(times[0]))
			})
		})
	}
}

// A provider that accepts the connection and never answers costs one
// AttemptTimeout, not the turn: the attempt is abandoned (its context
// canceled), counts as a failed connection, and the retry answers.
func TestAttemptTimeoutBoundsASilentProvider(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &silentThen{silent: 2}
		var rec recorder
		ctx := withDeadline(t, 10*time.Minute)
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
		st := coordination.NewMemoryStore()
		rt, err := NewCoordinated(base, Policy{Waits: []time.Duration{time.Second}, Reserve: 10 * time.Second, AttemptTimeout: 5 * time.Second}, coordination.Config{ProbeInterval: 5 * time.Second, Store: st})
		require.NoError(t, err)
		ctx := withDeadline(t, time.Minute)
		start := time.Now()
		_, err = post(t, rt, ctx)
		assert.ErrorIs(t, err, ErrNoTimeLeft)
		starts, _ := base.attempts()
		assert.Greater(t, len(starts), 2, "several bounded attempts, not one that ate the turn")
		for _, at := range starts {
			assert.LessOrEqual(t, at.Sub(start), 50*time.Second, "no attempt sent past the deadline less the reserve")
		}
		assert.LessOrEqual(t, time.Since(start), 55*time.Second, "the last attempt ends within its AttemptTimeout")
		f, err := st.Load(context.Background(), "api.example.test", time.Now()) // testURL's host; no credential
		require.NoError(t, err)
		assert.True(t, f.Down(time.Now()), "the key is down")
	})
}

// The body of the attempt that spends the retries is read too: what it
// says names the stop, in the error and in the last attempt's record. A
// spent quota is ErrProviderRefused; a wait stated there above
// MaxRetryAfter (Gemini's RetryInfo) is ErrWaitTooLong, and nobody is
// asked to wait that long; a server's wait past the deadline less the
// reserve is ErrNoTimeLeft, and nobody is asked a question whose yes
// could send nothing.
func TestLastAttemptNamesTheStop(t *testing.T) {
	for _, c := range []struct {
		name     string
		last     testkit.Reply
		deadline time.Duration // 0: none
		want     error
	}{
		{"a spent quota in the body", testkit.OpenAIInsufficientQuota(), 0, ErrProviderRefused},
		{"a wait in the body above MaxRetryAfter", testkit.GeminiQuota("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "10", "600s"), 0, ErrWaitTooLong},
		{"a Retry-After past the deadline less the reserve", testkit.Fail(429, "Retry-After", "55"), time.Minute, ErrNoTimeLeft},
		{"a wait that fits: the person is asked", testkit.Fail(429, "Retry-After", "5"), time.Minute, ErrRetriesSpent},
	} {
		for _, asking := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, OnExhausted set %v", c.name, asking), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					prov := testkit.NewProvider(testkit.Fail(503), c.last)
					var rec recorder
					ask := &asked{answers: []bool{false}}
					p := Policy{Waits: []time.Duration{time.Second}, MaxRetries: 1, Reserve: 10 * time.Second, OnAttempt: rec.on}
					if asking {
						p.OnExhausted = ask.Ask
					}
					resp, err := post(t, mustNew(t, prov, p), withDeadline(t, c.deadline))
					ex := gaveUp(t, resp, err)
					assert.Equal(t, 2, prov.Attempts())
					assert.ErrorIs(t, ex.Reason, c.want)
					assert.ErrorIs(t, rec.last().Stop, c.want, "the last attempt's Stop")
					assert.Equal(t, asking && c.want == ErrRetriesSpent, len(ask.questions()) == 1, "asked only when a yes can be honoured")
				})
			})
		}
	}
}
