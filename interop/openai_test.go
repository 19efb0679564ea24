package interop

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/openai/openai-go/v3"
	oaoption "github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openai-go v3 under llmretry, with the SDK's own retries off: a 502 from
// the edge, then a 429 asking for 20 s, then the answer. llmretry makes
// the three attempts its policy allows, waiting 5 s and then 20 s (the
// server's wait beats the schedule's 10 s), and the SDK sees only the
// answer.
func TestOpenAIRidesOutOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.BadGateway(), testkit.OpenAIRateLimited("20"), testkit.OpenAIChatCompletion("Hello! How can I help?"))
		var rec recorder
		rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{5 * time.Second, 10 * time.Second}, OnAttempt: rec.on})
		client := openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0))

		start := time.Now()
		got, err := client.Chat.Completions.New(context.Background(), openAIParams())
		require.NoError(t, err)
		require.Len(t, got.Choices, 1)
		assert.Equal(t, "Hello! How can I help?", got.Choices[0].Message.Content)

		assert.Equal(t, 3, prov.Attempts(), "exactly the policy's attempts")
		assert.Equal(t, []time.Duration{5 * time.Second, 20 * time.Second}, prov.Gaps())
		assert.Equal(t, 25*time.Second, time.Since(start))
		assert.Equal(t, []int{502, 429, 200}, rec.statuses())
		assert.Equal(t, []time.Duration{5 * time.Second, 20 * time.Second, 0}, rec.retryIns())
		// Every attempt is the SDK's first: the SDK itself never retried.
		assert.Equal(t, []string{"0", "0", "0"}, prov.HeaderValues("X-Stainless-Retry-Count"))
		calls := prov.Received()
		for _, c := range calls {
			assert.Equal(t, "/v1/chat/completions", c.Path)
			assert.Equal(t, "Bearer "+dummyOpenAIKey, c.Header.Get("Authorization"))
			assert.Equal(t, calls[0].Body, c.Body, "every attempt carries the whole body")
		}
		assert.Contains(t, calls[0].Body, `"model":"gpt-4o-mini"`)
	})
}

// Chat.Completions.NewStreaming: openai-go marks a stream only with
// "stream": true in the body (Accept stays application/json).
func TestOpenAIStream(t *testing.T) {
	parts := []string{"Hel", "lo", "! How", " can I", " help?"}

	// collect reads the whole stream and returns the text and the error.
	collect := func(t *testing.T, client openai.Client) (string, error) {
		stream := client.Chat.Completions.NewStreaming(context.Background(), openAIParams())
		defer stream.Close()
		var text strings.Builder
		for stream.Next() {
			for _, c := range stream.Current().Choices {
				text.WriteString(c.Delta.Content)
			}
		}
		return text.String(), stream.Err()
	}

	t.Run("succeeds over the wire", func(t *testing.T) {
		prov := testkit.NewProvider(testkit.OpenAIChatStream(parts...))
		srv := httptest.NewServer(prov)
		defer srv.Close()
		rt := retrying(t, srv.Client().Transport, llmretry.Policy{})
		text, err := collect(t, openAIClient(srv.URL+"/v1/", rt))
		require.NoError(t, err)
		assert.Equal(t, "Hello! How can I help?", text, "every chunk arrived")
		assert.Equal(t, 1, prov.Attempts())
		assert.True(t, llmretry.IsStream(prov.Received()[0].Request(t)), "llmretry sees the request as a stream")
	})

	t.Run("503 first is not retried by default", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.OpenAIOverloaded(), testkit.OpenAIChatStream(parts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}})
			_, err := collect(t, openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0)))
			var apiErr *openai.Error
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, 503, apiErr.StatusCode)
			assert.Equal(t, "The server is overloaded or not ready yet.", apiErr.Message)
			assert.Equal(t, 1, prov.Attempts(), "the SDK got the 503 from the first attempt")
		})
	})

	t.Run("503 first is retried with RetryStreams", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.OpenAIOverloaded(), testkit.OpenAIChatStream(parts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: true})
			text, err := collect(t, openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0)))
			require.NoError(t, err)
			assert.Equal(t, "Hello! How can I help?", text)
			assert.Equal(t, 2, prov.Attempts())
			assert.Equal(t, []time.Duration{2 * time.Second}, prov.Gaps())
		})
	})
}

