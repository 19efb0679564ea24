package interop

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
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
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
	goopenai "github.com/sashabaranov/go-openai"
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
			apiErr := openAIError(t, client)
			assert.Equal(t, 429, apiErr.StatusCode)
			assert.Equal(t, "insufficient_quota", apiErr.Code)
			assert.Equal(t, 1, prov.Attempts(), "a spent quota is not waited for")
		})
	})

	t.Run("openai insufficient_quota is final, SDK retries on (awaits-final-mark)", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.OpenAIInsufficientQuota())
			client := openAIClient(fakeOpenAIURL, retrying(t, prov, twoRetries))
			apiErr := openAIError(t, client)
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
			apiErr := anthropicError(t, client)
			assert.Equal(t, 429, apiErr.StatusCode)
			assert.EqualValues(t, "enforced_spend_limit_reached", apiErr.ErrorCode())
			assert.Equal(t, 1, prov.Attempts(), "a spend cap is not waited for")
		})
	})

	t.Run("anthropic spend limit is final, SDK retries on (awaits-final-mark)", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.AnthropicSpendLimit())
			client := anthropicClient(fakeAnthropicURL, retrying(t, prov, twoRetries))
			apiErr := anthropicError(t, client)
			assert.EqualValues(t, "enforced_spend_limit_reached", apiErr.ErrorCode())
			assert.Equal(t, 1, prov.Attempts(), "neither llmretry nor the SDK resent it")
		})
	})

	t.Run("anthropic x-should-retry false stops a 529", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.AnthropicOverloaded().With("X-Should-Retry", "false"), testkit.AnthropicMessage("unreachable"))
			client := anthropicClient(fakeAnthropicURL, retrying(t, prov, twoRetries), antoption.WithMaxRetries(0))
			apiErr := anthropicError(t, client)
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
					attempts := rec.All()
					require.Len(t, attempts, tt.attempts)
					for i, a := range attempts {
						if i < len(attempts)-1 {
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
	for _, tt := range []struct {
		name  string
		fault testkit.Reply
		// call makes the call through rt, the SDK's retries on, and returns
		// the response its *Error carries.
		call func(t *testing.T, rt http.RoundTripper) *http.Response
	}{
		{"openai-go", testkit.BadGateway(), func(t *testing.T, rt http.RoundTripper) *http.Response {
			return openAIError(t, openAIClient(fakeOpenAIURL, rt)).Response
		}},
		{"anthropic-sdk-go", testkit.AnthropicOverloaded(), func(t *testing.T, rt http.RoundTripper) *http.Response {
			return anthropicError(t, anthropicClient(fakeAnthropicURL, rt)).Response
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(tt.fault)
				gave := llmretry.GaveUp(tt.call(t, retrying(t, prov, policy)))
				require.NotNil(t, gave)
				assert.Equal(t, llmretry.ErrRetriesSpent, gave.Reason)
				assert.Equal(t, 3, gave.Attempts)
				assert.Equal(t, 3, prov.Attempts(), "the SDK did not resend it")
			})
		})
	}
}

// Streams guarded until committed, through the SDKs that read them. With
// RetryStreams, llmretry reads a 200 text/event-stream ahead to its first
// event that carries content; an error there (Anthropic's "event: error",
// OpenAI's "data: {"error":…}") makes the attempt a failure, retried like
// the status it stands for, and the SDK reads only the good attempt. An
// error after content is the SDK's to report: nothing is resent.

// anthropicBrokenStream is a 200 stream that sends the first n events of a
// good stream (message_start, content_block_start, ping, then the deltas)
// and then errEvent.
func anthropicBrokenStream(n int, errEvent string) testkit.Reply {
	r := testkit.AnthropicStream(streamParts...)
	r.Events = append(append([]string(nil), r.Events[:n]...), errEvent)
	return r
}

// openAIBrokenStream is a 200 chat stream that sends the first n chunks of
// a good stream (the role chunk, then one chunk per part) and then the
// error chunk and [DONE].
func openAIBrokenStream(n int) testkit.Reply {
	r := testkit.OpenAIChatStream(streamParts...)
	r.Events = append(append([]string(nil), r.Events[:n]...), testkit.OpenAIErrorChunk, "data: [DONE]\n\n")
	return r
}

