package interop

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/internal/testkit"
	goopenai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goOpenAIChat is a small chat request for sashabaranov/go-openai.
func goOpenAIChat() goopenai.ChatCompletionRequest {
	return goopenai.ChatCompletionRequest{
		Model:    openAIModel,
		Messages: []goopenai.ChatCompletionMessage{{Role: goopenai.ChatMessageRoleUser, Content: "Say hello."}},
	}
}

// goOpenAIStreamText reads a go-openai stream to its end and returns the
// text of its deltas and the first error other than io.EOF.
func goOpenAIStreamText(stream *goopenai.ChatCompletionStream) (string, error) {
	defer stream.Close()
	var text strings.Builder
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return text.String(), nil
		}
		if err != nil {
			return text.String(), err
		}
		for _, c := range chunk.Choices {
			text.WriteString(c.Delta.Content)
		}
	}
}

// sashabaranov/go-openai under llmretry. go-openai has no retries of its
// own, so llmretry's are the only ones: 502, 502, then the answer, after
// the schedule's 5 s and 10 s.
func TestGoOpenAIRidesOutOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.BadGateway(), testkit.BadGateway(), testkit.OpenAIChatCompletion("Hello! How can I help?"))
		var rec recorder
		rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{5 * time.Second, 10 * time.Second}, OnAttempt: rec.on})
		client := goOpenAIClient(fakeOpenAIURL, rt)

		start := time.Now()
		got, err := client.CreateChatCompletion(context.Background(), goOpenAIChat())
		require.NoError(t, err)
		require.Len(t, got.Choices, 1)
		assert.Equal(t, "Hello! How can I help?", got.Choices[0].Message.Content)

		assert.Equal(t, 3, prov.Attempts(), "exactly the policy's attempts")
		assert.Equal(t, []time.Duration{5 * time.Second, 10 * time.Second}, prov.Gaps())
		assert.Equal(t, 15*time.Second, time.Since(start))
		assert.Equal(t, []int{502, 502, 200}, rec.statuses())
		calls := prov.Received()
		for _, c := range calls {
			assert.Equal(t, "/v1/chat/completions", c.Path)
			assert.Equal(t, "Bearer "+dummyOpenAIKey, c.Header.Get("Authorization"))
			assert.Equal(t, calls[0].Body, c.Body, "every attempt carries the whole body")
		}
	})
}

// CreateChatCompletionStream sends Accept: text/event-stream, so llmretry
// knows the request for a stream whatever the body.
func TestGoOpenAIStream(t *testing.T) {
	parts := []string{"Hel", "lo", "! How", " can I", " help?"}
	overloaded := testkit.OpenAIOverloaded()

	t.Run("succeeds", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.OpenAIChatStream(parts...))
			stream, err := goOpenAIClient(fakeOpenAIURL, retrying(t, prov, llmretry.Policy{})).CreateChatCompletionStream(context.Background(), goOpenAIChat())
			require.NoError(t, err)
			text, err := goOpenAIStreamText(stream)
			require.NoError(t, err)
			assert.Equal(t, "Hello! How can I help?", text, "every chunk arrived")
			assert.Equal(t, 1, prov.Attempts())
			assert.True(t, llmretry.IsStream(prov.Received()[0].Request(t)), "llmretry sees the request as a stream")
		})
	})

	t.Run("503 first is sent once by default", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(overloaded, testkit.OpenAIChatStream(parts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}})
			_, err := goOpenAIClient(fakeOpenAIURL, rt).CreateChatCompletionStream(context.Background(), goOpenAIChat())
			var apiErr *goopenai.APIError
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, 503, apiErr.HTTPStatusCode)
			assert.Equal(t, "The server is overloaded or not ready yet.", apiErr.Message)
			assert.Equal(t, 1, prov.Attempts(), "the caller got the 503 from the first attempt")
		})
	})

	t.Run("503 first is retried with RetryStreams", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(overloaded, testkit.OpenAIChatStream(parts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: true})
			stream, err := goOpenAIClient(fakeOpenAIURL, rt).CreateChatCompletionStream(context.Background(), goOpenAIChat())
			require.NoError(t, err)
			text, err := goOpenAIStreamText(stream)
			require.NoError(t, err)
			assert.Equal(t, "Hello! How can I help?", text)
			assert.Equal(t, []time.Duration{2 * time.Second}, prov.Gaps())
		})
	})
}

