package interop

import (
	"context"
	"net/http"
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

// Provider-body signals (internal/wire's signal.go: insufficient_quota,
// the Anthropic spend limit, Gemini's RetryInfo and per-day/zero quotas, the
// x-should-retry override) through the real SDKs.
//
// AWAITS FINAL MARK: the two subtests named "... SDK retries on
// (awaits-final-mark)" fail until a reply that llmretry holds final because
// of a body signal is returned marked X-Should-Retry: false, as a reply it
// gave up on already is. Without the mark the Stainless SDKs, which retry
// every 429, send it twice more (3 provider attempts instead of 1). Run the
// rest meanwhile with
//
//	go test -race -skip 'TestSignalsThroughSDKs/.*awaits-final-mark' ./...
func TestSignalsThroughSDKs(t *testing.T) {
	twoRetries := llmretry.Policy{Waits: []time.Duration{time.Second, time.Second}}

	t.Run("openai insufficient_quota is final, SDK retries off", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.OpenAIInsufficientQuota(), testkit.OpenAIChatCompletion("unreachable"))
			client := openAIClient(fakeOpenAIURL, retrying(t, prov, twoRetries), oaoption.WithMaxRetries(0))
			_, err := client.Chat.Completions.New(context.Background(), openAIParams())
			var apiErr *openai.Error
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, 429, apiErr.StatusCode)
			assert.Equal(t, "insufficient_quota", apiErr.Code)
			assert.Equal(t, 1, prov.Attempts(), "a spent quota is not waited for")
		})
	})

	t.Run("openai insufficient_quota is final, SDK retries on (awaits-final-mark)", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.OpenAIInsufficientQuota())
			client := openAIClient(fakeOpenAIURL, retrying(t, prov, twoRetries))
			_, err := client.Chat.Completions.New(context.Background(), openAIParams())
			var apiErr *openai.Error
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, "insufficient_quota", apiErr.Code)
			assert.Equal(t, "false", apiErr.Response.Header.Get("X-Should-Retry"), "marked so that the SDK does not resend it")
			assert.Equal(t, 1, prov.Attempts(), "neither llmretry nor the SDK resent it")
		})
	})

	t.Run("openai x-should-retry true overrides a 409", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			conflict := testkit.OpenAIError(http.StatusConflict, "The request conflicted with another request in progress. Please retry.", "server_error", "", "").
				With("X-Should-Retry", "true")
			prov := testkit.NewProvider(conflict, testkit.OpenAIChatCompletion("Hello!"))
			client := openAIClient(fakeOpenAIURL, retrying(t, prov, twoRetries), oaoption.WithMaxRetries(0))
			got, err := client.Chat.Completions.New(context.Background(), openAIParams())
			require.NoError(t, err)
			assert.Equal(t, "Hello!", got.Choices[0].Message.Content)
			assert.Equal(t, 2, prov.Attempts())
			assert.Equal(t, []time.Duration{time.Second}, prov.Gaps())
		})
	})

	t.Run("anthropic spend limit is final, SDK retries off", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.AnthropicSpendLimit(), testkit.AnthropicMessage("unreachable"))
			client := anthropicClient(fakeAnthropicURL, retrying(t, prov, twoRetries), antoption.WithMaxRetries(0))
			_, err := client.Messages.New(context.Background(), anthropicParams())
			var apiErr *anthropic.Error
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, 429, apiErr.StatusCode)
			assert.EqualValues(t, "enforced_spend_limit_reached", apiErr.ErrorCode())
			assert.Equal(t, 1, prov.Attempts(), "a spend cap is not waited for")
		})
	})

	t.Run("anthropic spend limit is final, SDK retries on (awaits-final-mark)", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.AnthropicSpendLimit())
			client := anthropicClient(fakeAnthropicURL, retrying(t, prov, twoRetries))
			_, err := client.Messages.New(context.Background(), anthropicParams())
			var apiErr *anthropic.Error
			require.ErrorAs(t, err, &apiErr)
			assert.EqualValues(t, "enforced_spend_limit_reached", apiErr.ErrorCode())
			assert.Equal(t, 1, prov.Attempts(), "neither llmretry nor the SDK resent it")
		})
	})

	t.Run("anthropic x-should-retry false stops a 529", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.AnthropicOverloaded().With("X-Should-Retry", "false"), testkit.AnthropicMessage("unreachable"))
			client := anthropicClient(fakeAnthropicURL, retrying(t, prov, twoRetries), antoption.WithMaxRetries(0))
			_, err := client.Messages.New(context.Background(), anthropicParams())
			var apiErr *anthropic.Error
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, 529, apiErr.StatusCode)
			assert.Equal(t, 1, prov.Attempts(), "the provider said not to retry")
		})
	})

	t.Run("gemini RetryInfo sets the wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.GeminiQuota("GenerateContentInputTokensPerModelPerMinute-FreeTier", "250000", "26s"), testkit.GeminiResponse("Hello!"))
			var rec recorder
			client := geminiClient(t, fakeGeminiURL, retrying(t, prov, llmretry.Policy{Waits: []time.Duration{time.Second}, OnAttempt: rec.on}), nil)
			got, err := client.Models.GenerateContent(context.Background(), geminiModel, geminiPrompt(), nil)
			require.NoError(t, err)
			assert.Equal(t, "Hello!", got.Text())
			assert.Equal(t, []time.Duration{26 * time.Second}, prov.Gaps(), "the body's retryDelay beats the schedule's 1 s")
			assert.Equal(t, []time.Duration{26 * time.Second, 0}, rec.retryIns())
		})
	})

	t.Run("gemini per-day quota is final", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.GeminiQuota("GenerateRequestsPerDayPerProjectPerModel-FreeTier", "250", "38s"), testkit.GeminiResponse("unreachable"))
			client := geminiClient(t, fakeGeminiURL, retrying(t, prov, twoRetries), nil)
			_, err := client.Models.GenerateContent(context.Background(), geminiModel, geminiPrompt(), nil)
			var apiErr genai.APIError
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, 429, apiErr.Code)
			assert.Equal(t, "RESOURCE_EXHAUSTED", apiErr.Status)
			assert.Equal(t, 1, prov.Attempts(), "a per-day quota resets at midnight: not waited for")
		})
	})

	t.Run("gemini zero quota is final", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.GeminiQuota("GenerateContentInputTokensPerModelPerMinute-FreeTier", "0", "43s"), testkit.GeminiResponse("unreachable"))
			client := geminiClient(t, fakeGeminiURL, retrying(t, prov, twoRetries), nil)
			_, err := client.Models.GenerateContent(context.Background(), geminiModel, geminiPrompt(), nil)
			var apiErr genai.APIError
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, 429, apiErr.Code)
			assert.Equal(t, 1, prov.Attempts(), "a limit of 0 never frees up")
		})
	})

	t.Run("gemini stream RetryInfo in an SSE error sets the wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			quota := testkit.GeminiQuota("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "10", "38.804097346s")
			quota.Body = "data: " + quota.Body + "\n\n"
			quota = quota.With("Content-Type", "text/event-stream")
			prov := testkit.NewProvider(quota, testkit.GeminiStream("Hel", "lo!"))
			client := geminiClient(t, fakeGeminiURL, retrying(t, prov, llmretry.Policy{Waits: []time.Duration{time.Second}, RetryStreams: true}), nil)
			var text strings.Builder
			for chunk, err := range client.Models.GenerateContentStream(context.Background(), geminiModel, geminiPrompt(), nil) {
				require.NoError(t, err)
				text.WriteString(chunk.Text())
			}
			assert.Equal(t, "Hello!", text.String())
			assert.Equal(t, []time.Duration{38804097346 * time.Nanosecond}, prov.Gaps())
		})
	})
}