// anthropic-sdk-go's Messages.NewStreaming: a 200 whose first event is an
// error (after none, some or all of the preamble: message_start,
// content_block_start, ping) is retried, and the SDK gets the second
// attempt's whole text and no error, with its own retries off or on.
func TestAnthropicStreamErrorFirstRetried(t *testing.T) {
	for _, tt := range []struct {
		name     string
		preamble int // events of the good stream sent before the error
		event    string
	}{
		{"overloaded_error first", 0, testkit.AnthropicErrorEvent("overloaded_error", "Overloaded")},
		{"message_start then overloaded_error", 1, testkit.AnthropicErrorEvent("overloaded_error", "Overloaded")},
		{"whole preamble and ping then overloaded_error", 3, testkit.AnthropicErrorEvent("overloaded_error", "Overloaded")},
		{"api_error after message_start", 1, testkit.AnthropicErrorEvent("api_error", "Internal server error")},
		{"rate_limit_error after message_start", 1, testkit.AnthropicErrorEvent("rate_limit_error", "Rate limited")},
	} {
		for _, sdkRetries := range []bool{false, true} {
			name := tt.name + "/SDK retries off"
			if sdkRetries {
				name = tt.name + "/SDK retries on"
			}
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					prov := testkit.NewProvider(anthropicBrokenStream(tt.preamble, tt.event), testkit.AnthropicStream(streamParts...))
					var rec recorder
					rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: true, OnAttempt: rec.on})
					var opts []antoption.RequestOption
					if !sdkRetries {
						opts = append(opts, antoption.WithMaxRetries(0))
					}
					text, err := anthropicStreamText(t, anthropicClient(fakeAnthropicURL, rt, opts...))
					require.NoError(t, err, "the SDK never saw the error event")
					assert.Equal(t, streamText, text, "the whole text, once")
					assert.Equal(t, 2, prov.Attempts())
					assert.Equal(t, []time.Duration{2 * time.Second}, prov.Gaps())
					assert.Equal(t, []time.Duration{2 * time.Second, 0}, rec.retryIns())
				})
			})
		}
	}

	// Over a real loopback connection, each event flushed on its own: the
	// SDK reads exactly the good attempt's bytes.
	t.Run("over the wire", func(t *testing.T) {
		prov := testkit.NewProvider(anthropicBrokenStream(1, testkit.AnthropicErrorEvent("overloaded_error", "Overloaded")), testkit.AnthropicStream(streamParts...))
		srv := httptest.NewServer(prov)
		defer srv.Close()
		rt := retrying(t, srv.Client().Transport, llmretry.Policy{Waits: []time.Duration{0}, RetryStreams: true})
		text, err := anthropicStreamText(t, anthropicClient(srv.URL+"/", rt, antoption.WithMaxRetries(0)))
		require.NoError(t, err)
		assert.Equal(t, streamText, text)
		assert.Equal(t, 2, prov.Attempts())
	})

	// Without RetryStreams the stream is handed over as it came: the SDK
	// reports the error event.
	t.Run("without RetryStreams the SDK reports it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(anthropicBrokenStream(1, testkit.AnthropicErrorEvent("overloaded_error", "Overloaded")), testkit.AnthropicStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}})
			text, err := anthropicStreamText(t, anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0)))
			var apiErr *anthropic.Error
			require.ErrorAs(t, err, &apiErr)
			assert.EqualValues(t, "overloaded_error", apiErr.Type())
			assert.Empty(t, text)
			assert.Equal(t, 1, prov.Attempts())
		})
	})
}

// A stream that has carried content is committed: an overloaded_error
// after the first delta reaches the SDK (stream.Err()), with the text that
// came before it, and is never resent (TestAnthropicStream has the same
// with the SDK's retries on).
func TestAnthropicStreamErrorAfterContentNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(anthropicBrokenStream(4, testkit.AnthropicErrorEvent("overloaded_error", "Overloaded")), testkit.AnthropicStream(streamParts...))
		rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: true})
		text, err := anthropicStreamText(t, anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0)))
		var apiErr *anthropic.Error
		require.ErrorAs(t, err, &apiErr)
		assert.EqualValues(t, "overloaded_error", apiErr.Type())
		assert.Equal(t, "Hel", text)
		assert.Equal(t, 1, prov.Attempts())
	})
}

