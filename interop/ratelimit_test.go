package interop

// Fake providers that enforce a rate limit the way real providers do
// (GitHub issue 19), for ratelimit_crowd_test.go's crowd of calls:
//
//   - an OpenAI-style request bucket: x-ratelimit-{limit,remaining,reset}-
//     requests on every response (reset a Go duration until the bucket is
//     full); a 429 with no Retry-After whose message says "Please try
//     again in 1.2s." with the real wait until one request is back;
//   - the same bucket with Anthropic's headers: anthropic-ratelimit-
//     requests-{limit,remaining,reset} (reset an RFC 3339 instant) and a
//     retry-after in whole seconds, rounded up, on every 429;
//   - Anthropic's concurrency limit: at most so many requests in flight,
//     the next one refused with "Number of concurrent connections has
//     exceeded your rate limit" and retry-after: 1;
//   - the bucket with OpenRouter's headers: X-RateLimit-{Limit,Remaining,
//     Reset} (Reset the instant the bucket is full, in Unix milliseconds)
//     and a 429 with no Retry-After and no wait in its words.
//
// The bucket refills continuously: one request back every refill interval,
// kept as the instant it is full again (the generic cell rate algorithm),
// so all its arithmetic is in exact durations. A request is admitted (or
// refused) when it arrives; an admitted one is answered genTime later, a
// refused one refuseTime later. Headers describe the limit as it stood
// when the request arrived, as providers compute them.
//
// A rateLimiter is an http.RoundTripper that never touches the network and
// starts no goroutine: it reads its clock with time.Now and waits on timers
// only, so inside a synctest bubble its minutes pass at once.

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rateStyle is how a fake provider enforces and states its limit.
type rateStyle int

const (
	styleOpenAI      rateStyle = iota // request bucket, x-ratelimit-*-requests, wait in the message
	styleAnthropic                    // request bucket, anthropic-ratelimit-requests-*, retry-after
	styleConcurrency                  // concurrent requests, retry-after: 1
	styleOpenRouter                   // request bucket, X-RateLimit-*, no stated wait
)

// rateSpec is one provider's limit, from which each run makes its own
// rateLimiter (inside its bubble).
type rateSpec struct {
	id          string // "openai": for logs
	name        string // for the table
	style       rateStyle
	capacity    int           // bucket: requests it holds when full
	refill      time.Duration // bucket: one request back every refill
	maxInFlight int           // concurrency: requests in flight at most
}

// The four providers of issue 19 (its token-per-minute limit is left for
// later: it needs token counts in the requests).
var rateSpecs = []rateSpec{
	{id: "openai", name: "OpenAI request bucket (10, 1/s; wait in the message)", style: styleOpenAI, capacity: 10, refill: time.Second},
	{id: "anthropic", name: "Anthropic request bucket (10, 1/s; retry-after)", style: styleAnthropic, capacity: 10, refill: time.Second},
	{id: "concurrency", name: "Anthropic concurrency limit (8 in flight; retry-after: 1)", style: styleConcurrency, maxInFlight: 8},
	{id: "openrouter", name: "OpenRouter request bucket (10, 1/s; reset instant only)", style: styleOpenRouter, capacity: 10, refill: time.Second},
}

// refuseTime is how long a refusal (429) takes to come back: a limiter
// answers at once, but not in no time, so that requests arriving together
// are all in flight before the first refusal reaches its caller.
const refuseTime = 100 * time.Millisecond

// rate returns the limit as answers per second: the bucket's refill rate,
// or for a concurrency limit the slots over the generation time.
func (s rateSpec) rate() float64 {
	if s.style == styleConcurrency {
		return float64(s.maxInFlight) / genTime.Seconds()
	}
	return 1 / s.refill.Seconds()
}

// rateRecord is what the provider did with one request.
type rateRecord struct {
	call     int           // the crowd call it belongs to (crowdCallKey; -1: none)
	at       time.Duration // when it arrived, since the provider's start
	status   int           // the status it was (or would have been) answered with
	admitted bool          // it took a request from the limit
	left     time.Duration // when its answer left (or its caller gave up on it)
	cut      bool          // its caller gave up before the answer left
}

