package interop

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	antoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// anthropic-sdk-go v2 under llmretry, with the SDK's own retries off: a
// 502 from the edge, then a 429 asking for 20 s, then the answer. The SDK
// gives Messages.New a 10-minute per-attempt deadline, which llmretry sees
// as the request's deadline; the waits fit it with the reserve, so the
// schedule runs as written: 5 s, then 20 s (the server's wait).
func TestAnthropicRidesOutOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.BadGateway(), testkit.AnthropicRateLimited("20"), testkit.AnthropicMessage("Hello! How can I help?"))
		var rec recorder
		rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{5 * time.Second, 10 * time.Second}, MaxRetries: 2, OnAttempt: rec.on})
		client := anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0))

		start := time.Now()
		msg, err := client.Messages.New(context.Background(), anthropicParams())
		require.NoError(t, err)
		require.Len(t, msg.Content, 1)
		assert.Equal(t, "Hello! How can I help?", msg.Content[0].Text)
		assert.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason)

		assert.Equal(t, 3, prov.Attempts(), "exactly the policy's attempts")
		assert.Equal(t, []time.Duration{5 * time.Second, 20 * time.Second}, prov.Gaps())
		assert.Equal(t, 25*time.Second, time.Since(start))
		assert.Equal(t, []int{502, 429, 200}, rec.statuses())
		assert.Equal(t, []time.Duration{5 * time.Second, 20 * time.Second, 0}, rec.retryIns())
		assert.Equal(t, []string{"0", "0", "0"}, prov.HeaderValues("X-Stainless-Retry-Count"), "the SDK itself never retried")
		calls := prov.Received()
		for _, c := range calls {
			assert.Equal(t, "/v1/messages", c.Path)
			// v2.15 sends the key as a bearer token; older releases used X-Api-Key.
			assert.Contains(t, c.Header.Get("Authorization")+c.Header.Get("X-Api-Key"), dummyAnthropicKey)
			assert.Equal(t, "600", c.Header.Get("X-Stainless-Timeout"), "the SDK's 10-minute per-attempt deadline")
			assert.Equal(t, calls[0].Body, c.Body, "every attempt carries the whole body")
		}
	})
}

// Messages.NewStreaming: anthropic-sdk-go marks a stream only with
// "stream": true in the body.
func TestAnthropicStream(t *testing.T) {
	parts := []string{"Hel", "lo", "! How", " can I", " help?"}

	collect := anthropicStreamText
	overloaded := testkit.AnthropicOverloaded()

	t.Run("succeeds over the wire", func(t *testing.T) {
		prov := testkit.NewProvider(testkit.AnthropicStream(parts...))
		srv := httptest.NewServer(prov)
		defer srv.Close()
		rt := retrying(t, srv.Client().Transport, llmretry.Policy{})
		text, err := collect(t, anthropicClient(srv.URL+"/", rt))
		require.NoError(t, err)
		assert.Equal(t, "Hello! How can I help?", text, "every delta arrived")
		assert.Equal(t, 1, prov.Attempts())
		assert.True(t, llmretry.IsStream(prov.Received()[0].Request(t)), "llmretry sees the request as a stream")
	})

	t.Run("error mid-stream is never retried, even with RetryStreams", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// Anthropic reports overload after a 200 as an SSE error event.
			broken := testkit.AnthropicStream(parts...)
			broken.Events = append(append([]string(nil), broken.Events[:4]...),
				"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"},\"request_id\":\"req_011CSHpZ8hP3aT6jB2mW9xQe\"}\n\n")
			prov := testkit.NewProvider(broken, testkit.AnthropicStream(parts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: true})
			text, err := collect(t, anthropicClient(fakeAnthropicURL, rt)) // SDK retries left on too
			var apiErr *anthropic.Error
			require.ErrorAs(t, err, &apiErr, "the SDK surfaces the event as its own error")
			assert.EqualValues(t, "overloaded_error", apiErr.Type())
			assert.Equal(t, "Hel", text, "what arrived before the error stays delivered")
			assert.Equal(t, 1, prov.Attempts(), "a stream that started is committed: nobody resends it")
		})
	})

	t.Run("503 first is not retried by default", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.AnthropicError(503, "api_error", "Service unavailable"), testkit.AnthropicStream(parts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}})
			_, err := collect(t, anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0)))
			var apiErr *anthropic.Error
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, 503, apiErr.StatusCode)
			assert.Equal(t, "Service unavailable", apiErr.Message)
			assert.Equal(t, 1, prov.Attempts(), "the SDK got the 503 from the first attempt")
		})
	})

	t.Run("503 first is retried with RetryStreams", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.AnthropicError(503, "api_error", "Service unavailable"), overloaded, testkit.AnthropicStream(parts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second, 4 * time.Second}, RetryStreams: true})
			text, err := collect(t, anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0)))
			require.NoError(t, err)
			assert.Equal(t, "Hello! How can I help?", text)
			assert.Equal(t, 3, prov.Attempts(), "503, then 529 overloaded, then the stream")
			assert.Equal(t, []time.Duration{2 * time.Second, 4 * time.Second}, prov.Gaps())
		})
	})
}

