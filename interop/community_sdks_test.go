package interop

import (
	"context"
	"errors"
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
	"github.com/tmc/langchaingo/llms"
)

// goOpenAIChat is a small chat request for sashabaranov/go-openai.
func goOpenAIChat() goopenai.ChatCompletionRequest {
	return goopenai.ChatCompletionRequest{
		Model:    openAIModel,
		Messages: []goopenai.ChatCompletionMessage{{Role: goopenai.ChatMessageRoleUser, Content: "Say hello."}},
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
	overloaded := testkit.OpenAIOverloaded()

	t.Run("succeeds", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.OpenAIChatStream(streamParts...))
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
			prov := testkit.NewProvider(overloaded, testkit.OpenAIChatStream(streamParts...))
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
			prov := testkit.NewProvider(overloaded, testkit.OpenAIChatStream(streamParts...))
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
				require.Len(t, rec.All(), layerK+1)
				assert.Equal(t, llmretry.ErrRetriesSpent, rec.All()[layerK].Stop)
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

// fakeAnthropicV1 is the base URL langchaingo's Anthropic LLM takes: it
// appends /messages itself.
const fakeAnthropicV1 = fakeAnthropicURL + "v1"

// lcGenerate is the part of langchaingo's llms.Model the tests call.
type lcGenerate interface {
	GenerateContent(ctx context.Context, messages []llms.MessageContent, options ...llms.CallOption) (*llms.ContentResponse, error)
}

// lcAsk sends prompt to llm; stream, if true, asks for a streamed reply
// (llms.WithStreamingFunc) and collects its chunks. It returns the answer's
// text, the streamed text and the error.
func lcAsk(llm lcGenerate, prompt string, stream bool) (string, string, error) {
	opts := []llms.CallOption{llms.WithMaxTokens(256)}
	var streamed strings.Builder
	if stream {
		opts = append(opts, llms.WithStreamingFunc(func(_ context.Context, chunk []byte) error {
			streamed.Write(chunk)
			return nil
		}))
	}
	resp, err := llm.GenerateContent(context.Background(), []llms.MessageContent{llms.TextParts(llms.ChatMessageTypeHuman, prompt)}, opts...)
	if err != nil {
		return "", streamed.String(), err
	}
	if len(resp.Choices) == 0 {
		return "", streamed.String(), errors.New("no choices")
	}
	return resp.Choices[0].Content, streamed.String(), nil
}

// lcClient is one of langchaingo's LLMs over a fake provider speaking its
// wire format.
type lcClient struct {
	name       string
	llm        func(t *testing.T, rt *llmretry.Transport) lcGenerate
	answer     testkit.Reply
	stream     testkit.Reply
	overloaded testkit.Reply // a retryable error of the provider, as JSON
}

// lcClients are langchaingo's OpenAI and Anthropic LLMs.
func lcClients() []lcClient {
	return []lcClient{
		{
			name:       "openai",
			llm:        func(t *testing.T, rt *llmretry.Transport) lcGenerate { return langchainOpenAI(t, fakeOpenAIURL, rt) },
			answer:     testkit.OpenAIChatCompletion("Hello! How can I help?"),
			stream:     testkit.OpenAIChatStream(streamParts...),
			overloaded: testkit.OpenAIOverloaded(),
		},
		{
			name: "anthropic",
			llm: func(t *testing.T, rt *llmretry.Transport) lcGenerate {
				return langchainAnthropic(t, fakeAnthropicV1, rt)
			},
			answer:     testkit.AnthropicMessage("Hello! How can I help?"),
			stream:     testkit.AnthropicStream(streamParts...),
			overloaded: testkit.AnthropicOverloaded(),
		},
	}
}

// langchaingo's OpenAI and Anthropic LLMs under llmretry. langchaingo has
// no retries of its own: a 502 from the edge, the provider's own overload
// error, then the answer, after the schedule's 5 s and 10 s.
func TestLangchainRidesOutOutage(t *testing.T) {
	for _, c := range lcClients() {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(testkit.BadGateway(), c.overloaded, c.answer)
				var rec recorder
				rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{5 * time.Second, 10 * time.Second}, OnAttempt: rec.on})

				start := time.Now()
				text, _, err := lcAsk(c.llm(t, rt), "Say hello.", false)
				require.NoError(t, err)
				assert.Equal(t, "Hello! How can I help?", text)
				assert.Equal(t, 3, prov.Attempts(), "exactly the policy's attempts")
				assert.Equal(t, []time.Duration{5 * time.Second, 10 * time.Second}, prov.Gaps())
				assert.Equal(t, 15*time.Second, time.Since(start))
				assert.Equal(t, []int{502, c.overloaded.Status, 200}, rec.statuses())
				calls := prov.Received()
				for _, call := range calls {
					assert.Equal(t, calls[0].Body, call.Body, "every attempt carries the whole body")
				}
			})
		})
	}
}

