package interop

// The fake providers' replies (ratelimit_test.go): each provider's 429,
// as it words and heads it.

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/llmretry/llmretry/internal/testkit"
)

// openAIDuration renders d as OpenAI writes its waits and resets ("1.2s",
// "820ms", "6m0s"), rounded up to the millisecond so that it is never
// short.
func openAIDuration(d time.Duration) string {
	if r := d.Truncate(time.Millisecond); r < d {
		d = r + time.Millisecond
	}
	return d.String()
}

// openAIRequestsRefused is OpenAI's 429 for a spent request limit: no
// Retry-After, the wait in the message's words.
func openAIRequestsRefused(wait time.Duration) testkit.Reply {
	r := testkit.OpenAIError(http.StatusTooManyRequests,
		"Rate limit reached for gpt-4o in organization org-x on requests per min (RPM): Limit 60, Used 60, Requested 1. Please try again in "+
			openAIDuration(wait)+". Visit https://platform.openai.com/account/rate-limits to learn more.",
		"requests", "", "rate_limit_exceeded")
	r.Header.Del("Retry-After")
	return r
}

// openAITokensRefused is OpenAI's 429 for a spent token limit: no
// Retry-After, the limit, the tokens used and those requested, and the
// exact wait until the requested tokens are back, in the message's words.
// The shape is the one users quote from api.openai.com (checked against
// issue threads: BuilderIO/micro-agent#86 "Limit 30000, Used 29937,
// Requested 385. Please try again in 644ms.", semanser/codel#72 "Please
// try again in 18.642s.", continuedev/continue#10502 "in 3.89s", and
// MetaGPT#523 and shell_gpt#653 for "type":"tokens" with
// "code":"rate_limit_exceeded"), and the headers are those of OpenAI's
// rate-limits guide (x-ratelimit-limit-tokens 150000, -remaining-tokens
// 149984, -reset-tokens "6m0s": the time until the bucket is full).
func openAITokensRefused(limit, used, requested int, wait time.Duration) testkit.Reply {
	r := testkit.OpenAIError(http.StatusTooManyRequests,
		fmt.Sprintf("Rate limit reached for gpt-4o in organization org-fake on tokens per min (TPM): Limit %d, Used %d, Requested %d. Please try again in %s. Visit https://platform.openai.com/account/rate-limits to learn more.",
			limit, used, requested, openAIDuration(wait)),
		"tokens", "", "rate_limit_exceeded")
	r.Header.Del("Retry-After")
	return r
}

// anthropicRequestsRefused is Anthropic's 429 for a spent request limit
// (its caller adds retry-after).
func anthropicRequestsRefused(capacity int) testkit.Reply {
	return testkit.AnthropicError(http.StatusTooManyRequests, "rate_limit_error",
		fmt.Sprintf("This request would exceed the rate limit for your organization (4e4f8a29-7c1b-4b8e-9a52-1d2e3f4a5b6c) of %d requests per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later.", capacity*6)).
		With("X-Should-Retry", "true")
}

// anthropicAccelerationRefused is Anthropic's 429 for a sharp increase
// in usage (its caller adds retry-after): the published limits have room.
func anthropicAccelerationRefused() testkit.Reply {
	return testkit.AnthropicError(http.StatusTooManyRequests, "rate_limit_error",
		"This request would exceed your organization's rate limit: your usage increased too sharply. Please ramp up your traffic gradually. For details, refer to: https://docs.claude.com/en/api/rate-limits.").
		With("X-Should-Retry", "true")
}

// concurrencyAnswer is an Anthropic message under a concurrency limit:
// Anthropic publishes no header for it.
func concurrencyAnswer() testkit.Reply {
	r := testkit.AnthropicMessage("Paced: here is your answer.")
	r.Header.Del("Anthropic-Ratelimit-Requests-Limit")
	r.Header.Del("Anthropic-Ratelimit-Requests-Remaining")
	return r
}

// concurrencyRefused is Anthropic's 429 for too many requests in flight.
func concurrencyRefused() testkit.Reply {
	r := testkit.AnthropicError(http.StatusTooManyRequests, "rate_limit_error",
		"Number of concurrent connections has exceeded your rate limit. Please try again later or contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase.").
		With("Retry-After", "1").
		With("X-Should-Retry", "true")
	r.Header.Del("Anthropic-Ratelimit-Requests-Limit")
	r.Header.Del("Anthropic-Ratelimit-Requests-Remaining")
	return r
}

// openRouterRefusedBody is OpenRouter's 429 body: the limit's headers
// echoed in metadata, no wait in words.
func openRouterRefusedBody(limit int, reset string) string {
	return `{"error":{"message":"Rate limit exceeded: limit_rpm/openai/gpt-4o-mini. ","code":429,"metadata":{"headers":{"X-RateLimit-Limit":"` +
		strconv.Itoa(limit) + `","X-RateLimit-Remaining":"0","X-RateLimit-Reset":"` + reset + `"},"provider_name":null}},"user_id":"user_dummy"}`
}
