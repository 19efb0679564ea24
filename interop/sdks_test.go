package interop

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	antoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/openai/openai-go/v3"
	oaoption "github.com/openai/openai-go/v3/option"
	goopenai "github.com/sashabaranov/go-openai"
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
	t.Run("succeeds over the wire", func(t *testing.T) {
		prov := testkit.NewProvider(testkit.OpenAIChatStream(streamParts...))
		srv := httptest.NewServer(prov)
		defer srv.Close()
		rt := retrying(t, srv.Client().Transport, llmretry.Policy{})
		text, err := openAIStreamText(openAIClient(srv.URL+"/v1/", rt))
		require.NoError(t, err)
		assert.Equal(t, "Hello! How can I help?", text, "every chunk arrived")
		assert.Equal(t, 1, prov.Attempts())
		assert.True(t, llmretry.IsStream(prov.Received()[0].Request(t)), "llmretry sees the request as a stream")
	})

	t.Run("503 first is not retried by default", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.OpenAIOverloaded(), testkit.OpenAIChatStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}})
			_, err := openAIStreamText(openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0)))
			var apiErr *openai.Error
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, 503, apiErr.StatusCode)
			assert.Equal(t, "The server is overloaded or not ready yet.", apiErr.Message)
			assert.Equal(t, 1, prov.Attempts(), "the SDK got the 503 from the first attempt")
		})
	})

	t.Run("503 first is retried with RetryStreams", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.OpenAIOverloaded(), testkit.OpenAIChatStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: true})
			text, err := openAIStreamText(openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0)))
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
				for _, a := range rec.All() {
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
			apiErr := openAIError(t, client)
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
	overloaded := testkit.AnthropicOverloaded()

	t.Run("succeeds over the wire", func(t *testing.T) {
		prov := testkit.NewProvider(testkit.AnthropicStream(streamParts...))
		srv := httptest.NewServer(prov)
		defer srv.Close()
		rt := retrying(t, srv.Client().Transport, llmretry.Policy{})
		text, err := anthropicStreamText(t, anthropicClient(srv.URL+"/", rt))
		require.NoError(t, err)
		assert.Equal(t, "Hello! How can I help?", text, "every delta arrived")
		assert.Equal(t, 1, prov.Attempts())
		assert.True(t, llmretry.IsStream(prov.Received()[0].Request(t)), "llmretry sees the request as a stream")
	})

	t.Run("error mid-stream is never retried, even with RetryStreams", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// Anthropic reports overload after a 200 as an SSE error event.
			broken := testkit.AnthropicStream(streamParts...)
			broken.Events = append(append([]string(nil), broken.Events[:4]...),
				"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"},\"request_id\":\"req_011CSHpZ8hP3aT6jB2mW9xQe\"}\n\n")
			prov := testkit.NewProvider(broken, testkit.AnthropicStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: true})
			text, err := anthropicStreamText(t, anthropicClient(fakeAnthropicURL, rt)) // SDK retries left on too
			var apiErr *anthropic.Error
			require.ErrorAs(t, err, &apiErr, "the SDK surfaces the event as its own error")
			assert.EqualValues(t, "overloaded_error", apiErr.Type())
			assert.Equal(t, "Hel", text, "what arrived before the error stays delivered")
			assert.Equal(t, 1, prov.Attempts(), "a stream that started is committed: nobody resends it")
		})
	})

	t.Run("503 first is not retried by default", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.AnthropicError(503, "api_error", "Service unavailable"), testkit.AnthropicStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}})
			_, err := anthropicStreamText(t, anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0)))
			var apiErr *anthropic.Error
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, 503, apiErr.StatusCode)
			assert.Equal(t, "Service unavailable", apiErr.Message)
			assert.Equal(t, 1, prov.Attempts(), "the SDK got the 503 from the first attempt")
		})
	})

	t.Run("503 first is retried with RetryStreams", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.AnthropicError(503, "api_error", "Service unavailable"), overloaded, testkit.AnthropicStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second, 4 * time.Second}, RetryStreams: true})
			text, err := anthropicStreamText(t, anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0)))
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
			apiErr := anthropicError(t, client)
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
	unavailable := testkit.GeminiError(503, "UNAVAILABLE", "The model is overloaded. Please try again later.")

	t.Run("succeeds over the wire", func(t *testing.T) {
		prov := testkit.NewProvider(testkit.GeminiStream(streamParts...))
		srv := httptest.NewServer(prov)
		defer srv.Close()
		rt := retrying(t, srv.Client().Transport, llmretry.Policy{})
		text, err := geminiStreamText(geminiClient(t, srv.URL+"/", rt, nil))
		require.NoError(t, err)
		assert.Equal(t, "Hello! How can I help?", text, "every chunk arrived")
		require.Equal(t, 1, prov.Attempts())
		c := prov.Received()[0]
		assert.Equal(t, "/v1beta/models/"+geminiModel+":streamGenerateContent", c.Path)
		assert.Equal(t, "alt=sse", c.Query)
	})

	t.Run("503 first is not retried by default", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(unavailable, testkit.GeminiStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}})
			_, err := geminiStreamText(geminiClient(t, fakeGeminiURL, rt, nil))
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
			prov := testkit.NewProvider(unavailable, testkit.GeminiStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: true})
			text, err := geminiStreamText(geminiClient(t, fakeGeminiURL, rt, nil))
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

