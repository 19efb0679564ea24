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

	"github.com/anthropics/anthropic-sdk-go/v2"
	antoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/openai/openai-go/v3"
	oaoption "github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"
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

// genai (Gemini API backend) under llmretry. genai does not retry unless
// HTTPOptions.RetryOptions is set, so there is nothing to turn off: a 502,
// then a 429 asking for 20 s, then the answer. llmretry waits 5 s, then
// 20 s, and the SDK sees only the answer.
func TestGeminiRidesOutOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.BadGateway(),
			testkit.GeminiError(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota).").With("Retry-After", "20"),
			testkit.GeminiResponse("Hello! How can I help?"))
		var rec recorder
		rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{5 * time.Second, 10 * time.Second}, OnAttempt: rec.on})
		client := geminiClient(t, fakeGeminiURL, rt, nil)

		start := time.Now()
		got, err := client.Models.GenerateContent(context.Background(), geminiModel, geminiPrompt(), nil)
		require.NoError(t, err)
		assert.Equal(t, "Hello! How can I help?", got.Text())

		assert.Equal(t, 3, prov.Attempts(), "exactly the policy's attempts")
		assert.Equal(t, []time.Duration{5 * time.Second, 20 * time.Second}, prov.Gaps())
		assert.Equal(t, 25*time.Second, time.Since(start))
		assert.Equal(t, []int{502, 429, 200}, rec.statuses())
		assert.Equal(t, []time.Duration{5 * time.Second, 20 * time.Second, 0}, rec.retryIns())
		calls := prov.Received()
		for _, c := range calls {
			assert.Equal(t, "/v1beta/models/"+geminiModel+":generateContent", c.Path)
			assert.Equal(t, dummyGeminiKey, c.Header.Get("X-Goog-Api-Key"))
			assert.Equal(t, calls[0].Body, c.Body, "every attempt carries the whole body")
		}
	})
}

// Models.GenerateContentStream: genai marks a stream in the URL
// (:streamGenerateContent?alt=sse).
func TestGeminiStream(t *testing.T) {
	parts := []string{"Hel", "lo", "! How", " can I", " help?"}

	collect := func(client *genai.Client) (string, error) {
		var text strings.Builder
		for chunk, err := range client.Models.GenerateContentStream(context.Background(), geminiModel, geminiPrompt(), nil) {
			if err != nil {
				return text.String(), err
			}
			text.WriteString(chunk.Text())
		}
		return text.String(), nil
	}
	unavailable := testkit.GeminiError(503, "UNAVAILABLE", "The model is overloaded. Please try again later.")

	t.Run("succeeds over the wire", func(t *testing.T) {
		prov := testkit.NewProvider(testkit.GeminiStream(parts...))
		srv := httptest.NewServer(prov)
		defer srv.Close()
		rt := retrying(t, srv.Client().Transport, llmretry.Policy{})
		text, err := collect(geminiClient(t, srv.URL+"/", rt, nil))
		require.NoError(t, err)
		assert.Equal(t, "Hello! How can I help?", text, "every chunk arrived")
		require.Equal(t, 1, prov.Attempts())
		c := prov.Received()[0]
		assert.Equal(t, "/v1beta/models/"+geminiModel+":streamGenerateContent", c.Path)
		assert.Equal(t, "alt=sse", c.Query)
	})

	t.Run("503 first is not retried by default", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(unavailable, testkit.GeminiStream(parts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}})
			_, err := collect(geminiClient(t, fakeGeminiURL, rt, nil))
			var apiErr genai.APIError
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, 503, apiErr.Code)
			assert.Equal(t, "UNAVAILABLE", apiErr.Status)
			assert.Equal(t, "The model is overloaded. Please try again later.", apiErr.Message)
			assert.Equal(t, 1, prov.Attempts(), "the SDK got the 503 from the first attempt")
		})
	})

	t.Run("503 first is retried with RetryStreams", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(unavailable, testkit.GeminiStream(parts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: true})
			text, err := collect(geminiClient(t, fakeGeminiURL, rt, nil))
			require.NoError(t, err)
			assert.Equal(t, "Hello! How can I help?", text)
			assert.Equal(t, 2, prov.Attempts())
			assert.Equal(t, []time.Duration{2 * time.Second}, prov.Gaps())
		})
	})
}

// A 400 is final: one attempt, and the caller gets genai.APIError (a value,
// not a pointer) with Gemini's message.
func TestGeminiBadRequest(t *testing.T) {
	prov := testkit.NewProvider(testkit.GeminiError(400, "INVALID_ARGUMENT", "* GenerateContentRequest.contents: contents is not specified\n"))
	srv := httptest.NewServer(prov)
	defer srv.Close()
	rt := retrying(t, srv.Client().Transport, llmretry.Policy{Waits: []time.Duration{time.Second}})
	client := geminiClient(t, srv.URL+"/", rt, nil)

	_, err := client.Models.GenerateContent(context.Background(), geminiModel, geminiPrompt(), nil)
	var apiErr genai.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 400, apiErr.Code)
	assert.Equal(t, "INVALID_ARGUMENT", apiErr.Status)
	assert.Equal(t, "* GenerateContentRequest.contents: contents is not specified\n", apiErr.Message)
	assert.False(t, errors.As(err, new(*llmretry.Exhausted)))
	assert.Equal(t, 1, prov.Attempts())
}