// langchaingo marks a stream only with "stream":true in the body, after
// the messages and before other members, and sends no Accept header.
// llmretry's scanner finds it wherever it is, in a body of any size
// (langchaingo_*_stream.http in testdata/clients): an error before the
// stream starts is the caller's, sent once.
func TestLangchainStream(t *testing.T) {
	for _, c := range lcClients() {
		t.Run(c.name+"/succeeds", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(c.stream)
				text, streamed, err := lcAsk(c.llm(t, retrying(t, prov, llmretry.Policy{})), "Say hello.", true)
				require.NoError(t, err)
				assert.Equal(t, "Hello! How can I help?", streamed, "every chunk reached the streaming func")
				assert.Equal(t, "Hello! How can I help?", text)
				assert.Equal(t, 1, prov.Attempts())
			})
		})

		t.Run(c.name+"/error first, small body: sent once by default", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(c.overloaded, c.stream)
				rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}})
				_, streamed, err := lcAsk(c.llm(t, rt), "Say hello.", true)
				require.Error(t, err)
				assert.Empty(t, streamed)
				assert.Equal(t, 1, prov.Attempts(), "the caller got the first attempt's error")
				assert.True(t, llmretry.IsStream(prov.Received()[0].Request(t)))
			})
		})

		t.Run(c.name+"/error first, 9 KiB body: sent once by default", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(c.overloaded, c.stream)
				rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}})
				_, streamed, err := lcAsk(c.llm(t, rt), longPrompt(), true)
				require.Error(t, err)
				assert.Empty(t, streamed)
				body := prov.Received()[0].Body
				assert.Greater(t, strings.Index(body, `"stream":true`), 8<<10, "in the middle of a large body")
				assert.True(t, llmretry.IsStream(prov.Received()[0].Request(t)))
				assert.Equal(t, 1, prov.Attempts(), "the caller got the first attempt's error")
			})
		})
	}
}

// What the caller of langchaingo sees once llmretry gives up (k = 2, so 3
// attempts). Both LLMs turn a failed response into a plain string error
// ("API returned unexpected status code: N[: message]"): no type to test,
// no headers. For a failed connection they differ: the Anthropic LLM wraps
// net/http's error with %w, so *llmretry.Exhausted and the cause are
// reachable; the OpenAI LLM replaces any net.Error — which net/http's
// *url.Error always is — with the string "network error: failed to reach
// API server", so errors.As finds nothing and the attempts are counted
// with Policy.OnAttempt instead.
func TestLangchainExhausted(t *testing.T) {
	tests := []struct {
		client  string
		label   string
		failure testkit.Reply
		want    string // the error's text
		chain   bool   // *llmretry.Exhausted and the cause are reachable
	}{
		{client: "openai", label: "502", failure: testkit.BadGateway(), want: "API returned unexpected status code: 502"},
		{client: "openai", label: "429", failure: testkit.OpenAIRateLimited("2"), want: "API returned unexpected status code: 429: Rate limit reached for gpt-4o-mini"},
		{client: "openai", label: "conn refused", failure: testkit.Refused(), want: "network error: failed to reach API server"},
		{client: "anthropic", label: "502", failure: testkit.BadGateway(), want: "anthropic: failed to create message: API returned unexpected status code: 502"},
		{client: "anthropic", label: "529", failure: testkit.AnthropicOverloaded(), want: "anthropic: failed to create message: API returned unexpected status code: 529: Overloaded"},
		{client: "anthropic", label: "conn refused", failure: testkit.Refused(), want: "anthropic: failed to create message: send request: Post \"" + fakeAnthropicV1 + "/messages\": llmretry: gave up after 3 attempts, retries spent", chain: true},
	}
	clients := map[string]lcClient{}
	for _, c := range lcClients() {
		clients[c.name] = c
	}
	for _, tt := range tests {
		t.Run(tt.client+"/"+tt.label, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(tt.failure)
				var rec recorder
				p := layerPolicy()
				p.OnAttempt = rec.on
				_, _, err := lcAsk(clients[tt.client].llm(t, retrying(t, prov, p)), "Say hello.", false)
				require.Error(t, err)
				assert.True(t, strings.HasPrefix(err.Error(), tt.want), "error %q", err)
				assert.Equal(t, layerK+1, prov.Attempts(), "no retries but llmretry's")

				var ex *llmretry.Exhausted
				assert.Equal(t, tt.chain, errors.As(err, &ex), "*llmretry.Exhausted reachable")
				if tt.failure.Err == nil {
					return
				}
				assert.Equal(t, tt.chain, errors.Is(err, syscall.ECONNREFUSED), "the cause reachable")
				if tt.chain {
					assert.Equal(t, layerK+1, ex.Attempts)
				}
				// OnAttempt sees every attempt and its cause, whatever the
				// client does with the error.
				require.Len(t, rec.All(), layerK+1)
				for _, a := range rec.All() {
					assert.ErrorIs(t, a.Err, syscall.ECONNREFUSED)
				}
			})
		})
	}
}