// openai-go's Chat.Completions.NewStreaming: a 200 whose first chunk is
// {"error":…} (server_error) is retried, and the SDK gets the second
// attempt's whole text; an error chunk after a content chunk reaches
// stream.Err() as openai-go's *ssestream.StreamError, 1 attempt.
func TestOpenAIStreamErrorFirst(t *testing.T) {
	t.Run("error first is retried", func(t *testing.T) {
		for _, sdkRetries := range []bool{false, true} {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(openAIBrokenStream(0), testkit.OpenAIChatStream(streamParts...))
				rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: true})
				var opts []oaoption.RequestOption
				if !sdkRetries {
					opts = append(opts, oaoption.WithMaxRetries(0))
				}
				text, err := openAIStreamText(openAIClient(fakeOpenAIURL, rt, opts...))
				require.NoError(t, err, "SDK retries %v", sdkRetries)
				assert.Equal(t, streamText, text)
				assert.Equal(t, 2, prov.Attempts())
				assert.Equal(t, []time.Duration{2 * time.Second}, prov.Gaps())
			})
		}
	})

	t.Run("error first over the wire", func(t *testing.T) {
		prov := testkit.NewProvider(openAIBrokenStream(0), testkit.OpenAIChatStream(streamParts...))
		srv := httptest.NewServer(prov)
		defer srv.Close()
		rt := retrying(t, srv.Client().Transport, llmretry.Policy{Waits: []time.Duration{0}, RetryStreams: true})
		text, err := openAIStreamText(openAIClient(srv.URL+"/v1/", rt, oaoption.WithMaxRetries(0)))
		require.NoError(t, err)
		assert.Equal(t, streamText, text)
		assert.Equal(t, 2, prov.Attempts())
	})

	t.Run("error after content is not retried", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// The role chunk, "Hel", then the error.
			prov := testkit.NewProvider(openAIBrokenStream(2), testkit.OpenAIChatStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: true})
			text, err := openAIStreamText(openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0)))
			var streamErr *ssestream.StreamError
			require.ErrorAs(t, err, &streamErr)
			assert.Contains(t, streamErr.Message, "server_error")
			assert.Equal(t, "Hel", text, "what came before the error stays delivered")
			assert.Equal(t, 1, prov.Attempts())
		})
	})

	// Every chat stream opens with a chunk that carries only the role
	// ({"delta":{"role":"assistant","content":"","refusal":null}}). No
	// content has come: llmretry reads past it, and an error chunk right
	// after it is retried like one that comes first.
	t.Run("error after the role chunk is retried", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(openAIBrokenStream(1), testkit.OpenAIChatStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: true})
			text, err := openAIStreamText(openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0)))
			require.NoError(t, err)
			assert.Equal(t, streamText, text)
			assert.Equal(t, 2, prov.Attempts())
		})
	})

	t.Run("without RetryStreams the SDK reports it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(openAIBrokenStream(0), testkit.OpenAIChatStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}})
			_, err := openAIStreamText(openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0)))
			var streamErr *ssestream.StreamError
			require.ErrorAs(t, err, &streamErr)
			assert.Equal(t, 1, prov.Attempts())
		})
	})
}

// sashabaranov/go-openai's CreateChatCompletionStream: the same error chunk
// first is retried with RetryStreams (the caller reads the whole text);
// without it go-openai's Recv returns the error as *openai.APIError.
func TestGoOpenAIStreamErrorFirst(t *testing.T) {
	for _, retry := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(openAIBrokenStream(0), testkit.OpenAIChatStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: retry})
			stream, err := goOpenAIClient(fakeOpenAIURL, rt).CreateChatCompletionStream(context.Background(), goOpenAIChat())
			require.NoError(t, err, "a 200")
			text, err := goOpenAIStreamText(stream)
			if retry {
				require.NoError(t, err)
				assert.Equal(t, streamText, text)
				assert.Equal(t, 2, prov.Attempts())
				return
			}
			var apiErr *goopenai.APIError
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, "server_error", apiErr.Type)
			assert.Equal(t, 1, prov.Attempts())
		})
	}
}

