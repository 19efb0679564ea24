package coord

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestSpentPace(t *testing.T) {
	sent := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	cases := []struct {
		name    string
		header  http.Header
		cost    int64
		arrived time.Duration // after sent, when the answer was back (0: at once)
		want    pace
		spent   bool
	}{
		{
			name:   "OpenAI requests spent: a reset counts from when the request was sent",
			header: h("x-ratelimit-limit-requests", "10", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "10s"),
			want:   pace{burst: 10, every: time.Second, full: sent.Add(10 * time.Second)}, spent: true,
		},
		{
			name:   "a window read from whole requests is the round one it fits (9.9 s for 10 requests: between 9.9 s and 11 s; 10 s)",
			header: h("x-ratelimit-limit-requests", "10", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "9.9s"),
			want:   pace{burst: 10, every: time.Second, full: sent.Add(9900 * time.Millisecond)}, spent: true,
		},
		{
			name:   "a window that fits no round one is read from the count (12.6 s for 10 requests: between 12.6 s and 14 s)",
			header: h("x-ratelimit-limit-requests", "10", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "12.6s"),
			want:   pace{burst: 10, every: 1260 * time.Millisecond, full: sent.Add(12600 * time.Millisecond)}, spent: true,
		},
		{
			name:   "a token window printed a hair short still fits its minute",
			header: h("x-ratelimit-limit-tokens", "20000", "x-ratelimit-remaining-tokens", "500", "x-ratelimit-reset-tokens", "58.4s"),
			cost:   1000,
			want:   pace{burst: 20, every: 3 * time.Second, full: sent.Add(58400 * time.Millisecond)}, spent: true,
		},
		{
			name:    "a reset instant measured late in a slow attempt still reads its round window (Anthropic, 10.5 s for 10 requests, back at 2.5 s: between 8 s and 11.7 s)",
			header:  h("anthropic-ratelimit-requests-limit", "10", "anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", sent.Add(10500*time.Millisecond).Format(time.RFC3339Nano)),
			arrived: 2500 * time.Millisecond,
			want:    pace{burst: 10, every: time.Second, full: sent.Add(10500 * time.Millisecond)}, spent: true,
		},
		{
			name:    "an instant printed to the second (rounded up) still reads its round window (Anthropic, 11 s for 10 requests: full truly between 9.9 s and 12 s)",
			header:  h("anthropic-ratelimit-requests-limit", "10", "anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", sent.Add(11*time.Second).Format(time.RFC3339)),
			arrived: 100 * time.Millisecond,
			want:    pace{burst: 10, every: time.Second, full: sent.Add(11 * time.Second)}, spent: true,
		},
		{
			name:    "of several round windows in the span, the one nearest the longest reading (61 s for 60 requests, back at 55 s: 1 min, not 10 s)",
			header:  h("anthropic-ratelimit-requests-limit", "60", "anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", sent.Add(61*time.Second).Format(time.RFC3339Nano)),
			arrived: 55 * time.Second,
			want:    pace{burst: 60, every: time.Second, full: sent.Add(61 * time.Second)}, spent: true,
		},
		{
			name:    "a relative reset is the time to full whenever it was measured: a slow attempt changes nothing (12.6 s, back at 5 s)",
			header:  h("x-ratelimit-limit-requests", "10", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "12.6s"),
			arrived: 5 * time.Second,
			want:    pace{burst: 10, every: 1260 * time.Millisecond, full: sent.Add(12600 * time.Millisecond)}, spent: true,
		},
		{
			name:   "OpenAI requests not spent",
			header: h("x-ratelimit-limit-requests", "10", "x-ratelimit-remaining-requests", "3", "x-ratelimit-reset-requests", "7s"),
		},
		{
			name:   "OpenAI requests partly used: the rate is what is missing over the time to full",
			header: h("x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1m0s"),
			want:   pace{burst: 60, every: time.Second, full: sent.Add(time.Minute)}, spent: true,
		},
		{
			name:   "OpenAI tokens, cost unknown: not read",
			header: h("x-ratelimit-limit-tokens", "20000", "x-ratelimit-remaining-tokens", "500", "x-ratelimit-reset-tokens", "58.5s"),
		},
		{
			name:   "OpenAI tokens below one request's cost",
			header: h("x-ratelimit-limit-tokens", "20000", "x-ratelimit-remaining-tokens", "500", "x-ratelimit-reset-tokens", "58.5s"),
			cost:   1000,
			want:   pace{burst: 20, every: 3 * time.Second, full: sent.Add(58500 * time.Millisecond)}, spent: true,
		},
		{
			name:   "OpenAI tokens enough for one more request",
			header: h("x-ratelimit-limit-tokens", "20000", "x-ratelimit-remaining-tokens", "1000", "x-ratelimit-reset-tokens", "57s"),
			cost:   1000,
		},
		{
			name: "both spent: the slower paces",
			header: h("x-ratelimit-limit-requests", "10", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "10s",
				"x-ratelimit-limit-tokens", "20000", "x-ratelimit-remaining-tokens", "500", "x-ratelimit-reset-tokens", "58.5s"),
			cost: 1000,
			want: pace{burst: 20, every: 3 * time.Second, full: sent.Add(58500 * time.Millisecond)}, spent: true,
		},
		{
			name: "Anthropic: an RFC 3339 instant",
			header: h("anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "0",
				"anthropic-ratelimit-requests-reset", sent.Add(25*time.Second).Format(time.RFC3339)),
			want: pace{burst: 50, every: 500 * time.Millisecond, full: sent.Add(25 * time.Second)}, spent: true,
		},
		{
			name:   "OpenRouter: Unix milliseconds",
			header: h("X-RateLimit-Limit", "20", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1796126410000"),
			want:   pace{burst: 20, every: 500 * time.Millisecond, full: time.UnixMilli(1796126410000)}, spent: true,
		},
		{
			name:   "OpenRouter: Unix seconds",
			header: h("X-RateLimit-Limit", "20", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1796126410"),
			want:   pace{burst: 20, every: 500 * time.Millisecond, full: time.Unix(1796126410, 0)}, spent: true,
		},
		{name: "Azure: remaining only, no reset", header: h("x-ratelimit-remaining-requests", "0")},
		{name: "Azure Responses: -1 for unknown", header: h("x-ratelimit-limit-requests", "10", "x-ratelimit-remaining-requests", "-1", "x-ratelimit-reset-requests", "1s")},
		{name: "a reset it cannot read", header: h("x-ratelimit-limit-requests", "10", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "soon")},
		{name: "a negative reset", header: h("x-ratelimit-limit-requests", "10", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "-3s")},
		{name: "a reset already past", header: h("X-RateLimit-Limit", "20", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1000000000")},
		{name: "a limit it cannot read", header: h("x-ratelimit-limit-requests", "ten", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1s")},
		{name: "a zero limit", header: h("x-ratelimit-limit-requests", "0", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1s")},
		{name: "no headers", header: http.Header{}},
		{name: "nil headers"},
		{
			name:   "a burst beyond any provider's is bounded",
			header: h("x-ratelimit-limit-requests", "10000000", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1h"),
			want:   pace{burst: maxBurst, every: 360 * time.Microsecond, full: sent.Add(time.Hour)}, spent: true,
		},
		{
			name:   "a limit so large that no pace is left says nothing",
			header: h("x-ratelimit-limit-requests", "9223372036854775807", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1h"),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, spent := spentPace(c.header, sent, sent.Add(c.arrived), c.cost)
			assert.Equal(t, c.spent, spent)
			if c.spent {
				assert.Equal(t, c.want.burst, got.burst, "burst")
				assert.InDelta(t, float64(c.want.every), float64(got.every), float64(time.Microsecond), "every")
				assert.True(t, c.want.full.Equal(got.full), "full: want %v, got %v", c.want.full, got.full)
			}
		})
	}
}

// Reading the headers on the success path allocates nothing.
func TestSpentPaceAllocatesNothing(t *testing.T) {
	h := http.Header{}
	h.Set("x-ratelimit-limit-requests", "10")
	h.Set("x-ratelimit-remaining-requests", "7")
	h.Set("x-ratelimit-reset-requests", "3s")
	now := time.Now()
	assert.Zero(t, testing.AllocsPerRun(100, func() { spentPace(h, now, now, 0) }))
}

func TestRequestedTokens(t *testing.T) {
	cases := []struct {
		body string
		want int64
	}{
		{`{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29500, Requested 1200. Please try again in 1.4s.","type":"tokens"}}`, 1200},
		{`{"error":{"message":"Rate limit reached for requests"}}`, 0},
		{`Requested `, 0},
		{`Requested 99999999999999999999999`, 999999999999},
		{`Requested x12`, 0},
		{``, 0},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, requestedTokens([]byte(c.body)), c.body)
	}
}

// Whatever the headers say, a pace read from them is one a gate can use:
// a positive rate, a burst within bounds, a full instant after the send;
// and reading them never panics.
func FuzzSpentPace(f *testing.F) {
	f.Add("10", "0", "10s", "", "", "", int64(0))
	f.Add("20000", "500", "58.5s", "", "", "", int64(1000))
	f.Add("", "", "", "50", "0", "2026-12-01T12:00:25Z", int64(0))
	f.Add("9223372036854775807", "0", "2562047h", "-1", "-1", "1796126410000", int64(-5))
	f.Fuzz(func(t *testing.T, limit, remaining, reset, aLimit, aRemaining, aReset string, cost int64) {
		sent := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
		h := http.Header{
			"X-Ratelimit-Limit-Requests":             {limit},
			"X-Ratelimit-Remaining-Requests":         {remaining},
			"X-Ratelimit-Reset-Requests":             {reset},
			"X-Ratelimit-Limit-Tokens":               {limit},
			"X-Ratelimit-Remaining-Tokens":           {remaining},
			"X-Ratelimit-Reset-Tokens":               {reset},
			"Anthropic-Ratelimit-Requests-Limit":     {aLimit},
			"Anthropic-Ratelimit-Requests-Remaining": {aRemaining},
			"Anthropic-Ratelimit-Requests-Reset":     {aReset},
			"X-Ratelimit-Limit":                      {aLimit},
			"X-Ratelimit-Remaining":                  {aRemaining},
			"X-Ratelimit-Reset":                      {aReset},
		}
		for _, read := range []func(http.Header, time.Time, time.Time, int64) (pace, bool){spentPace, statedPace} {
			p, ok := read(h, sent, sent.Add(2*time.Second), cost)
			if !ok {
				continue
			}
			if p.every <= 0 || p.burst < 1 || p.burst > maxBurst || !p.full.After(sent) {
				t.Fatalf("an unusable pace: %+v", p)
			}
		}
	})
}

// statedPace reads a published bucket with requests left as spentPace
// reads a spent one: Anthropic's 60 a minute with 4 left, sent at 34 s of
// the bucket's cycle and full again at 90 s, is a bucket of 60, one back
// a second, whose next request is due at once (and after 4 more sends,
// 1 s later). A full bucket says nothing; of two dimensions, the one due
// last paces.
func TestStatedPace(t *testing.T) {
	sent := time.Date(2026, 12, 1, 12, 0, 34, 0, time.UTC)
	h := http.Header{
		"Anthropic-Ratelimit-Requests-Limit":     {"60"},
		"Anthropic-Ratelimit-Requests-Remaining": {"4"},
		"Anthropic-Ratelimit-Requests-Reset":     {sent.Add(56 * time.Second).Format(time.RFC3339)},
	}
	_, spent := spentPace(h, sent, sent.Add(2*time.Second), 0)
	assert.False(t, spent, "4 requests left: not spent")
	p, ok := statedPace(h, sent, sent.Add(2*time.Second), 0)
	assert.True(t, ok)
	assert.Equal(t, pace{burst: 60, every: time.Second, full: sent.Add(56 * time.Second)}, p)
	assert.Equal(t, sent.Add(-3*time.Second), p.due(), "4 left: due 3 s before it was sent")

	full := http.Header{
		"X-Ratelimit-Limit-Requests":     {"60"},
		"X-Ratelimit-Remaining-Requests": {"60"},
		"X-Ratelimit-Reset-Requests":     {"0s"},
	}
	_, ok = statedPace(full, sent, sent, 0)
	assert.False(t, ok, "a full bucket")

	two := http.Header{
		"X-Ratelimit-Limit-Requests":     {"10000"},
		"X-Ratelimit-Remaining-Requests": {"9999"},
		"X-Ratelimit-Reset-Requests":     {"6ms"},
		"X-Ratelimit-Limit-Tokens":       {"20000"},
		"X-Ratelimit-Remaining-Tokens":   {"1500"},
		"X-Ratelimit-Reset-Tokens":       {"55.5s"},
	}
	p, ok = statedPace(two, sent, sent, 1000)
	assert.True(t, ok)
	assert.Equal(t, pace{burst: 20, every: 3 * time.Second, full: sent.Add(55500 * time.Millisecond)}, p, "the token limit, due last")
}
