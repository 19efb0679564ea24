package llmretry

import (
	"net/http"
	"time"

	"github.com/llmretry/llmretry/internal/ratehdr"
)

// rateLimitReset returns the wait a 429 without Retry-After states in its
// rate-limit headers, at now:
//
//   - OpenAI (and Groq, Together): x-ratelimit-reset-requests and
//     x-ratelimit-reset-tokens, Go durations ("1s", "6m0s", "12ms") until
//     that bucket is full again. The one whose x-ratelimit-remaining-… is 0
//     is the one spent; when requests remain, the tokens are (too few of
//     them for the request); when neither count is given, the shorter.
//   - OpenRouter: X-RateLimit-Reset, the instant in Unix seconds or
//     milliseconds.
//
// A value it cannot read, or a negative one, states nothing.
func rateLimitReset(h http.Header, now time.Time) (time.Duration, bool) {
	req, reqOK := ratehdr.GoDuration(h.Get("X-Ratelimit-Reset-Requests"))
	tok, tokOK := ratehdr.GoDuration(h.Get("X-Ratelimit-Reset-Tokens"))
	switch {
	case reqOK && tokOK:
		reqLeft, reqKnown := ratehdr.Count(h.Get("X-Ratelimit-Remaining-Requests"))
		tokLeft, tokKnown := ratehdr.Count(h.Get("X-Ratelimit-Remaining-Tokens"))
		reqSpent, tokSpent := reqKnown && reqLeft == 0, tokKnown && tokLeft == 0
		switch {
		case reqSpent && tokSpent:
			return max(req, tok), true
		case reqSpent:
			return req, true
		case tokSpent:
			return tok, true
		case reqKnown && tokKnown:
			// Requests left, and tokens left but too few for this
			// request (a count of tokens is rarely exactly 0): the
			// tokens are spent.
			return tok, true
		}
		return min(req, tok), true
	case reqOK:
		return req, true
	case tokOK:
		return tok, true
	}
	at, _, ok := ratehdr.UnixInstant(h.Get("X-Ratelimit-Reset"))
	if !ok {
		return 0, false
	}
	return max(0, at.Sub(now)), true
}