// rateLimiter is a fake provider enforcing spec's limit.
type rateLimiter struct {
	spec  rateSpec
	start time.Time

	mu       sync.Mutex
	full     time.Time // bucket: the instant it is full again (≤ now: full)
	inFlight int       // concurrency: admitted requests not yet answered
	log      []rateRecord
}

// newRateLimiter starts a provider enforcing spec now, its bucket full.
func newRateLimiter(spec rateSpec) *rateLimiter {
	now := time.Now()
	return &rateLimiter{spec: spec, start: now, full: now}
}

// bucketState is the bucket at an instant: whole requests left, the time
// until it is full, and the time until one request is back (0 if one is).
func (l *rateLimiter) bucketState(now time.Time) (remaining int, untilFull, untilOne time.Duration) {
	s := l.spec
	untilFull = max(0, l.full.Sub(now))
	used := int((untilFull + s.refill - 1) / s.refill) // whole requests spent, rounded up
	remaining = s.capacity - used
	untilOne = max(0, untilFull-time.Duration(s.capacity-1)*s.refill)
	return remaining, untilFull, untilOne
}

// admit decides on a request arriving now: admitted, and the reply to
// send. Called with l locked.
func (l *rateLimiter) admit(now time.Time) (bool, reply) {
	s := l.spec
	if s.style == styleConcurrency {
		if l.inFlight >= s.maxInFlight {
			return false, concurrencyRefused()
		}
		l.inFlight++
		return true, concurrencyAnswer()
	}
	_, _, untilOne := l.bucketState(now)
	ok := untilOne == 0
	if ok {
		l.full = later(l.full, now).Add(s.refill)
	}
	remaining, untilFull, untilOne := l.bucketState(now)
	fullAt := now.Add(untilFull)
	switch s.style {
	case styleOpenAI:
		var r reply
		if ok {
			r = openAIChatCompletion("Paced: here is your answer.")
		} else {
			r = openAIRequestsRefused(untilOne)
		}
		return ok, r.with("X-Ratelimit-Limit-Requests", strconv.Itoa(s.capacity)).
			with("X-Ratelimit-Remaining-Requests", strconv.Itoa(remaining)).
			with("X-Ratelimit-Reset-Requests", openAIDuration(untilFull))
	case styleAnthropic:
		r := anthropicMessage("Paced: here is your answer.")
		if !ok {
			r = anthropicRequestsRefused(s.capacity).
				with("Retry-After", strconv.Itoa(int((untilOne+time.Second-1)/time.Second)))
		}
		return ok, r.with("Anthropic-Ratelimit-Requests-Limit", strconv.Itoa(s.capacity)).
			with("Anthropic-Ratelimit-Requests-Remaining", strconv.Itoa(remaining)).
			with("Anthropic-Ratelimit-Requests-Reset", ceilSecond(fullAt).UTC().Format(time.RFC3339))
	default: // styleOpenRouter
		reset := strconv.FormatInt(ceilMilli(fullAt).UnixMilli(), 10)
		h := http.Header{
			"Content-Type":          {"application/json"},
			"X-Ratelimit-Limit":     {strconv.Itoa(s.capacity)},
			"X-Ratelimit-Remaining": {strconv.Itoa(remaining)},
			"X-Ratelimit-Reset":     {reset},
		}
		if ok {
			return true, reply{status: http.StatusOK, header: h, body: openAIChatCompletion("Paced: here is your answer.").body}
		}
		return false, reply{status: http.StatusTooManyRequests, header: h, body: openRouterRefusedBody(s.capacity, reset)}
	}
}

