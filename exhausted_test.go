package llmretry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
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

// Without OnExhausted, the last result is returned when retries run out:
// the provider's response with a nil error, or an *Exhausted error that
// wraps the last transport error.
func TestExhaustedWithoutOnExhaustedReturnsTheLastResult(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(503), testkit.Fail(502))
		resp, err := post(t, mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}}), context.Background())
		require.NoError(t, err)
		assert.Equal(t, 502, resp.StatusCode)
		assert.Equal(t, "error 502", bodyOf(t, resp))
		assert.Equal(t, 2, prov.Attempts())

		prov = testkit.NewProvider(testkit.Fail(503), testkit.Refused())
		resp, err = post(t, mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}}), context.Background())
		assert.Nil(t, resp)
		var ex *Exhausted
		require.ErrorAs(t, err, &ex)
		assert.Equal(t, 2, ex.Attempts)
		assert.Nil(t, ex.Response)
		assert.ErrorIs(t, err, syscall.ECONNREFUSED)
		var op *net.OpError
		assert.ErrorAs(t, err, &op, "errors.As reaches the cause")
		assert.Equal(t, testURL, ex.Request.URL.String(), "the caller's request")
	})
}

// OnExhausted is asked once per round with the attempts so far and the last
// result. A yes sends the next attempt at once (the person who answered
// has waited already), then runs the schedule's retries again from
// Waits[0], with attempt numbers that keep counting; no returns the last
// response with its body readable.
func TestOnExhaustedYesTriesAgainAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(503))
		var rec recorder
		ask := &asked{answers: []bool{true, false}}
		rt := mustNew(t, prov, Policy{Waits: []time.Duration{time.Second, 2 * time.Second}, OnAttempt: rec.on, OnExhausted: ask.Ask})
		start := time.Now()
		resp, err := post(t, rt, context.Background())
		require.NoError(t, err)
		assert.Equal(t, 503, resp.StatusCode)
		assert.Equal(t, "error 503", bodyOf(t, resp), "the last response's body survives a no")
		// Round 1: attempts at 0, 1, 3 s | yes | round 2: 3 s at once,
		// then 4, 6 s | no.
		assert.Equal(t, 6, prov.Attempts())
		assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 0, time.Second, 2 * time.Second}, prov.Gaps())
		assert.Equal(t, 6*time.Second, time.Since(start))

		q := ask.questions()
		require.Len(t, q, 2, "asked once per round")
		assert.Equal(t, 3, q[0].Attempts)
		assert.Equal(t, 6, q[1].Attempts, "the round after a yes is as long as the first")
		for _, e := range q {
			require.NotNil(t, e.Response)
			assert.Equal(t, 503, e.Response.StatusCode)
			assert.NoError(t, e.Err)
			assert.Equal(t, testURL, e.Request.URL.String())
		}
		assert.Equal(t, []time.Time{start.Add(3 * time.Second), start.Add(6 * time.Second)}, ask.at, "asked as soon as a round is spent")

		require.Len(t, rec.attempts, 6)
		for i, a := range rec.attempts {
			assert.Equal(t, i+1, a.N, "numbers continue across rounds")
		}
		// The last attempt of a round says 0: no wait follows it.
		assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 0, time.Second, 2 * time.Second, 0}, rec.retryIns())
	})
}

// A yes does not cut short a wait the server asked for: the round's first
// attempt goes when the last answer's Retry-After ends, not at once.
func TestOnExhaustedYesKeepsTheServersWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(429, "Retry-After", "5"))
		ask := &asked{answers: []bool{true, false}}
		rt := mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}, OnExhausted: ask.Ask})
		start := time.Now()
		resp, err := post(t, rt, context.Background())
		require.NoError(t, err)
		resp.Body.Close()
		// Round 1: 0, 5 s | yes at 5 s | round 2: 10 s (the server's 5 s),
		// 15 s | no.
		assert.Equal(t, []time.Duration{5 * time.Second, 5 * time.Second, 5 * time.Second}, prov.Gaps())
		assert.Equal(t, []time.Time{start.Add(5 * time.Second), start.Add(15 * time.Second)}, ask.at)
	})
}

// The issue's own example: Waits 1 s, 1 s and no deadline: the person is
// asked after attempt 3; a yes sends attempts 4 (at once), 5 and 6, and the
// person is asked again after 6.
func TestOnExhaustedYesRoundIsAsLongAsTheFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(503))
		ask := &asked{answers: []bool{true, false}}
		rt := mustNew(t, prov, Policy{Waits: []time.Duration{time.Second, time.Second}, OnExhausted: ask.Ask})
		start := time.Now()
		_, err := post(t, rt, context.Background())
		require.NoError(t, err)
		q := ask.questions()
		require.Len(t, q, 2)
		assert.Equal(t, []int{3, 6}, []int{q[0].Attempts, q[1].Attempts})
		assert.Equal(t, []time.Duration{time.Second, time.Second, 0, time.Second, time.Second}, prov.Gaps())
		assert.Equal(t, []time.Time{start.Add(2 * time.Second), start.Add(4 * time.Second)}, ask.at)
	})
}

