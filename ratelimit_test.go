package llmretry

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A 429 without Retry-After still states its wait: in its message's words
// (OpenAI, Azure) or its rate-limit headers (OpenAI's resets, OpenRouter's
// instant); the retry waits that long, under MaxRetryAfter.
func TestRateLimitWaitsStated(t *testing.T) {
	openAIMessage := `{"error":{"message":"Rate limit reached for gpt-4o in organization org-abc on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 7.5s. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	cases := []struct {
		name   string
		header http.Header
		body   string
		policy Policy
		want   time.Duration // the gap before attempt 2; 0: no attempt 2
		reason error         // when no retry follows
	}{
		{"openai message", http.Header{"Content-Type": {"application/json"}, "X-Ratelimit-Reset-Requests": {"20s"}, "X-Ratelimit-Remaining-Requests": {"0"}}, openAIMessage, Policy{}, 7500 * time.Millisecond, nil},
		{"azure message", http.Header{"Content-Type": {"application/json"}}, `{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation have exceeded call rate limit of your current OpenAI S0 pricing tier. Please retry after 33 seconds."}}`, Policy{}, 33 * time.Second, nil},
		{"openai requests reset spent", http.Header{"X-Ratelimit-Reset-Requests": {"20s"}, "X-Ratelimit-Remaining-Requests": {"0"}, "X-Ratelimit-Reset-Tokens": {"6m0s"}, "X-Ratelimit-Remaining-Tokens": {"149984"}}, "", Policy{}, 20 * time.Second, nil},
		{"openai tokens reset spent", http.Header{"X-Ratelimit-Reset-Requests": {"1s"}, "X-Ratelimit-Remaining-Requests": {"59"}, "X-Ratelimit-Reset-Tokens": {"1m30s"}, "X-Ratelimit-Remaining-Tokens": {"0"}}, "", Policy{}, 90 * time.Second, nil},
		{"openai tokens too few for the request: requests remain, so the tokens are spent", http.Header{"X-Ratelimit-Reset-Requests": {"6ms"}, "X-Ratelimit-Remaining-Requests": {"9999"}, "X-Ratelimit-Reset-Tokens": {"58.5s"}, "X-Ratelimit-Remaining-Tokens": {"500"}}, "", Policy{}, 58500 * time.Millisecond, nil},
		{"openai neither says spent: the shorter", http.Header{"X-Ratelimit-Reset-Requests": {"12s"}, "X-Ratelimit-Reset-Tokens": {"6m0s"}}, "", Policy{}, 12 * time.Second, nil},
		{"openrouter reset instant", http.Header{"X-Ratelimit-Reset": {strconv.FormatInt(time.Date(2000, 1, 1, 0, 0, 40, 0, time.UTC).UnixMilli(), 10)}}, "", Policy{}, 40 * time.Second, nil},
		{"a reset above MaxRetryAfter", http.Header{"X-Ratelimit-Reset-Requests": {"10m0s"}, "X-Ratelimit-Remaining-Requests": {"0"}}, "", Policy{}, 0, ErrWaitTooLong},
		{"retry-after wins", http.Header{"Retry-After": {"3"}, "X-Ratelimit-Reset-Requests": {"20s"}}, openAIMessage, Policy{}, 3 * time.Second, nil},
		{"the schedule's longer wait wins", http.Header{"X-Ratelimit-Reset-Requests": {"2s"}}, "", Policy{Waits: []time.Duration{15 * time.Second}}, 15 * time.Second, nil},
		{"unreadable headers: the schedule", http.Header{"X-Ratelimit-Reset-Requests": {"soon"}, "X-Ratelimit-Reset": {"-5"}}, "", Policy{Waits: []time.Duration{4 * time.Second}}, 4 * time.Second, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The bubble's clock starts at 2000-01-01 00:00:00 UTC.
				prov := newProvider(step{status: 429, header: c.header, body: c.body}, ok)
				c.policy.MaxRetryAfter = 5 * time.Minute
				if c.policy.Waits == nil {
					c.policy.Waits = []time.Duration{time.Millisecond}
				}
				resp, err := post(t, mustNew(t, prov.mock, c.policy), context.Background())
				require.NoError(t, err)
				defer resp.Body.Close()
				if c.reason != nil {
					assert.Equal(t, 1, prov.attempts())
					require.NotNil(t, GaveUp(resp))
					assert.ErrorIs(t, GaveUp(resp).Reason, c.reason)
					return
				}
				require.Equal(t, 2, prov.attempts())
				assert.Equal(t, c.want, prov.gaps()[0])
				assert.Equal(t, 200, resp.StatusCode)
			})
		})
	}
}