// The three timeouts through the SDKs that read streams.
func TestStreamTimeoutsThroughSDKs(t *testing.T) {
	// AttemptTimeout: a provider that takes the connection and sends no
	// headers for 10 minutes is abandoned after 30 s and the call retried.
	t.Run("AttemptTimeout: a silent provider is abandoned and retried", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.AnthropicStream(streamParts...).After(10*time.Minute), testkit.AnthropicStream(streamParts...))
			var rec recorder
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{time.Second}, RetryStreams: true, AttemptTimeout: 30 * time.Second, OnAttempt: rec.on})
			start := time.Now()
			text, err := anthropicStreamText(t, anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0)))
			require.NoError(t, err)
			assert.Equal(t, streamText, text)
			assert.Equal(t, 2, prov.Attempts())
			assert.Equal(t, []time.Duration{31 * time.Second}, prov.Gaps(), "30 s bound, then the 1-s wait")
			assert.Equal(t, 31*time.Second, time.Since(start))
			require.Len(t, rec.All(), 2)
			require.Error(t, rec.All()[0].Err)
			assert.Contains(t, rec.All()[0].Err.Error(), "AttemptTimeout")
		})
	})

	t.Run("AttemptTimeout: openai-go without a stream", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.OpenAIChatCompletion("late").After(10*time.Minute), testkit.OpenAIChatCompletion(streamText))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{time.Second}, AttemptTimeout: 2 * time.Minute})
			client := openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0))
			got, err := client.Chat.Completions.New(context.Background(), openAIParams())
			require.NoError(t, err)
			assert.Equal(t, streamText, got.Choices[0].Message.Content)
			assert.Equal(t, []time.Duration{2*time.Minute + time.Second}, prov.Gaps())
		})
	})

	// FirstEventTimeout: a 200 whose stream sends message_start and then
	// nothing is abandoned 10 s after its headers and retried.
	t.Run("FirstEventTimeout: a stream that never starts is retried", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			silent := testkit.AnthropicStream(streamParts...)
			silent.Events = silent.Events[:1]
			prov := testkit.NewProvider(silent.Stalled(), testkit.AnthropicStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{time.Second}, RetryStreams: true, FirstEventTimeout: 10 * time.Second})
			text, err := anthropicStreamText(t, anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0)))
			require.NoError(t, err)
			assert.Equal(t, streamText, text, "the SDK read only the good attempt")
			assert.Equal(t, []time.Duration{11 * time.Second}, prov.Gaps())
		})
	})

	t.Run("FirstEventTimeout: openai-go", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			silent := testkit.OpenAIChatStream(streamParts...)
			silent.Events = nil
			prov := testkit.NewProvider(silent.Stalled(), testkit.OpenAIChatStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{time.Second}, RetryStreams: true, FirstEventTimeout: 10 * time.Second})
			text, err := openAIStreamText(openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0)))
			require.NoError(t, err)
			assert.Equal(t, streamText, text)
			assert.Equal(t, []time.Duration{11 * time.Second}, prov.Gaps())
		})
	})

	// StreamIdleTimeout: a committed stream that goes silent after "Hel"
	// ends with an error from the SDK (not a clean, truncated end) once
	// 30 s pass without a byte; it is not resent.
	t.Run("StreamIdleTimeout: a stall after commit fails the SDK's read", func(t *testing.T) {
		type result struct {
			text string
			err  error
		}
		sdks := []struct {
			name  string
			stall testkit.Reply
			read  func(t *testing.T, rt *llmretry.Transport) result
		}{
			{"anthropic-sdk-go", func() testkit.Reply {
				r := testkit.AnthropicStream(streamParts...)
				r.Events = r.Events[:4]
				return r.Stalled()
			}(), func(t *testing.T, rt *llmretry.Transport) result {
				text, err := anthropicStreamText(t, anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0)))
				return result{text, err}
			}},
			{"openai-go", func() testkit.Reply {
				r := testkit.OpenAIChatStream(streamParts...)
				r.Events = r.Events[:2]
				return r.Stalled()
			}(), func(t *testing.T, rt *llmretry.Transport) result {
				text, err := openAIStreamText(openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0)))
				return result{text, err}
			}},
			{"go-openai", func() testkit.Reply {
				r := testkit.OpenAIChatStream(streamParts...)
				r.Events = r.Events[:2]
				return r.Stalled()
			}(), func(t *testing.T, rt *llmretry.Transport) result {
				stream, err := goOpenAIClient(fakeOpenAIURL, rt).CreateChatCompletionStream(context.Background(), goOpenAIChat())
				require.NoError(t, err)
				text, err := goOpenAIStreamText(stream)
				return result{text, err}
			}},
		}
		for _, sdk := range sdks {
			t.Run(sdk.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					prov := testkit.NewProvider(sdk.stall, testkit.AnthropicStream(streamParts...))
					rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{time.Second}, RetryStreams: true, StreamIdleTimeout: 30 * time.Second})
					start := time.Now()
					got := sdk.read(t, rt)
					require.Error(t, got.err, "a stall is never a clean end")
					assert.NotErrorIs(t, got.err, io.EOF)
					assert.Contains(t, got.err.Error(), "StreamIdleTimeout")
					assert.Equal(t, "Hel", got.text, "what came before the stall")
					assert.Equal(t, 30*time.Second, time.Since(start), "within the idle bound")
					assert.Equal(t, 1, prov.Attempts(), "committed: not resent")
				})
			})
		}
	})
}