// OnExhausted sees the last error when the last attempt got no response; a
// no then returns an *Exhausted error that counts every attempt.
func TestOnExhaustedSeesTheLastError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Refused())
		ask := &asked{answers: []bool{true, false}}
		resp, err := post(t, mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}, OnExhausted: ask.Ask}), context.Background())
		assert.Nil(t, resp)
		var ex *Exhausted
		require.ErrorAs(t, err, &ex)
		assert.Equal(t, 4, ex.Attempts)
		assert.ErrorIs(t, err, syscall.ECONNREFUSED)
		q := ask.questions()
		require.Len(t, q, 2)
		assert.Equal(t, []int{2, 4}, []int{q[0].Attempts, q[1].Attempts})
		assert.Nil(t, q[1].Response)
		assert.ErrorIs(t, q[1].Err, syscall.ECONNREFUSED)
	})
}

// Rounds after a yes still obey the deadline/reserve rule: OnExhausted is
// not asked when a round stops for the deadline rather than for running out.
func TestOnExhaustedRoundsKeepTheReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(503))
		ask := &asked{answers: []bool{true}}
		rt := mustNew(t, prov, Policy{Waits: []time.Duration{10 * time.Second}, MaxRetries: 2, Reserve: time.Minute, OnExhausted: ask.Ask})
		ctx := withDeadline(t, 2*time.Minute)
		start := time.Now()
		resp, err := post(t, rt, ctx)
		require.NoError(t, err)
		assert.Equal(t, 503, resp.StatusCode)
		// Attempts at 0, 10, 20 s | yes | 20, 30, 40 | yes | 40, 50, 60 |
		// yes | 60 (at once: 60 s are left, the reserve) | a wait after it
		// would leave 50 s < 60 s reserve: the round stops for the
		// deadline, and nobody is asked about that.
		assert.Equal(t, 10, prov.Attempts())
		assert.Equal(t, 60*time.Second, time.Since(start))
		assert.Len(t, ask.questions(), 3)
		deadline, _ := ctx.Deadline()
		assert.GreaterOrEqual(t, time.Until(deadline), time.Minute)
	})
}

// A context that ends while OnExhausted blocks counts as no: RoundTrip
// returns as soon as it ends, with the last result, and the response's
// body is still the caller's to read. An OnExhausted that says yes after the
// context ended is overruled.
func TestContextEndingWhileAsking(t *testing.T) {
	for _, answer := range []bool{false, true} {
		t.Run(fmt.Sprintf("asker says %v", answer), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(testkit.Fail(503))
				var asks int
				blocking := func(ctx context.Context, _ *Exhausted) bool {
					asks++
					<-ctx.Done()
					return answer
				}
				ctx, cancel := context.WithCancel(context.Background())
				go func() {
					time.Sleep(time.Hour)
					cancel()
				}()
				start := time.Now()
				resp, err := post(t, mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}, OnExhausted: blocking}), ctx)
				require.NoError(t, err)
				assert.Equal(t, time.Hour, time.Since(start), "returns when the context ends")
				assert.Equal(t, 1, asks)
				assert.Equal(t, 2, prov.Attempts(), "no attempt after the context ended")
				assert.Equal(t, 503, resp.StatusCode)
				assert.Equal(t, "error 503", bodyOf(t, resp))
			})
		})
	}
}

// A deadline that passes while asking counts as no as well: the question
// is withdrawn at the deadline less the reserve, when a yes could send
// nothing more.
func TestDeadlineWhileAsking(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Refused())
		blocking := func(ctx context.Context, _ *Exhausted) bool {
			<-ctx.Done()
			return true
		}
		ctx := withDeadline(t, 5*time.Minute)
		start := time.Now()
		resp, err := post(t, mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}, MaxRetries: 1, Reserve: time.Second, OnExhausted: blocking}), ctx)
		assert.Nil(t, resp)
		assert.Equal(t, 5*time.Minute-time.Second, time.Since(start).Truncate(time.Millisecond))
		var ex *Exhausted
		require.ErrorAs(t, err, &ex)
		assert.Equal(t, 2, ex.Attempts)
		assert.ErrorIs(t, err, syscall.ECONNREFUSED, "the last attempt's error, not the context's")
		assert.Equal(t, 2, prov.Attempts())
	})
}

