package interop

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
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
)

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