// A 400 is final for both layers: one attempt with the SDK's own retries
// left on, and the caller gets *anthropic.Error with Anthropic's message.
func TestAnthropicBadRequest(t *testing.T) {
	prov := testkit.NewProvider(testkit.AnthropicError(400, "invalid_request_error", "max_tokens: 1000000 > 64000, which is the maximum allowed number of output tokens for claude-sonnet-4-5-20250929"))
	srv := httptest.NewServer(prov)
	defer srv.Close()
	rt := retrying(t, srv.Client().Transport, llmretry.Policy{Waits: []time.Duration{time.Second}})
	client := anthropicClient(srv.URL+"/", rt)

	_, err := client.Messages.New(context.Background(), anthropicParams())
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	assert.Equal(t, "max_tokens: 1000000 > 64000, which is the maximum allowed number of output tokens for claude-sonnet-4-5-20250929", apiErr.Message)
	assert.EqualValues(t, "invalid_request_error", apiErr.Type())
	assert.Equal(t, "req_011CSHoEeqs5C35K2UUqR7Fy", apiErr.RequestID)
	assert.False(t, errors.As(err, new(*llmretry.Exhausted)))
	assert.Equal(t, 1, prov.Attempts())
}

// Messages.New gives every attempt a 10-minute deadline of its own
// (X-Stainless-Timeout: 600), and llmretry takes the request's deadline as
// the end of the ride: with the default 60 s reserve, waits that would end
// after 9 minutes are not taken, and the last 529 is returned at once,
// marked X-Should-Retry: false. option.WithRequestTimeout (or a context
// deadline shorter than it) is how to give llmretry the turn's real budget.
func TestAnthropicPerAttemptDeadlineBoundsTheRide(t *testing.T) {
	overloaded := testkit.AnthropicOverloaded()
	policy := llmretry.Policy{Waits: []time.Duration{2 * time.Minute, 4 * time.Minute, 8 * time.Minute}, MaxRetries: 3}

	t.Run("default 10-minute attempt timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(overloaded)
			client := anthropicClient(fakeAnthropicURL, retrying(t, prov, policy), antoption.WithMaxRetries(0))
			start := time.Now()
			_, err := client.Messages.New(context.Background(), anthropicParams())
			var apiErr *anthropic.Error
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, 529, apiErr.StatusCode)
			assert.Equal(t, "false", apiErr.Response.Header.Get("X-Should-Retry"))
			assert.Equal(t, 3, prov.Attempts(), "the 8-minute wait would end past 10 min - 60 s")
			assert.Equal(t, []time.Duration{2 * time.Minute, 4 * time.Minute}, prov.Gaps())
			assert.Equal(t, 6*time.Minute, time.Since(start), "given up at once, not slept into the deadline")
		})
	})

	t.Run("WithRequestTimeout(30m)", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(overloaded, overloaded, overloaded, testkit.AnthropicMessage("Hello!"))
			client := anthropicClient(fakeAnthropicURL, retrying(t, prov, policy),
				antoption.WithMaxRetries(0), antoption.WithRequestTimeout(30*time.Minute))
			msg, err := client.Messages.New(context.Background(), anthropicParams())
			require.NoError(t, err)
			assert.Equal(t, "Hello!", msg.Content[0].Text)
			assert.Equal(t, []time.Duration{2 * time.Minute, 4 * time.Minute, 8 * time.Minute}, prov.Gaps())
		})
	})
}