func TestExhaustedError(t *testing.T) {
	u, err := url.Parse("https://user:pw@generativelanguage.googleapis.com/v1beta/models/m:generateContent?key=SECRET")
	require.NoError(t, err)
	req := &http.Request{Method: http.MethodPost, URL: u}
	cause := errors.New("connection refused")
	cases := []struct {
		name string
		e    *Exhausted
		want string
	}{
		{"no time left", &Exhausted{Request: req, Attempts: 3, Reason: ErrNoTimeLeft, Err: cause}, "llmretry: gave up after 3 attempts, no time left before the deadline less the reserve: connection refused"},
		{"response", &Exhausted{Request: req, Attempts: 1, Reason: ErrWaitTooLong, Response: &http.Response{Status: "429 Too Many Requests"}}, "llmretry: gave up after 1 attempt, the server asked to wait longer than MaxRetryAfter: 429 Too Many Requests"},
		{"spent", &Exhausted{Attempts: 2, Reason: ErrRetriesSpent, Err: cause}, "llmretry: gave up after 2 attempts, retries spent: connection refused"},
		{"refused", &Exhausted{Attempts: 1, Reason: ErrProviderRefused, Response: &http.Response{Status: "429 Too Many Requests"}}, "llmretry: gave up after 1 attempt, the provider refused: waiting will not help: 429 Too Many Requests"},
		{"not retryable at once", &Exhausted{Attempts: 1, Reason: ErrNotRetryable, Err: errors.New("bad args")}, "llmretry: not retryable: bad args"},
		{"not retryable later", &Exhausted{Attempts: 3, Reason: ErrNotRetryable, Err: errors.New("bad args")}, "llmretry: not retryable, after 3 attempts: bad args"},
		{"context", &Exhausted{Attempts: 2, Reason: context.DeadlineExceeded, Err: context.DeadlineExceeded}, "llmretry: gave up after 2 attempts: context deadline exceeded"},
		{"zero", &Exhausted{}, "llmretry: gave up after 0 attempts: no result"},
		// A nested http.Client's error quotes the whole URL: redacted.
		{"url.Error", &Exhausted{Request: req, Attempts: 2, Reason: ErrRetriesSpent, Err: &url.Error{Op: "Post", URL: u.Redacted(), Err: cause}}, `llmretry: gave up after 2 attempts, retries spent: Post "https://…:xxxxx@generativelanguage.googleapis.com/v1beta/models/m:generateContent?…": connection refused`},
		{"credential in text", &Exhausted{Attempts: 1, Reason: ErrNotRetryable, Err: errors.New("tool: GET /v1/search?api_key=SECRET: 502")}, "llmretry: not retryable: tool: GET /v1/search?api_key=… 502"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, c.e.Error())
			assert.NotContains(t, c.e.Error(), "SECRET")
			assert.NotContains(t, c.e.Error(), "pw")
			assert.NotContains(t, c.e.Error(), "generativelanguage.googleapis.com/v1beta/models/m:generateContent?…:", "the URL is net/http's to quote")
			if c.e.Reason != nil {
				assert.ErrorIs(t, c.e, c.e.Reason)
			}
			if c.e.Err != nil {
				assert.ErrorIs(t, c.e, c.e.Err)
			}
		})
	}
	assert.Empty(t, (&Exhausted{}).Unwrap())
	assert.Equal(t, []error{context.Canceled}, (&Exhausted{Reason: context.Canceled, Err: context.Canceled}).Unwrap(), "the context's error once")
}

// GaveUp is nil for what did not give up, and for what did not come
// through llmretry.
func TestGaveUpNil(t *testing.T) {
	assert.Nil(t, GaveUp(nil))
	assert.Nil(t, GaveUp(promoted{}), "a Response behind a nil embedded pointer")
	assert.Nil(t, GaveUp(fmt.Errorf("wrapped: %w", promoted{})))
	assert.Nil(t, GaveUp(viaUnexported{&unexportedEmbed{Response: &http.Response{StatusCode: 502}}}))
	assert.Nil(t, GaveUp(&http.Response{StatusCode: 502}))
	req, err := http.NewRequest(http.MethodGet, testURL, nil)
	require.NoError(t, err)
	assert.Nil(t, GaveUp(&http.Response{StatusCode: 502, Request: req}))
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(502), testkit.OK())
		resp, err := post(t, mustNew(t, prov, Policy{}), context.Background())
		require.NoError(t, err)
		assert.Nil(t, GaveUp(resp), "an answer after a retry")
		assert.Equal(t, 200, resp.StatusCode)
	})
}

// sdkError is shaped as openai-go's and anthropic-sdk-go's *Error: the
// failure response in a field named Response.
type sdkError struct {
	StatusCode int
	Response   *http.Response
}

func (e *sdkError) Error() string { return "API error: " + http.StatusText(e.StatusCode) }

// hidden carries a response in an unexported field, which GaveUp must not
// read (nor panic on).
type hidden struct{ response *http.Response }

func (hidden) Error() string { return "hidden" }