// What the caller of go-openai sees once llmretry gives up (k = 2, so 3
// attempts): the provider's last response as go-openai's own error — an
// *openai.APIError for a JSON error body, an *openai.RequestError for an
// edge's HTML page — or, for a failed connection, the *url.Error of
// net/http wrapping *llmretry.Exhausted, which go-openai returns as is.
func TestGoOpenAIExhausted(t *testing.T) {
	tests := []struct {
		name    string
		failure testkit.Reply
		check   func(t *testing.T, err error)
	}{
		{
			name:    "502 HTML from the edge",
			failure: testkit.BadGateway(),
			check: func(t *testing.T, err error) {
				var reqErr *goopenai.RequestError
				require.ErrorAs(t, err, &reqErr, "the body is not OpenAI's JSON")
				assert.Equal(t, 502, reqErr.HTTPStatusCode)
				assert.Contains(t, string(reqErr.Body), "502 Bad Gateway")
			},
		},
		{
			name:    "429 rate limit",
			failure: testkit.OpenAIRateLimited("2"),
			check: func(t *testing.T, err error) {
				var apiErr *goopenai.APIError
				require.ErrorAs(t, err, &apiErr)
				assert.Equal(t, 429, apiErr.HTTPStatusCode)
				assert.Equal(t, "rate_limit_exceeded", apiErr.Code)
				assert.Equal(t, "tokens", apiErr.Type)
			},
		},
		{
			name:    "connection refused",
			failure: testkit.Refused(),
			check: func(t *testing.T, err error) {
				var urlErr *url.Error
				require.ErrorAs(t, err, &urlErr, "net/http's error, returned as is")
				var ex *llmretry.Exhausted
				require.ErrorAs(t, err, &ex)
				assert.Equal(t, layerK+1, ex.Attempts)
				assert.ErrorIs(t, err, syscall.ECONNREFUSED)
				assert.ErrorIs(t, err, llmretry.ErrRetriesSpent, "the reason, on go-openai's error")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(tt.failure)
				var rec recorder
				p := layerPolicy()
				p.OnAttempt = rec.on
				_, err := goOpenAIClient(fakeOpenAIURL, retrying(t, prov, p)).CreateChatCompletion(context.Background(), goOpenAIChat())
				require.Error(t, err)
				tt.check(t, err)
				assert.Equal(t, layerK+1, prov.Attempts(), "no retries but llmretry's")
				// go-openai's errors keep no *http.Response, so GaveUp has
				// nothing to read: the last attempt's Stop says why.
				require.Len(t, rec.attempts, layerK+1)
				assert.Equal(t, llmretry.ErrRetriesSpent, rec.attempts[layerK].Stop)
				if tt.failure.Err == nil {
					assert.False(t, errors.As(err, new(*llmretry.Exhausted)), "a response is never turned into an llmretry error")
				}
			})
		})
	}
}

// A 400 is final: one attempt, and an *openai.APIError with OpenAI's
// message and param.
func TestGoOpenAIBadRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.OpenAIError(http.StatusBadRequest,
			"Invalid value for 'temperature': expected a decimal between 0 and 2, but got 3.5 instead.",
			"invalid_request_error", "temperature", "invalid_value"))
		_, err := goOpenAIClient(fakeOpenAIURL, retrying(t, prov, layerPolicy())).CreateChatCompletion(context.Background(), goOpenAIChat())
		var apiErr *goopenai.APIError
		require.ErrorAs(t, err, &apiErr)
		assert.Equal(t, http.StatusBadRequest, apiErr.HTTPStatusCode)
		require.NotNil(t, apiErr.Param)
		assert.Equal(t, "temperature", *apiErr.Param)
		assert.Equal(t, 1, prov.Attempts())
	})
}