// A 400 is final for both layers: one attempt, even with the SDK's own
// retries left on, and the caller gets *openai.Error with OpenAI's message.
func TestOpenAIBadRequest(t *testing.T) {
	prov := testkit.NewProvider(testkit.OpenAIError(400,
		"Invalid value for 'temperature': expected a decimal between 0 and 2, but got 3.5 instead.",
		"invalid_request_error", "temperature", "invalid_value"))
	srv := httptest.NewServer(prov)
	defer srv.Close()
	rt := retrying(t, srv.Client().Transport, llmretry.Policy{Waits: []time.Duration{time.Second}})
	client := openAIClient(srv.URL+"/v1/", rt)

	_, err := client.Chat.Completions.New(context.Background(), openAIParams())
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	assert.Equal(t, "Invalid value for 'temperature': expected a decimal between 0 and 2, but got 3.5 instead.", apiErr.Message)
	assert.Equal(t, "invalid_request_error", apiErr.Type)
	assert.Equal(t, "temperature", apiErr.Param)
	assert.Equal(t, "invalid_value", apiErr.Code)
	assert.False(t, errors.As(err, new(*llmretry.Exhausted)), "a response is never turned into an llmretry error")
	assert.Equal(t, 1, prov.Attempts())
}

// The zero Policy under a common 30-s deadline — an http.Client's Timeout,
// a context, or the SDK's own WithRequestTimeout — against 502, 502, 200:
// it retries and answers (3 attempts). The reserve of a zero Policy is the
// lesser of 60 s and a fifth of the time left, 6 s here; a fixed 60 s
// reserve would leave no room for a single wait and return the first 502.
func TestOpenAIZeroPolicyUnderShortDeadline(t *testing.T) {
	for _, tt := range []struct {
		name string
		// call makes the call through rt with the 30-s deadline.
		call func(rt http.RoundTripper) (*openai.ChatCompletion, error)
	}{
		{"http.Client Timeout", func(rt http.RoundTripper) (*openai.ChatCompletion, error) {
			client := openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0),
				oaoption.WithHTTPClient(&http.Client{Transport: rt, Timeout: 30 * time.Second}))
			return client.Chat.Completions.New(context.Background(), openAIParams())
		}},
		{"context deadline", func(rt http.RoundTripper) (*openai.ChatCompletion, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			client := openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0))
			return client.Chat.Completions.New(ctx, openAIParams())
		}},
		{"option.WithRequestTimeout", func(rt http.RoundTripper) (*openai.ChatCompletion, error) {
			client := openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0), oaoption.WithRequestTimeout(30*time.Second))
			return client.Chat.Completions.New(context.Background(), openAIParams())
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(testkit.BadGateway(), testkit.BadGateway(), testkit.OpenAIChatCompletion("Hello!"))
				var rec recorder
				start := time.Now()
				got, err := tt.call(retrying(t, prov, llmretry.Policy{OnAttempt: rec.on}))
				require.NoError(t, err)
				assert.Equal(t, "Hello!", got.Choices[0].Message.Content)
				assert.Equal(t, 3, prov.Attempts())
				assert.Equal(t, []int{502, 502, 200}, rec.statuses())
				gaps := prov.Gaps()
				require.Len(t, gaps, 2)
				assert.LessOrEqual(t, gaps[0], time.Second, "full jitter up to 1 s")
				assert.LessOrEqual(t, gaps[1], 2*time.Second, "then up to 2 s")
				assert.LessOrEqual(t, time.Since(start), 3*time.Second)
				for _, a := range rec.attempts {
					assert.NoError(t, a.Stop)
				}
			})
		})
	}

	// An explicit Reserve keeps its meaning: 60 s of a 30-s deadline leaves
	// no room for a wait, and the first 502 comes back with its record.
	t.Run("explicit 60-s Reserve", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.BadGateway(), testkit.BadGateway(), testkit.OpenAIChatCompletion("Hello!"))
			rt := retrying(t, prov, llmretry.Policy{Reserve: time.Minute})
			client := openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0),
				oaoption.WithHTTPClient(&http.Client{Transport: rt, Timeout: 30 * time.Second}))
			_, err := client.Chat.Completions.New(context.Background(), openAIParams())
			var apiErr *openai.Error
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, 502, apiErr.StatusCode)
			gave := llmretry.GaveUp(apiErr.Response)
			require.NotNil(t, gave)
			assert.Equal(t, llmretry.ErrNoTimeLeft, gave.Reason)
			assert.Equal(t, 1, gave.Attempts)
			assert.Equal(t, 1, prov.Attempts())
		})
	})
}