// RoundTrip admits or refuses req as it arrives, then answers after
// genTime (admitted) or refuseTime (refused), or earlier with the
// request's context error if its caller gives up first.
func (l *rateLimiter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	callIdx := -1
	if i, ok := req.Context().Value(crowdCallKey{}).(int); ok {
		callIdx = i
	}
	now := time.Now()
	l.mu.Lock()
	ok, rep := l.admit(now)
	l.log = append(l.log, rateRecord{call: callIdx, at: now.Sub(l.start), status: rep.status, admitted: ok})
	n := len(l.log) - 1
	l.mu.Unlock()

	took := refuseTime
	if ok {
		took = genTime
	}
	t := time.NewTimer(took)
	defer t.Stop()
	var err error
	select {
	case <-req.Context().Done():
		err = req.Context().Err()
	case <-t.C:
	}
	l.mu.Lock()
	l.log[n].left, l.log[n].cut = time.Since(l.start), err != nil
	if ok && l.spec.style == styleConcurrency {
		l.inFlight--
	}
	l.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return rep.response(req), nil
}

// records returns a copy of what the provider did, in arrival order.
func (l *rateLimiter) records() []rateRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]rateRecord(nil), l.log...)
}

// refusals returns how many requests were answered (or were to be
// answered) 429.
func (l *rateLimiter) refusals() int {
	n := 0
	for _, r := range l.records() {
		if !r.admitted {
			n++
		}
	}
	return n
}

// throughput returns the share of the limit used while calls waited on it:
// from the first refusal's arrival to the last admission, the admissions
// after the first refusal against what the rate allows in that time (a
// bucket), or the time-averaged requests in flight against the slots (a
// concurrency limit). It reports false when no request was refused or none
// admitted after the first refusal: no call waited on the limit.
func (l *rateLimiter) throughput() (float64, bool) {
	return throughputOf(l.spec, l.records())
}

// throughputOf is throughput over recs, in arrival order.
func throughputOf(s rateSpec, recs []rateRecord) (float64, bool) {
	t0, t1, refused := time.Duration(0), time.Duration(0), false
	for _, r := range recs {
		switch {
		case !r.admitted && !refused:
			t0, refused = r.at, true
		case r.admitted:
			t1 = r.at
		}
	}
	if !refused || t1 <= t0 {
		return 0, false
	}
	window := t1 - t0
	if s.style == styleConcurrency {
		var busy time.Duration
		for _, r := range recs {
			if r.admitted {
				busy += max(0, min(r.left, t1)-max(r.at, t0))
			}
		}
		return busy.Seconds() / (float64(s.maxInFlight) * window.Seconds()), true
	}
	n := 0
	for _, r := range recs {
		if r.admitted && r.at > t0 {
			n++
		}
	}
	return float64(n) / (window.Seconds() * s.rate()), true
}

