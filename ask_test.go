package llmretry

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// secretRequest is a POST whose query and headers carry the canary SECRET.
func secretRequest(t *testing.T, ctx context.Context) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, testURL+"?key=SECRET", strings.NewReader(`{"model":"m"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer SECRET")
	req.Header.Set("X-Api-Key", "SECRET")
	return req
}

// A person answers yes once: the Transport runs another round and the call
// succeeds. The host saw what failed and how often, without credentials;
// a second Answer does not count and does not block.
func TestPersonSaysYes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(503), testkit.Fail(503), testkit.OK())
		person := new(Person)
		seen := make(chan *Question, 1)
		go func() { // the host
			q := <-person.Questions()
			q.Answer(true)
			q.Answer(false) // only the first answer counts
			seen <- q
		}()
		rt := mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}, OnExhausted: person.Ask})
		start := time.Now()
		resp, err := rt.RoundTrip(secretRequest(t, context.Background()))
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, `{"answer":42}`, bodyOf(t, resp))
		assert.Equal(t, 3, prov.Attempts())
		assert.Equal(t, time.Second, time.Since(start), "a yes tries again at once")
		q := <-seen
		assert.Equal(t, 2, q.Exhausted.Attempts)
		assert.Equal(t, "POST https://api.example.test/v1/chat/completions?… failed 2 times; last: 503 Service Unavailable", q.String())
		assert.NotContains(t, q.String(), "SECRET")
	})
}

// No gives up: the last response reaches the caller, body intact.
func TestPersonSaysNo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(503), testkit.Fail(503), testkit.OK())
		person := new(Person)
		go func() { (<-person.Questions()).Answer(false) }()
		resp, err := post(t, mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}, OnExhausted: person.Ask}), context.Background())
		require.NoError(t, err)
		assert.Equal(t, 503, resp.StatusCode)
		assert.Equal(t, "error 503", bodyOf(t, resp))
		assert.Equal(t, 2, prov.Attempts())
	})
}

// A question nobody answers is withdrawn once the call's deadline less its
// reserve has passed (the reserve is the host's): Ask says no, the
// question's Done channel closes, and a late Answer does nothing and does
// not block.
func TestPersonUnansweredQuestionEndsAtTheDeadlineLessTheReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Refused())
		person := new(Person)
		got := make(chan *Question, 1)
		go func() { got <- <-person.Questions() }() // receives, never answers
		ctx := withDeadline(t, 10*time.Minute)
		start := time.Now()
		resp, err := post(t, mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}, MaxRetries: 1, Reserve: time.Second, OnExhausted: person.Ask}), ctx)
		assert.Nil(t, resp)
		var ex *Exhausted
		require.ErrorAs(t, err, &ex)
		assert.Equal(t, 2, ex.Attempts)
		assert.Equal(t, 10*time.Minute-time.Second, time.Since(start).Truncate(time.Millisecond), "waited for the person until the deadline less the reserve")
		q := <-got
		select {
		case <-q.Done():
		default:
			t.Fatal("the withdrawn question's Done channel is not closed")
		}
		q.Answer(true) // too late: ignored, never blocks
		assert.Equal(t, 2, prov.Attempts())
	})
}

// With nobody listening at all, the question is never delivered and the
// call ends with its context. The zero Person works.
func TestPersonNobodyListening(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(429))
		var person Person
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(time.Minute)
			cancel()
		}()
		start := time.Now()
		resp, err := post(t, mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}, OnExhausted: person.Ask}), ctx)
		require.NoError(t, err)
		assert.Equal(t, 429, resp.StatusCode)
		assert.Equal(t, "error 429", bodyOf(t, resp))
		assert.Equal(t, time.Minute, time.Since(start))
		assert.Equal(t, 2, prov.Attempts())
	})
}

// One Person serves many calls at once; each question gets its own answer.
func TestPersonConcurrentCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		person := new(Person)
		const calls = 4
		hostDone := make(chan []string)
		go func() {
			var texts []string
			for range calls {
				q := <-person.Questions()
				texts = append(texts, q.String())
				q.Answer(true)
			}
			hostDone <- texts
		}()
		var wg sync.WaitGroup
		results := make([]error, calls)
		for i := range calls {
			wg.Go(func() {
				failures := 0
				_, results[i] = Do(context.Background(), Policy{Waits: []time.Duration{time.Second}, OnExhausted: person.Ask}, func(context.Context) (int, error) {
					if failures < 2 {
						failures++
						return 0, errors.New("tool busy")
					}
					return 1, nil
				})
			})
		}
		wg.Wait()
		texts := <-hostDone
		for _, err := range results {
			assert.NoError(t, err)
		}
		require.Len(t, texts, calls)
		for _, s := range texts {
			assert.Equal(t, "a call failed 2 times; last: tool busy", s)
		}
	})
}

func TestQuestionAndPersonZeroValues(t *testing.T) {
	var q Question
	q.Answer(true) // does not block or panic
	q.Answer(false)
	assert.Nil(t, q.Done())
	assert.Equal(t, "", q.String())
	var nilQ *Question
	nilQ.Answer(true)
	assert.Nil(t, nilQ.Done())
	assert.Equal(t, "<nil question>", nilQ.String())

	e := &Exhausted{Attempts: 1, Err: errors.New(`Get "https://x.test/v1?key=SECRET&alt=sse": dial tcp: refused`)}
	assert.Equal(t, `a call failed 1 time; last: Get "https://x.test/v1?key=…&alt=sse": dial tcp: refused`, (&Question{Exhausted: e}).String())

	var nilP *Person
	assert.False(t, nilP.Ask(context.Background(), e))
	assert.Nil(t, nilP.Questions())
	var p Person
	first := p.Questions()
	assert.NotNil(t, first, "the zero Person makes its channel")
	assert.True(t, first == p.Questions(), "always the same channel")
	assert.False(t, p.Ask(context.Background(), nil))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.False(t, p.Ask(ctx, e), "an ended context is a no without asking")
}

// A Transport's call and Do run the same rounds: for the same policy,
// deadline and OnExhausted answers, a provider that always fails and a tool that
// always fails see their attempts at the same times, OnExhausted is asked
// after the same attempts, and both stop for the same reason.
func TestRoundsAreTheSameForTransportAndDo(t *testing.T) {
	cases := []struct {
		name     string
		policy   Policy
		deadline time.Duration // 0: none
		answers  []bool        // nil: no OnExhausted
		asked    []int         // the attempts after which OnExhausted is asked
		gaps     []time.Duration
		reason   error
		// waits, if set, are the waits the failures state, in order (the
		// last repeats): a base's error and an operation's error with a
		// RetryAfter method.
		waits []time.Duration
	}{
		{
			name:   "no OnExhausted",
			policy: Policy{Waits: []time.Duration{time.Second, 2 * time.Second}},
			gaps:   []time.Duration{time.Second, 2 * time.Second},
			reason: ErrRetriesSpent,
		},
		{
			name:    "no at once",
			policy:  Policy{Waits: []time.Duration{time.Second}},
			answers: []bool{false},
			asked:   []int{2},
			gaps:    []time.Duration{time.Second},
			reason:  ErrRetriesSpent,
		},
		{
			name:    "two yeses, then no",
			policy:  Policy{Waits: []time.Duration{time.Second, 2 * time.Second}},
			answers: []bool{true, true, false},
			asked:   []int{3, 6, 9},
			gaps:    []time.Duration{time.Second, 2 * time.Second, 0, time.Second, 2 * time.Second, 0, time.Second, 2 * time.Second},
			reason:  ErrRetriesSpent,
		},
		{
			// Attempts at 0, 10, 20 s | yes | 20, 30, 40 | yes | 40, 50,
			// 60 | yes | 60 at once (60 s left: the reserve), then no time
			// for the next wait.
			name:     "yes under a deadline",
			policy:   Policy{Waits: []time.Duration{10 * time.Second}, MaxRetries: 2, Reserve: time.Minute},
			deadline: 2 * time.Minute,
			answers:  []bool{true},
			asked:    []int{3, 6, 9},
			gaps:     []time.Duration{10 * time.Second, 10 * time.Second, 0, 10 * time.Second, 10 * time.Second, 0, 10 * time.Second, 10 * time.Second, 0},
			reason:   ErrNoTimeLeft,
		},
		{
			// Attempts at 0, 5 s | yes | 10 s (the server's 5 s hold after
			// a yes too), 15 s | no.
			name:    "a yes keeps the server's wait",
			policy:  Policy{Waits: []time.Duration{time.Second}},
			waits:   []time.Duration{5 * time.Second},
			answers: []bool{true, false},
			asked:   []int{2, 4},
			gaps:    []time.Duration{5 * time.Second, 5 * time.Second, 5 * time.Second},
			reason:  ErrRetriesSpent,
		},
		{
			// The retries are spent at attempt 2, but its stated wait is
			// above MaxRetryAfter: nobody is asked to wait that long.
			name:    "a wait too long is no question",
			policy:  Policy{Waits: []time.Duration{time.Second}, MaxRetryAfter: 10 * time.Second},
			waits:   []time.Duration{5 * time.Second, 20 * time.Second},
			answers: []bool{true},
			gaps:    []time.Duration{5 * time.Second},
			reason:  ErrWaitTooLong,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// Each runs with a context of its own, its deadline counted
				// from its start.
				run := func(name string, call func(context.Context, Policy) error, attempts func() int, gaps func() []time.Duration) {
					ctx := withDeadline(t, tc.deadline)
					p := tc.policy
					var ask *asked
					if tc.answers != nil {
						ask = &asked{answers: tc.answers}
						p.OnExhausted = ask.Ask
					}
					err := call(ctx, p)
					var ex *Exhausted
					require.ErrorAs(t, err, &ex, name)
					assert.ErrorIs(t, ex.Reason, tc.reason, name)
					assert.Equal(t, len(tc.gaps)+1, attempts(), name)
					assert.Equal(t, len(tc.gaps)+1, ex.Attempts, name)
					assert.Equal(t, tc.gaps, gaps(), name)
					if ask == nil {
						return
					}
					var after []int
					for _, q := range ask.questions() {
						after = append(after, q.Attempts)
						assert.Equal(t, ErrRetriesSpent, q.Reason, name)
					}
					assert.Equal(t, tc.asked, after, name)
				}

				replies, errs := []testkit.Reply{testkit.Refused()}, []error{errBusy}
				if tc.waits != nil {
					replies, errs = nil, nil
					for _, w := range tc.waits {
						replies = append(replies, testkit.Reply{Err: &waitErr{wait: w}})
						errs = append(errs, &waitErr{wait: w})
					}
				}
				prov := testkit.NewProvider(replies...)
				run("Transport", func(ctx context.Context, p Policy) error {
					resp, err := post(t, mustNew(t, prov, p), ctx)
					assert.Nil(t, resp)
					return err
				}, prov.Attempts, prov.Gaps)

				tl := &tool{script: errs}
				run("Do", func(ctx context.Context, p Policy) error {
					_, err := Do(ctx, p, tl.call)
					return err
				}, tl.calls, tl.gaps)
			})
		})
	}
}
