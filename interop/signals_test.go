package interop

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"strings"
	"syscall"
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

// Why llmretry stopped, read off what the SDK returns. Each stop reason is
// provoked through openai-go and anthropic-sdk-go (their own retries off,
// as the recipes say):
//
//   - llmretry.GaveUp on the SDK's own error gives the record (Reason,
//     Attempts) in every case: one way to ask, whatever went wrong;
//   - for a failure response the Transport returned, the SDK reads its
//     body and keeps the *http.Response in its *Error; the record travels
//     with that Response (GaveUp on it gives the same record);
//   - for a failed connection (no response), the SDK wraps net/http's
//     *url.Error, which wraps *llmretry.Exhausted: errors.Is(err, reason)
//     holds on the SDK's own error too.
//
// The last attempt's Attempt.Stop is the same reason; the earlier ones have
// none.
func TestStopReasonsThroughSDKs(t *testing.T) {
	spent := llmretry.Policy{Waits: []time.Duration{time.Second, time.Second}, MaxRetries: 2}
	// Under a 1-minute deadline with a 30-s reserve, 20-s waits allow one
	// retry: attempts at 0 and 20 s, and the next would end at 40 s, past
	// 60 s − 30 s.
	tight := llmretry.Policy{Waits: []time.Duration{20 * time.Second}, Reserve: 30 * time.Second}
	refusedCert := testkit.Reply{Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}
	overloadedNoRetry := testkit.AnthropicOverloaded().With("X-Should-Retry", "false")
	openAIBusyNoRetry := testkit.OpenAIError(500, "The server had an error while processing your request.", "server_error", "", "").With("X-Should-Retry", "false")
	openAIBad := testkit.OpenAIError(400, "Invalid value for 'temperature': expected a decimal between 0 and 2, but got 3.5 instead.", "invalid_request_error", "temperature", "invalid_value")
	anthropicBad := testkit.AnthropicError(400, "invalid_request_error", "max_tokens: 1000000 > 64000")

	tests := []struct {
		name      string
		policy    llmretry.Policy
		deadline  time.Duration // of the caller's context; 0 for none
		openai    testkit.Reply // what the OpenAI provider keeps answering
		anthropic testkit.Reply // what the Anthropic provider keeps answering
		reason    error
		attempts  int
		elapsed   time.Duration
	}{
		{"retries spent", spent, 0, testkit.BadGateway(), testkit.BadGateway(), llmretry.ErrRetriesSpent, 3, 2 * time.Second},
		{"no time left", tight, time.Minute, testkit.BadGateway(), testkit.AnthropicOverloaded(), llmretry.ErrNoTimeLeft, 2, 20 * time.Second},
		{"wait too long", spent, 0, testkit.OpenAIRateLimited("600"), testkit.AnthropicRateLimited("600"), llmretry.ErrWaitTooLong, 1, 0},
		{"provider refused: spent quota", spent, 0, testkit.OpenAIInsufficientQuota(), testkit.AnthropicSpendLimit(), llmretry.ErrProviderRefused, 1, 0},
		{"provider refused: x-should-retry false", spent, 0, openAIBusyNoRetry, overloadedNoRetry, llmretry.ErrProviderRefused, 1, 0},
		{"not retryable: 400", spent, 0, openAIBad, anthropicBad, llmretry.ErrNotRetryable, 1, 0},
		// No response: the reason is on the SDK's error chain.
		{"connection refused, retries spent", spent, 0, testkit.Refused(), testkit.Refused(), llmretry.ErrRetriesSpent, 3, 2 * time.Second},
		{"connection refused, no time left", tight, time.Minute, testkit.Refused(), testkit.Refused(), llmretry.ErrNoTimeLeft, 2, 20 * time.Second},
		{"certificate refused", spent, 0, refusedCert, refusedCert, llmretry.ErrNotRetryable, 1, 0},
	}

	sdks := []struct {
		name string
		// call makes one call through rt and returns the *http.Response
		// inside the SDK's *Error (nil if none) and the SDK's error.
		call func(ctx context.Context, rt http.RoundTripper) (*http.Response, error)
		// failure picks the provider's reply for the SDK.
		failure func(openai, anthropic testkit.Reply) testkit.Reply
	}{
		{
			name: "openai-go",
			call: func(ctx context.Context, rt http.RoundTripper) (*http.Response, error) {
				client := openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0))
				_, err := client.Chat.Completions.New(ctx, openAIParams())
				var apiErr *openai.Error
				if errors.As(err, &apiErr) {
					return apiErr.Response, err
				}
				return nil, err
			},
			failure: func(o, _ testkit.Reply) testkit.Reply { return o },
		},
		{
			name: "anthropic-sdk-go",
			call: func(ctx context.Context, rt http.RoundTripper) (*http.Response, error) {
				client := anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0))
				_, err := client.Messages.New(ctx, anthropicParams())
				var apiErr *anthropic.Error
				if errors.As(err, &apiErr) {
					return apiErr.Response, err
				}
				return nil, err
			},
			failure: func(_, a testkit.Reply) testkit.Reply { return a },
		},
	}

	for _, sdk := range sdks {
		for _, tt := range tests {
			t.Run(sdk.name+"/"+tt.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					failure := sdk.failure(tt.openai, tt.anthropic)
					prov := testkit.NewProvider(failure)
					var rec recorder
					p := tt.policy
					p.OnAttempt = rec.on
					ctx := context.Background()
					if tt.deadline > 0 {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, tt.deadline)
						defer cancel()
					}
					start := time.Now()
					resp, err := sdk.call(ctx, retrying(t, prov, p))
					require.Error(t, err)
					assert.Equal(t, tt.attempts, prov.Attempts(), "attempts that reached the provider")
					assert.Equal(t, tt.elapsed, time.Since(start))
					why := llmretry.GaveUp(err)
					require.NotNil(t, why, "GaveUp reads the record off the SDK's error: %v", err)
					assert.Equal(t, tt.reason, why.Reason)
					assert.Equal(t, tt.attempts, why.Attempts)

					if failure.Err == nil {
						// A response: the SDK's *Error keeps it, and the
						// record travels with it.
						require.NotNil(t, resp, "the SDK's *Error holds the response: %v", err)
						gave := llmretry.GaveUp(resp)
						require.NotNil(t, gave, "GaveUp finds the record on the SDK's Response")
						assert.Equal(t, tt.reason, gave.Reason)
						assert.Equal(t, tt.attempts, gave.Attempts)
						require.NotNil(t, gave.Response)
						assert.Equal(t, failure.Status, gave.Response.StatusCode)
						assert.Same(t, resp, gave.Response, "the record names the very response the SDK kept")
						assert.Same(t, gave, why, "the same record from the error and from its response")
						assert.NoError(t, gave.Err)
						assert.False(t, errors.As(err, new(*llmretry.Exhausted)), "a response is never turned into an llmretry error")
						assert.NotErrorIs(t, err, tt.reason, "the reason is read with GaveUp, not found on the SDK's error")
					} else {
						// No response: *url.Error wrapping *Exhausted,
						// wrapped by the SDK.
						assert.Nil(t, resp)
						assert.ErrorIs(t, err, tt.reason, "errors.Is finds the reason on the SDK's error")
						var ex *llmretry.Exhausted
						require.ErrorAs(t, err, &ex)
						assert.Equal(t, tt.reason, ex.Reason)
						assert.Equal(t, tt.attempts, ex.Attempts)
						assert.ErrorIs(t, err, failure.Err, "and the cause")
						if errors.Is(failure.Err, syscall.ECONNREFUSED) {
							assert.Contains(t, err.Error(), "llmretry: gave up after")
						}
					}

					// The attempt record says the same.
					require.Len(t, rec.attempts, tt.attempts)
					for i, a := range rec.attempts {
						if i < len(rec.attempts)-1 {
							assert.NoError(t, a.Stop, "attempt %d: a retry followed", i+1)
						} else {
							assert.Equal(t, tt.reason, a.Stop, "the last attempt's Stop")
						}
					}
				})
			})
		}
	}
}