// promoted reaches a Response field through an embedded pointer, which
// may be nil; viaUnexported through an unexported embedded type. GaveUp
// reads neither a field behind a nil pointer nor one it may not read (nor
// panics on them).
type (
	promoted        struct{ *sdkError }
	viaUnexported   struct{ *unexportedEmbed }
	unexportedEmbed struct{ Response *http.Response }
)

func (promoted) Error() string      { return "promoted" }
func (viaUnexported) Error() string { return "via unexported" }

// GaveUp reads the record off whatever the caller holds: the response, the
// error an http.Client returned, or an SDK's error that carries the
// response, wrapped or not.
func TestGaveUpFromWhatTheCallerHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(503), testkit.Fail(503))
		client := &http.Client{Transport: mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}})}
		req, err := http.NewRequest(http.MethodPost, testURL, strings.NewReader(`{}`))
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		want := GaveUp(resp)
		require.NotNil(t, want)
		assert.Equal(t, ErrRetriesSpent, want.Reason)
		assert.Equal(t, 2, want.Attempts)

		sdk := &sdkError{StatusCode: 503, Response: resp}
		assert.Same(t, want, GaveUp(sdk), "the SDK's error carries the response")
		assert.Same(t, want, GaveUp(fmt.Errorf("turn 3: %w", sdk)), "wrapped")
		assert.Same(t, want, GaveUp(errors.Join(errors.New("other"), sdk)), "joined")
		assert.Nil(t, GaveUp(&sdkError{StatusCode: 503}), "no response in it")
		assert.Nil(t, GaveUp(hidden{response: resp}), "an unexported field is not read")
		assert.Nil(t, GaveUp(*resp), "a value of another type")
		assert.Nil(t, GaveUp((*http.Response)(nil)))
		assert.Nil(t, GaveUp((*sdkError)(nil)))
	})
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Refused(), testkit.Refused())
		client := &http.Client{Transport: mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}})}
		req, err := http.NewRequest(http.MethodPost, testURL, strings.NewReader(`{}`))
		require.NoError(t, err)
		_, err = client.Do(req)
		require.Error(t, err)
		ex := GaveUp(err)
		require.NotNil(t, ex, "through the http.Client's *url.Error")
		assert.Equal(t, ErrRetriesSpent, ex.Reason)
		assert.Equal(t, 2, ex.Attempts)
	})
}

// routeSecret is a fallback route's own credential.
const routeSecret = "ROUTE-SECRET-91c2"

// A call whose last attempt went to a fallback route: the route's own
// credentials (its URL user information, its Authorization), quoted by
// its base's error, are blanked in every text the call renders: each
// attempt's record, the Question a Person is asked and the Exhausted error
// RoundTrip returns (redacted with the request the last attempt sent, not
// only the caller's).
func TestFallbackRouteCredentialsNeverInTheText(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		route := func(r *http.Request) (*http.Request, error) {
			u := *r.URL
			u.Host = "fallback.example.test"
			u.User = url.UserPassword("svc", routeSecret)
			r.URL, r.Host = &u, ""
			r.Header.Set("Authorization", "Bearer "+routeSecret)
			return r, nil
		}
		prim := testkit.NewProvider(testkit.Fail(503))
		// The fallback sits behind a proxy library whose error quotes the
		// URL it dialled (user information and all) and the credential
		// it was refused with.
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Host == "api.example.test" {
				return prim.RoundTrip(r)
			}
			closeBody(r)
			return nil, fmt.Errorf("proxy: dial %s: connection refused (sent %s)", r.URL, r.Header.Get("Authorization"))
		})
		var mu sync.Mutex
		var texts []string
		keep := func(s string) { mu.Lock(); texts = append(texts, s); mu.Unlock() }
		person := new(Person)
		done := make(chan struct{})
		go func() {
			for {
				select {
				case q := <-person.Questions():
					keep("question: " + q.String())
					q.Answer(false)
				case <-done:
					return
				}
			}
		}()
		p := Policy{
			Waits:       []time.Duration{time.Second, time.Second},
			Fallback:    []Route{route},
			OnExhausted: person.Ask,
			OnAttempt:   func(a Attempt) { keep("attempt: " + a.String()) },
		}
		req, err := http.NewRequest(http.MethodPost, testURL, strings.NewReader(`{"model":"m"}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer primary-key")
		resp, err := mustNew(t, base, p).RoundTrip(req)
		close(done)
		require.Nil(t, resp)
		require.Error(t, err)
		keep("error: " + err.Error())
		routeAttempts := 0
		for _, s := range texts {
			if strings.Contains(s, "[route 1]") {
				routeAttempts++
			}
			assert.NotContains(t, s, routeSecret, "the route's credential leaked")
		}
		require.NotZero(t, routeAttempts, "the call reached the fallback route")
	})
}