// longestIdle returns the longest the limit sat wholly unused between the
// first refusal and the last admission: the bucket full, or no request in
// flight. Each admission ends an idle stretch that began when the bucket
// was full again after the one before (or when the last request in flight
// was answered).
func longestIdle(s rateSpec, recs []rateRecord) time.Duration {
	t0, t1, refused := time.Duration(0), time.Duration(0), false
	for _, r := range recs {
		switch {
		case !r.admitted && !refused:
			t0, refused = r.at, true
		case r.admitted:
			t1 = r.at
		}
	}
	if !refused {
		return 0
	}
	var idle time.Duration
	if s.style == styleConcurrency {
		// Sweep the admitted requests' spans for gaps with none in flight.
		var busyUntil time.Duration = t0
		for _, r := range recs { // arrival order: spans start in order
			if !r.admitted || r.at < t0 || r.at > t1 {
				if r.admitted && r.at < t0 {
					busyUntil = max(busyUntil, r.left)
				}
				continue
			}
			idle = max(idle, r.at-busyUntil)
			busyUntil = max(busyUntil, r.left)
		}
		return idle
	}
	var full time.Duration // the instant the bucket was full again, since start
	for _, r := range recs {
		if !r.admitted {
			continue
		}
		if r.at > t0 && r.at <= t1 && r.at > full {
			idle = max(idle, r.at-max(full, t0))
		}
		full = max(full, r.at) + s.refill
	}
	return idle
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// ceilMilli rounds t up to the millisecond.
func ceilMilli(t time.Time) time.Time {
	if r := t.Truncate(time.Millisecond); r.Before(t) {
		return r.Add(time.Millisecond)
	}
	return t
}

// ceilSecond rounds t up to the second.
func ceilSecond(t time.Time) time.Time {
	if r := t.Truncate(time.Second); r.Before(t) {
		return r.Add(time.Second)
	}
	return t
}

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
func openAIRequestsRefused(wait time.Duration) reply {
	r := openAIError(http.StatusTooManyRequests,
		"Rate limit reached for gpt-4o in organization org-x on requests per min (RPM): Limit 60, Used 60, Requested 1. Please try again in "+
			openAIDuration(wait)+". Visit https://platform.openai.com/account/rate-limits to learn more.",
		"requests", "", "rate_limit_exceeded")
	r.header.Del("Retry-After")
	return r
}

// anthropicRequestsRefused is Anthropic's 429 for a spent request limit
// (its caller adds retry-after).
func anthropicRequestsRefused(capacity int) reply {
	return anthropicError(http.StatusTooManyRequests, "rate_limit_error",
		fmt.Sprintf("This request would exceed the rate limit for your organization (4e4f8a29-7c1b-4b8e-9a52-1d2e3f4a5b6c) of %d requests per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later.", capacity*6)).
		with("X-Should-Retry", "true")
}

// concurrencyAnswer is an Anthropic message under a concurrency limit:
// Anthropic publishes no header for it.
func concurrencyAnswer() reply {
	r := anthropicMessage("Paced: here is your answer.")
	r.header.Del("Anthropic-Ratelimit-Requests-Limit")
	r.header.Del("Anthropic-Ratelimit-Requests-Remaining")
	return r
}

// concurrencyRefused is Anthropic's 429 for too many requests in flight.
func concurrencyRefused() reply {
	r := anthropicError(http.StatusTooManyRequests, "rate_limit_error",
		"Number of concurrent connections has exceeded your rate limit. Please try again later or contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase.").
		with("Retry-After", "1").
		with("X-Should-Retry", "true")
	r.header.Del("Anthropic-Ratelimit-Requests-Limit")
	r.header.Del("Anthropic-Ratelimit-Requests-Remaining")
	return r
}

// openRouterRefusedBody is OpenRouter's 429 body: the limit's headers
// echoed in metadata, no wait in words.
func openRouterRefusedBody(limit int, reset string) string {
	return `{"error":{"message":"Rate limit exceeded: limit_rpm/openai/gpt-4o-mini. ","code":429,"metadata":{"headers":{"X-RateLimit-Limit":"` +
		strconv.Itoa(limit) + `","X-RateLimit-Remaining":"0","X-RateLimit-Reset":"` + reset + `"},"provider_name":null}},"user_id":"user_dummy"}`
}

// The fake providers themselves: what they admit and what they say, at
// exact instants (the bubble's clock starts at 2000-01-01 00:00:00 UTC).
func TestRateLimitProviders(t *testing.T) {
	// burst sends n requests at once to l and returns their responses,
	// bodies read, once all have come back.
	burst := func(t *testing.T, l *rateLimiter, n int) (resps []*http.Response, bodies []string) {
		t.Helper()
		resps, bodies = make([]*http.Response, n), make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				req, err := http.NewRequest(http.MethodPost, fakeOpenAIURL+"chat/completions", strings.NewReader(`{}`))
				if !assert.NoError(t, err) {
					return
				}
				resp, err := l.RoundTrip(req)
				if !assert.NoError(t, err) {
					return
				}
				b, err := io.ReadAll(resp.Body)
				assert.NoError(t, err)
				resps[i], bodies[i] = resp, string(b)
			})
		}
		wg.Wait()
		require.NotContains(t, resps, (*http.Response)(nil))
		return resps, bodies
	}
	// refused returns the only 429 of resps and its body, and the
	// others' values of header k.
	refused := func(t *testing.T, resps []*http.Response, bodies []string, k string) (*http.Response, string, []string) {
		t.Helper()
		var r *http.Response
		var b string
		var vs []string
		for i, resp := range resps {
			if resp.StatusCode == http.StatusTooManyRequests {
				require.Nil(t, r, "one refusal")
				r, b = resp, bodies[i]
				continue
			}
			require.Equal(t, http.StatusOK, resp.StatusCode)
			vs = append(vs, resp.Header.Get(k))
		}
		require.NotNil(t, r, "one refusal")
		return r, b, vs
	}
	spent := []string{"9", "8", "7", "6", "5", "4", "3", "2", "1", "0"}

	t.Run("OpenAI: 10 at once, then one a second; the message states the wait, the reset the time to full", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := newRateLimiter(rateSpecs[0])
			resps, bodies := burst(t, l, 11)
			assert.Equal(t, genTime, time.Since(l.start), "answers take the generation time")
			r, b, remaining := refused(t, resps, bodies, "X-Ratelimit-Remaining-Requests")
			assert.ElementsMatch(t, spent, remaining)
			assert.Empty(t, r.Header.Get("Retry-After"))
			assert.Equal(t, "10", r.Header.Get("X-Ratelimit-Limit-Requests"))
			assert.Equal(t, "0", r.Header.Get("X-Ratelimit-Remaining-Requests"))
			assert.Equal(t, "10s", r.Header.Get("X-Ratelimit-Reset-Requests"), "spent at 0: full at 10 s")
			assert.Contains(t, b, "Please try again in 1s.", "one request back at 1 s")
			assert.Contains(t, b, `"type":"requests","param":null,"code":"rate_limit_exceeded"`)

			// At 2.5 s, 2.5 requests are back: 2 admitted, the third
			// told to wait 0.5 s for the next.
			time.Sleep(500 * time.Millisecond)
			resps, bodies = burst(t, l, 3)
			r, b, remaining = refused(t, resps, bodies, "X-Ratelimit-Remaining-Requests")
			assert.ElementsMatch(t, []string{"1", "0"}, remaining)
			assert.Equal(t, "9.5s", r.Header.Get("X-Ratelimit-Reset-Requests"))
			assert.Contains(t, b, "Please try again in 500ms.")

			recs := l.records()
			require.Len(t, recs, 14)
			assert.Equal(t, 2, l.refusals())
			f, ok := l.throughput()
			require.True(t, ok)
			assert.InDelta(t, 0.8, f, 1e-9, "from the refusal at 0 to the last admission at 2.5 s: 2 admitted of 2.5 s at 1/s")
			assert.Equal(t, rateRecord{call: -1, at: 2500 * time.Millisecond, status: 429, left: 2600 * time.Millisecond}, recs[13])
		})
	})

	t.Run("Anthropic: the same bucket, reset an instant, retry-after rounded up", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := newRateLimiter(rateSpecs[1])
			resps, bodies := burst(t, l, 11)
			r, b, remaining := refused(t, resps, bodies, "Anthropic-Ratelimit-Requests-Remaining")
			assert.ElementsMatch(t, spent, remaining)
			assert.Equal(t, "1", r.Header.Get("Retry-After"))
			assert.Equal(t, "true", r.Header.Get("X-Should-Retry"))
			assert.Equal(t, "10", r.Header.Get("Anthropic-Ratelimit-Requests-Limit"))
			assert.Equal(t, "2000-01-01T00:00:10Z", r.Header.Get("Anthropic-Ratelimit-Requests-Reset"))
			assert.Contains(t, b, `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit`)

			time.Sleep(500 * time.Millisecond)
			resps, bodies = burst(t, l, 3)
			r, _, _ = refused(t, resps, bodies, "Anthropic-Ratelimit-Requests-Remaining")
			assert.Equal(t, "1", r.Header.Get("Retry-After"), "0.5 s rounded up")
			assert.Equal(t, "2000-01-01T00:00:12Z", r.Header.Get("Anthropic-Ratelimit-Requests-Reset"))
		})
	})

	t.Run("concurrency: 8 in flight, the 9th refused with retry-after 1; answered slots free", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := newRateLimiter(rateSpecs[2])
			for range 2 {
				resps, bodies := burst(t, l, 9)
				r, b, _ := refused(t, resps, bodies, "Retry-After")
				assert.Equal(t, "1", r.Header.Get("Retry-After"))
				assert.Contains(t, b, "Number of concurrent connections has exceeded your rate limit")
				assert.Empty(t, r.Header.Get("Anthropic-Ratelimit-Requests-Limit"), "no header states a concurrency limit")
			}
			assert.Equal(t, 2, l.refusals())
			assert.Equal(t, 4*time.Second, time.Since(l.start))
			f, ok := l.throughput()
			require.True(t, ok)
			assert.InDelta(t, 1.0, f, 1e-9, "all 8 slots busy from the refusal at 0 to the last admission at 2 s")
		})
	})

	t.Run("OpenRouter: the reset in Unix milliseconds, no stated wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := newRateLimiter(rateSpecs[3])
			resps, bodies := burst(t, l, 11)
			r, b, remaining := refused(t, resps, bodies, "X-Ratelimit-Remaining")
			assert.ElementsMatch(t, spent, remaining)
			assert.Empty(t, r.Header.Get("Retry-After"))
			full := time.Date(2000, 1, 1, 0, 0, 10, 0, time.UTC).UnixMilli()
			assert.Equal(t, strconv.FormatInt(full, 10), r.Header.Get("X-Ratelimit-Reset"))
			assert.Equal(t, "10", r.Header.Get("X-Ratelimit-Limit"))
			assert.Contains(t, b, `"code":429`)
			assert.NotContains(t, b, "try again")
		})
	})

	t.Run("throughput and idle time, from records", func(t *testing.T) {
		rec := func(at, left time.Duration, admitted bool) rateRecord {
			return rateRecord{at: at, left: left, admitted: admitted}
		}
		s := time.Second
		bucket := rateSpecs[0]
		// 10 at 0 and a refusal at 0; then admissions at 2 s and 10 s:
		// 2 in 10 s of a 1/s limit. The bucket, spent at 0, would be
		// full at 10 s, and the one at 2 s puts that off to 11 s.
		recs := []rateRecord{}
		for range 10 {
			recs = append(recs, rec(0, 2*s, true))
		}
		recs = append(recs, rec(0, s/10, false), rec(2*s, 4*s, true), rec(10*s, 12*s, true))
		f, ok := throughputOf(bucket, recs)
		require.True(t, ok)
		assert.InDelta(t, 0.2, f, 1e-9)
		assert.Equal(t, time.Duration(0), longestIdle(bucket, recs), "the bucket never filled up")
		recs = append(recs, rec(30*s, 32*s, true))
		f, _ = throughputOf(bucket, recs)
		assert.InDelta(t, 3.0/30, f, 1e-9)
		assert.Equal(t, 18*s, longestIdle(bucket, recs), "full at 12 s, next admission at 30 s")

		_, ok = throughputOf(bucket, recs[:10])
		assert.False(t, ok, "nothing refused: no call waited on the limit")

		conc := rateSpecs[2]
		recs = []rateRecord{rec(0, 2*s, true), rec(0, s/10, false), rec(3*s, 5*s, true), rec(4*s, 6*s, true)}
		f, ok = throughputOf(conc, recs)
		require.True(t, ok)
		// From 0 to 4 s: busy 2 s + 1 s + 0 s of 8 slots × 4 s.
		assert.InDelta(t, 3.0/32, f, 1e-9)
		assert.Equal(t, s, longestIdle(conc, recs), "none in flight from 2 s to 3 s")
	})
}