// openai-go's Responses.NewStreaming: a 200 whose first event after the
// preamble (response.created, response.in_progress) is "event: error"
// with server_is_overloaded. openai-go hands that event to the caller as
// an ordinary event of type "error", not as stream.Err(); with
// RetryStreams the attempt is retried and the caller reads the second
// attempt's whole text.
func TestOpenAIResponsesStreamErrorFirst(t *testing.T) {
	broken := testkit.OpenAIResponsesStream(streamParts...)
	broken.Events = append(broken.Events[:2:2],
		"event: error\ndata: {\"type\":\"error\",\"code\":\"server_is_overloaded\",\"message\":\"The server is overloaded. Please try again later.\",\"param\":null,\"sequence_number\":2}\n\n")
	read := func(client openai.Client) (text string, errorEvents int, err error) {
		stream := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
			Model: openAIModel,
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello.")},
		})
		defer stream.Close()
		var b strings.Builder
		for stream.Next() {
			switch ev := stream.Current(); ev.Type {
			case "response.output_text.delta":
				b.WriteString(ev.Delta)
			case "error":
				errorEvents++
			}
		}
		return b.String(), errorEvents, stream.Err()
	}
	for _, retry := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(broken, testkit.OpenAIResponsesStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: retry})
			text, errorEvents, err := read(openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0)))
			require.NoError(t, err)
			if retry {
				assert.Equal(t, streamText, text)
				assert.Zero(t, errorEvents)
				assert.Equal(t, 2, prov.Attempts())
				assert.True(t, llmretry.IsStream(prov.Received()[0].Request(t)))
				return
			}
			assert.Empty(t, text)
			assert.Equal(t, 1, errorEvents, "the caller must spot the error event itself")
			assert.Equal(t, 1, prov.Attempts())
		})
	}
}

// genai's GenerateContentStream: a 200 whose first event is Gemini's
// {"error":{"code":503,…,"status":"UNAVAILABLE"}} reaches the caller as an
// error after 1 attempt; with RetryStreams it is retried and the caller
// reads the second attempt's text.
func TestGeminiStreamErrorFirst(t *testing.T) {
	unavailable := testkit.GeminiStream("unused")
	unavailable.Events = []string{`data: {"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}` + "\r\n\r\n"}
	for _, retry := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(unavailable, testkit.GeminiStream("Hel", "lo!"))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: retry})
			client := geminiClient(t, fakeGeminiURL, rt, nil)
			var text strings.Builder
			var err error
			for chunk, cerr := range client.Models.GenerateContentStream(context.Background(), geminiModel, geminiPrompt(), nil) {
				if cerr != nil {
					err = cerr
					break
				}
				text.WriteString(chunk.Text())
			}
			if retry {
				require.NoError(t, err)
				assert.Equal(t, "Hello!", text.String())
				assert.Equal(t, 2, prov.Attempts())
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "UNAVAILABLE")
			assert.Equal(t, 1, prov.Attempts())
		})
	}
}