// layerK is the number of retries llmretry is allowed in the layering
// tests: k = 2, so llmretry alone makes k+1 = 3 attempts.
const layerK = 2

// layerPolicy is llmretry's policy in the layering tests: two retries,
// after 2 s and 4 s. MaxRetries pins k even under a deadline (Anthropic's
// per-attempt one), where the last wait of Waits would otherwise repeat.
func layerPolicy() llmretry.Policy {
	return llmretry.Policy{Waits: []time.Duration{2 * time.Second, 4 * time.Second}, MaxRetries: layerK}
}

// The layering trap. The Stainless SDKs (openai-go, anthropic-sdk-go)
// retry twice on their own by default; llmretry under them retries k
// times; an SDK that resent every failure llmretry gave up on would make
// 3(k+1) attempts. It does not for responses, because llmretry marks the
// response it gives up on with X-Should-Retry: false, which both SDKs obey
// (rows "mark stripped" show the 9 attempts the mark prevents), even over
// Anthropic's own x-should-retry: true on a 429, which the mark replaces. It
// does
// for failed connections, where there is no response to mark: only
// option.WithMaxRetries(0) prevents that. genai retries only when
// HTTPOptions.RetryOptions is set, and then ignores X-Should-Retry.
// go-openai and langchaingo have no retries of their own. aws-sdk-go-v2's
// default retryer (3 attempts) ignores X-Should-Retry and resends
// responses and failed connections alike, 3(k+1) attempts, unless it is
// turned off (Retryer: aws.NopRetryer{} or RetryMaxAttempts: 1).
//
// Run with -v to print the measured table.
func TestLayeringTrap(t *testing.T) {
	const (
		stackSDK      = "SDK only"
		stackLLM      = "llmretry k=2"
		stackStripped = "llmretry k=2, mark stripped"
	)
	stacks := map[string]func(t *testing.T, base http.RoundTripper) http.RoundTripper{
		stackSDK: func(_ *testing.T, base http.RoundTripper) http.RoundTripper { return base },
		stackLLM: func(t *testing.T, base http.RoundTripper) http.RoundTripper {
			return retrying(t, base, layerPolicy())
		},
		stackStripped: func(t *testing.T, base http.RoundTripper) http.RoundTripper {
			return stripShouldRetry{retrying(t, base, layerPolicy())}
		},
	}

	openAICall := func(opts ...oaoption.RequestOption) func(*testing.T, http.RoundTripper) error {
		return func(_ *testing.T, rt http.RoundTripper) error {
			client := openAIClient(fakeOpenAIURL, rt, opts...)
			_, err := client.Chat.Completions.New(context.Background(), openAIParams())
			return err
		}
	}
	anthropicCall := func(opts ...antoption.RequestOption) func(*testing.T, http.RoundTripper) error {
		return func(_ *testing.T, rt http.RoundTripper) error {
			client := anthropicClient(fakeAnthropicURL, rt, opts...)
			_, err := client.Messages.New(context.Background(), anthropicParams())
			return err
		}
	}
	geminiCall := func(retry *genai.HTTPRetryOptions) func(*testing.T, http.RoundTripper) error {
		return func(t *testing.T, rt http.RoundTripper) error {
			_, err := geminiClient(t, fakeGeminiURL, rt, retry).Models.GenerateContent(context.Background(), geminiModel, geminiPrompt(), nil)
			return err
		}
	}
	goOpenAICall := func(_ *testing.T, rt http.RoundTripper) error {
		_, err := goOpenAIClient(fakeOpenAIURL, rt).CreateChatCompletion(context.Background(), goOpenAIChat())
		return err
	}
	lcCall := func(llm func(*testing.T, http.RoundTripper) lcGenerate) func(*testing.T, http.RoundTripper) error {
		return func(t *testing.T, rt http.RoundTripper) error {
			_, _, err := lcAsk(llm(t, rt), "Say hello.", false)
			return err
		}
	}
	bedrockCall := func(opts ...func(*bedrockruntime.Options)) func(*testing.T, http.RoundTripper) error {
		return func(_ *testing.T, rt http.RoundTripper) error {
			_, err := bedrockClient(rt, opts...).Converse(context.Background(), bedrockConverseInput())
			return err
		}
	}
	three := int32(3)

	type sdkSetup struct {
		name string
		call func(*testing.T, http.RoundTripper) error
		// lostCause: the client replaces a failed connection's error
		// with its own string, so neither the cause nor
		// *llmretry.Exhausted can be reached.
		lostCause bool
	}
	var (
		oaDefault  = sdkSetup{"openai-go, default (2 retries)", openAICall(), false}
		oaOff      = sdkSetup{"openai-go, WithMaxRetries(0)", openAICall(oaoption.WithMaxRetries(0)), false}
		antDefault = sdkSetup{"anthropic-sdk-go, default (2 retries)", anthropicCall(), false}
		antOff     = sdkSetup{"anthropic-sdk-go, WithMaxRetries(0)", anthropicCall(antoption.WithMaxRetries(0)), false}
		gDefault   = sdkSetup{"genai, default (no retry)", geminiCall(nil), false}
		gOn        = sdkSetup{"genai, RetryOptions{Attempts: 3}", geminiCall(&genai.HTTPRetryOptions{Attempts: &three}), false}
		goOA       = sdkSetup{"go-openai (no retries)", goOpenAICall, false}
		lcOA       = sdkSetup{"langchaingo openai (no retries)", lcCall(func(t *testing.T, rt http.RoundTripper) lcGenerate { return langchainOpenAI(t, fakeOpenAIURL, rt) }), true}
		lcAnt      = sdkSetup{"langchaingo anthropic (no retries)", lcCall(func(t *testing.T, rt http.RoundTripper) lcGenerate { return langchainAnthropic(t, fakeAnthropicV1, rt) }), false}
		awsDefault = sdkSetup{"bedrockruntime, default retryer (3 attempts)", bedrockCall(), false}
		awsNop     = sdkSetup{"bedrockruntime, Retryer: aws.NopRetryer{}", bedrockCall(noAWSRetries), false}
		awsOne     = sdkSetup{"bedrockruntime, RetryMaxAttempts: 1", bedrockCall(func(o *bedrockruntime.Options) { o.RetryMaxAttempts = 1 }), false}
	)
	type row struct {
		sdk     sdkSetup
		stack   string
		failure string
		want    int
	}
	rows := []row{
		{oaDefault, stackSDK, "502", 3},
		{oaDefault, stackLLM, "502", layerK + 1},
		{oaDefault, stackStripped, "502", 3 * (layerK + 1)},
		{oaOff, stackLLM, "502", layerK + 1},
		{oaDefault, stackSDK, "conn refused", 3},
		{oaDefault, stackLLM, "conn refused", 3 * (layerK + 1)},
		{oaOff, stackLLM, "conn refused", layerK + 1},

		{antDefault, stackSDK, "502", 3},
		{antDefault, stackLLM, "502", layerK + 1},
		{antDefault, stackStripped, "502", 3 * (layerK + 1)},
		{antOff, stackLLM, "502", layerK + 1},
		{antDefault, stackSDK, "429 x-should-retry: true", 3},
		{antDefault, stackLLM, "429 x-should-retry: true", layerK + 1},
		{antDefault, stackSDK, "conn refused", 3},
		{antDefault, stackLLM, "conn refused", 3 * (layerK + 1)},
		{antOff, stackLLM, "conn refused", layerK + 1},

		{gDefault, stackSDK, "502", 1},
		{gDefault, stackLLM, "502", layerK + 1},
		{gOn, stackLLM, "502", 3 * (layerK + 1)},
		{gDefault, stackLLM, "conn refused", layerK + 1},
		{gOn, stackLLM, "conn refused", 3 * (layerK + 1)},

		{goOA, stackSDK, "502", 1},
		{goOA, stackLLM, "502", layerK + 1},
		{goOA, stackLLM, "conn refused", layerK + 1},
		{lcOA, stackLLM, "502", layerK + 1},
		{lcOA, stackLLM, "conn refused", layerK + 1},
		{lcAnt, stackLLM, "502", layerK + 1},
		{lcAnt, stackLLM, "conn refused", layerK + 1},

		{awsDefault, stackSDK, "503 ServiceUnavailableException", 3},
		{awsDefault, stackLLM, "503 ServiceUnavailableException", 3 * (layerK + 1)},
		{awsDefault, stackLLM, "429 ThrottlingException", 3 * (layerK + 1)},
		{awsDefault, stackLLM, "502", 3 * (layerK + 1)},
		{awsDefault, stackLLM, "conn refused", 3 * (layerK + 1)},
		{awsNop, stackLLM, "503 ServiceUnavailableException", layerK + 1},
		{awsNop, stackLLM, "conn refused", layerK + 1},
		{awsOne, stackLLM, "503 ServiceUnavailableException", layerK + 1},
		{awsOne, stackLLM, "conn refused", layerK + 1},
	}

	var table []string
	for _, r := range rows {
		name := fmt.Sprintf("%s/%s/%s", r.sdk.name, r.stack, r.failure)
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				failure := map[string]testkit.Reply{
					"502":                             testkit.BadGateway(),
					"conn refused":                    testkit.Refused(),
					"429 x-should-retry: true":        testkit.AnthropicRateLimited("20"),
					"503 ServiceUnavailableException": testkit.BedrockUnavailable(),
					"429 ThrottlingException":         testkit.BedrockThrottled(),
				}[r.failure]
				prov := testkit.NewProvider(failure)
				start := time.Now()
				err := r.sdk.call(t, stacks[r.stack](t, prov))
				elapsed := time.Since(start)

				require.Error(t, err)
				assert.Equal(t, r.want, prov.Attempts(), "provider attempts")
				table = append(table, fmt.Sprintf("| %s | %s | %s | %d | %v |", r.sdk.name, r.stack, r.failure, prov.Attempts(), elapsed.Round(10*time.Millisecond)))

				// What the caller sees.
				if r.failure == "conn refused" {
					var ex *llmretry.Exhausted
					if r.sdk.lostCause {
						assert.False(t, errors.Is(err, syscall.ECONNREFUSED), "the client dropped the cause")
						assert.False(t, errors.As(err, &ex))
						return
					}
					assert.ErrorIs(t, err, syscall.ECONNREFUSED)
					if r.stack == stackLLM {
						require.ErrorAs(t, err, &ex, "llmretry's error reaches the caller through the SDK")
						assert.Equal(t, layerK+1, ex.Attempts, "the last llmretry call's own attempts")
					} else {
						assert.False(t, errors.As(err, &ex))
					}
					return
				}
				status, header := sdkErrorResponse(t, err)
				assert.Equal(t, failure.Status, status, "the provider's last response, as the SDK's typed error")
				if r.stack == stackLLM && header != nil {
					assert.Equal(t, "false", header.Get("X-Should-Retry"), "llmretry marked the response it gave up on")
				}
				if resp := sdkHTTPResponse(err); resp != nil {
					gave := llmretry.GaveUp(resp)
					if r.stack == stackSDK {
						assert.Nil(t, gave, "no llmretry, no record")
					} else if assert.NotNil(t, gave, "GaveUp reads the record off the response the SDK kept") {
						assert.Equal(t, llmretry.ErrRetriesSpent, gave.Reason)
						assert.Equal(t, layerK+1, gave.Attempts, "the last llmretry call's own attempts")
					}
				}
			})
		})
	}
	t.Log("measured provider attempts (always-failing provider; synctest clock):\n" +
		"| SDK | stack | failure | attempts | time |\n|---|---|---|---:|---:|\n" + joinLines(table))
}

