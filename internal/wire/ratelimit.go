package wire

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RateLimit names the headers of one dimension of a provider's published
// rate limit: its limit, what remains of it, and when it is full again. It
// is a plain value.
type RateLimit struct {
	// Limit, Remaining and Reset are the headers' canonical names, so that
	// reading them from an http.Header map allocates nothing.
	Limit, Remaining, Reset string
	// Tokens says the dimension counts tokens, not requests.
	Tokens bool
	// Instant says Reset is an instant (RFC 3339, or Unix seconds or
	// milliseconds), not a Go duration from the response (see ResetAt).
	Instant bool
}

// Indices of RateLimits.
const (
	openAIRequests = iota
	openAITokens
	anthropicRequests
	anthropicTokens
	anthropicInputTokens
	anthropicOutputTokens
	openRouter
)

// RateLimits are the rate-limit headers providers publish on their
// responses, read both for a 429's wait (SpentReset) and for the
// coordination engine's pace (internal/coord). It is a table shared by
// every reader: read it, never write it.
//
//   - OpenAI (and Groq, Together): x-ratelimit-{limit,remaining,reset}-
//     {requests,tokens}, reset a Go duration until the bucket is full
//     ("1s", "6m0s", "12ms");
//   - Anthropic: anthropic-ratelimit-{requests,tokens,input-tokens,
//     output-tokens}-{limit,remaining,reset}, reset an RFC 3339 instant
//     when the bucket is full;
//   - OpenRouter: X-RateLimit-{Limit,Remaining,Reset}, reset the instant
//     in Unix seconds or milliseconds.
//
// Azure OpenAI sends only x-ratelimit-remaining-{requests,tokens} (no
// reset; -1 for unknown), Mistral no reset, Gemini and Bedrock none: their
// limits pace nothing.
var RateLimits = [...]RateLimit{
	openAIRequests:        {"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests", false, false},
	openAITokens:          {"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens", true, false},
	anthropicRequests:     {"Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset", false, true},
	anthropicTokens:       {"Anthropic-Ratelimit-Tokens-Limit", "Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset", true, true},
	anthropicInputTokens:  {"Anthropic-Ratelimit-Input-Tokens-Limit", "Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset", true, true},
	anthropicOutputTokens: {"Anthropic-Ratelimit-Output-Tokens-Limit", "Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset", true, true},
	openRouter:            {"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", false, true},
}

// SpentReset returns the wait a 429 without Retry-After states in its
// rate-limit headers, at now:
//
//   - OpenAI: the resets of requests and tokens. The one whose remaining
//     count is 0 is the one spent; when requests remain, the tokens are
//     (too few of them for the request); when neither count is given,
//     the shorter.
//   - OpenRouter: the instant of its reset.
//
// Anthropic sends Retry-After on every 429, so its resets are not read
// here. A value it cannot read, or a negative duration, states nothing;
// an OpenRouter instant already past states a zero wait (the limit is
// back: the schedule's wait alone applies).
func SpentReset(h http.Header, now time.Time) (time.Duration, bool) {
	requests, tokens := &RateLimits[openAIRequests], &RateLimits[openAITokens]
	req, reqOK := GoDuration(h.Get(requests.Reset))
	tok, tokOK := GoDuration(h.Get(tokens.Reset))
	switch {
	case reqOK && tokOK:
		reqLeft, reqKnown := Count(h.Get(requests.Remaining))
		tokLeft, tokKnown := Count(h.Get(tokens.Remaining))
		reqSpent, tokSpent := reqKnown && reqLeft == 0, tokKnown && tokLeft == 0
		switch {
		case reqSpent && tokSpent:
			return max(req, tok), true
		case reqSpent:
			return req, true
		case tokSpent:
			return tok, true
		case reqKnown:
			// Requests left, and tokens left but too few for this
			// request (a count of tokens is rarely exactly 0), or not
			// counted: the tokens are spent.
			return tok, true
		}
		return min(req, tok), true
	case reqOK:
		return req, true
	case tokOK:
		return tok, true
	}
	at, _, ok := UnixInstant(h.Get(RateLimits[openRouter].Reset))
	if !ok {
		return 0, false
	}
	return max(0, at.Sub(now)), true
}

// Count reads a non-negative count.
func Count(v string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	return n, err == nil && n >= 0
}

// GoDuration parses a non-negative Go duration as OpenAI writes its
// resets ("1s", "6m0s", "12ms").
func GoDuration(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, false
	}
	return d, true
}

// UnixInstant reads an instant in Unix seconds or milliseconds, as
// OpenRouter writes X-RateLimit-Reset, and the resolution it is printed
// to (a second or a millisecond); a number too small to be either (below
// 1e9) is none.
func UnixInstant(v string) (time.Time, time.Duration, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	switch {
	case err != nil || n <= 0:
		return time.Time{}, 0, false
	case n >= 1e11: // milliseconds since the epoch (as seconds: past the year 5000)
		return time.UnixMilli(n), time.Millisecond, true
	case n >= 1e9: // seconds since the epoch
		return time.Unix(n, 0), time.Second, true
	}
	return time.Time{}, 0, false
}

// ResetAt reads a reset value v of a dimension whose Instant is instant:
// an instant (RFC 3339, or Unix seconds or milliseconds), or a Go duration
// counted from sent; and the resolution an instant is printed to (a
// second without a fraction; a duration's is taken as exact).
func ResetAt(v string, instant bool, sent time.Time) (time.Time, time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, 0, false
	}
	if !instant {
		d, ok := GoDuration(v)
		return sent.Add(d), 0, ok
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		if strings.IndexByte(v, '.') < 0 {
			return t, time.Second, true
		}
		return t, 0, true
	}
	return UnixInstant(v)
}