// The SDKs' own retries left on: a response llmretry gave up on is marked
// X-Should-Retry: false, so neither SDK sends it again, and GaveUp still
// reads the record off the *Error they return.
func TestGaveUpWithSDKRetriesOn(t *testing.T) {
	policy := llmretry.Policy{Waits: []time.Duration{time.Second, time.Second}, MaxRetries: 2}
	t.Run("openai-go", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.BadGateway())
			client := openAIClient(fakeOpenAIURL, retrying(t, prov, policy))
			_, err := client.Chat.Completions.New(context.Background(), openAIParams())
			var apiErr *openai.Error
			require.ErrorAs(t, err, &apiErr)
			gave := llmretry.GaveUp(apiErr.Response)
			require.NotNil(t, gave)
			assert.Equal(t, llmretry.ErrRetriesSpent, gave.Reason)
			assert.Equal(t, 3, gave.Attempts)
			assert.Equal(t, 3, prov.Attempts(), "the SDK did not resend it")
		})
	})
	t.Run("anthropic-sdk-go", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.AnthropicOverloaded())
			client := anthropicClient(fakeAnthropicURL, retrying(t, prov, policy))
			_, err := client.Messages.New(context.Background(), anthropicParams())
			var apiErr *anthropic.Error
			require.ErrorAs(t, err, &apiErr)
			gave := llmretry.GaveUp(apiErr.Response)
			require.NotNil(t, gave)
			assert.Equal(t, llmretry.ErrRetriesSpent, gave.Reason)
			assert.Equal(t, 3, gave.Attempts)
			assert.Equal(t, 3, prov.Attempts(), "the SDK did not resend it")
		})
	})
}