// sdkHTTPResponse returns the *http.Response an SDK's typed error keeps
// (openai-go's and anthropic-sdk-go's *Error, aws-sdk-go-v2's
// *awshttp.ResponseError), or nil: what llmretry.GaveUp reads.
func sdkHTTPResponse(err error) *http.Response {
	var (
		oaErr  *openai.Error
		antErr *anthropic.Error
		awsErr *awshttp.ResponseError
	)
	switch {
	case errors.As(err, &oaErr):
		return oaErr.Response
	case errors.As(err, &antErr):
		return antErr.Response
	case errors.As(err, &awsErr) && awsErr.Response != nil:
		return awsErr.Response.Response
	}
	return nil
}

// sdkErrorResponse returns the status of the SDK's typed error for a
// failed response, and the response headers when the SDK keeps them.
func sdkErrorResponse(t *testing.T, err error) (int, http.Header) {
	t.Helper()
	var (
		oaErr    *openai.Error
		antErr   *anthropic.Error
		gErr     genai.APIError
		goAPIErr *goopenai.APIError
		goReqErr *goopenai.RequestError
		awsErr   *awshttp.ResponseError
	)
	switch {
	case errors.As(err, &oaErr):
		return oaErr.StatusCode, oaErr.Response.Header
	case errors.As(err, &antErr):
		return antErr.StatusCode, antErr.Response.Header
	case errors.As(err, &gErr):
		return gErr.Code, nil
	case errors.As(err, &goAPIErr):
		return goAPIErr.HTTPStatusCode, nil
	case errors.As(err, &goReqErr):
		return goReqErr.HTTPStatusCode, nil
	case errors.As(err, &awsErr):
		return awsErr.HTTPStatusCode(), awsErr.Response.Header
	}
	// langchaingo: only a string.
	const lcStatus = "API returned unexpected status code: "
	if i := strings.Index(err.Error(), lcStatus); i >= 0 {
		var status int
		if _, scanErr := fmt.Sscanf(err.Error()[i+len(lcStatus):], "%d", &status); scanErr == nil {
			return status, nil
		}
	}
	t.Fatalf("not an SDK error: %T %v", err, err)
	return 0, nil
}

// joinLines joins lines with newlines.
func joinLines(lines []string) string {
	s := ""
	for _, l := range lines {
		s += l + "\n"
	}
	return s
}
