package llmretry

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What providers say in their error replies changes what the Transport
// does, and the caller still reads the provider's whole body.
func TestProviderSignalsThroughTheTransport(t *testing.T) {
	long := strings.Repeat("x", 3*signalPeek)
	cases := []struct {
		name     string
		first    step
		attempts int           // provider attempts with a schedule of one 1 s retry
		gap      time.Duration // the wait before the retry, when there is one
	}{
		{"openai insufficient_quota is final", step{status: 429, body: `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`}, 1, 0},
		{"openai rate limit is retried", step{status: 429, body: `{"error":{"message":"Rate limit reached","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`}, 2, time.Second},
		{"anthropic spend limit is final", step{status: 429, body: `{"type":"error","error":{"type":"rate_limit_error","message":"spend limit","details":{"error_code":"enforced_spend_limit_reached"}}}`}, 1, 0},
		{"anthropic overloaded is retried", step{status: 529, body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}, 2, time.Second},
		{"gemini RetryInfo is the wait", step{status: 429, body: `{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"26.5s"}]}}`}, 2, 26500 * time.Millisecond},
		{"gemini per-day quota is final", step{status: 429, body: `{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"26s"}]}}`}, 1, 0},
		{"x-should-retry false beats 503", step{status: 503, header: map[string][]string{"X-Should-Retry": {"false"}}, body: "down"}, 1, 0},
		{"x-should-retry true makes 409 retried", step{status: 409, header: map[string][]string{"X-Should-Retry": {"true"}}, body: "conflict"}, 2, time.Second},
		{"a long error body is peeked, not read", step{status: 503, body: long}, 2, time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The provider fails the same way every time, so the
				// response the caller sees is the first reply's twin.
				prov := newProvider(c.first)
				resp, err := post(t, mustNew(t, prov.mock, Policy{Waits: []time.Duration{time.Second}}), context.Background())
				require.NoError(t, err)
				assert.Equal(t, c.attempts, prov.attempts())
				if c.attempts == 2 {
					assert.Equal(t, []time.Duration{c.gap}, prov.gaps())
				}
				assert.Equal(t, c.first.status, resp.StatusCode)
				if c.attempts == 1 {
					// Final by the provider's word: SDKs above must not
					// resend it either.
					assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
				}
				assert.Equal(t, c.first.body, bodyOf(t, resp), "the caller reads the provider's whole body")
			})
		})
	}
}
