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
		prov := newProvider(fail(503), fail(503), ok)
		person := NewPerson()
		seen := make(chan *Question, 1)
		go func() { // the host
			q := <-person.Questions()
			q.Answer(true)
			q.Answer(false) // only the first answer counts
			seen <- q
		}()
		rt := mustNew(t, prov.mock, Policy{Waits: []time.Duration{time.Second}, OnExhausted: person})
		start := time.Now()
		resp, err := rt.RoundTrip(secretRequest(t, context.Background()))
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, `{"answer":42}`, bodyOf(t, resp))
		assert.Equal(t, 3, prov.attempts())
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
		prov := newProvider(fail(503), fail(503), ok)
		person := NewPerson()
		go func() { (<-person.Questions()).Answer(false) }()
		resp, err := post(t, mustNew(t, prov.mock, Policy{Waits: []time.Duration{time.Second}, OnExhausted: person}), context.Background())
		require.NoError(t, err)
		assert.Equal(t, 503, resp.StatusCode)
		assert.Equal(t, "error 503", bodyOf(t, resp))
		assert.Equal(t, 2, prov.attempts())
	})
}

// A question nobody answers ends with the asking call's context: Ask says
// no at once, the question's Done channel closes, and a late Answer does
// nothing and does not block.
func TestPersonUnansweredQuestionEndsWithTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := newProvider(refused)
		person := NewPerson()
		got := make(chan *Question, 1)
		go func() { got <- <-person.Questions() }() // receives, never answers
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		start := time.Now()
		resp, err := post(t, mustNew(t, prov.mock, Policy{Waits: []time.Duration{time.Second}, MaxRetries: 1, Reserve: time.Second, OnExhausted: person}), ctx)
		assert.Nil(t, resp)
		var ex *Exhausted
		require.ErrorAs(t, err, &ex)
		assert.Equal(t, 2, ex.Attempts)
		assert.Equal(t, 10*time.Minute, time.Since(start), "waited for the person until the deadline")
		q := <-got
		select {
		case <-q.Done():
		default:
			t.Fatal("the withdrawn question's Done channel is not closed")
		}
		q.Answer(true) // too late: ignored, never blocks
		assert.Equal(t, 2, prov.attempts())
	})
}

// With nobody listening at all, the question is never delivered and the
// call ends with its context. The zero Person works.
func TestPersonNobodyListening(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := newProvider(fail(429))
		var person Person
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(time.Minute)
			cancel()
		}()
		start := time.Now()
		resp, err := post(t, mustNew(t, prov.mock, Policy{Waits: []time.Duration{time.Second}, OnExhausted: &person}), ctx)
		require.NoError(t, err)
		assert.Equal(t, 429, resp.StatusCode)
		assert.Equal(t, "error 429", bodyOf(t, resp))
		assert.Equal(t, time.Minute, time.Since(start))
		assert.Equal(t, 2, prov.attempts())
	})
}

// One Person serves many calls at once; each question gets its own answer.
func TestPersonConcurrentCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		person := NewPerson()
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
				_, results[i] = Do(context.Background(), Policy{Waits: []time.Duration{time.Second}, OnExhausted: person}, func(context.Context) (int, error) {
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
