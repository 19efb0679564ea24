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
//     and a 429 with no Retry-After and no wait in its words;
//   - OpenAI's token-per-minute limit: a bucket of tokens, each request
//     taking its max_tokens, with x-ratelimit-{limit,remaining,reset}-tokens
//     and -requests (of a request limit never spent) on every response and
//     a 429 whose message says "… on tokens per min (TPM): Limit 20000,
//     Used 19500, Requested 1000. Please try again in 1.5s. …".
//
// And two whose published limit is not the one they enforce (issue 31):
//
//   - OpenAI's request bucket published per minute: the headers state the
//     per-minute figure (x-ratelimit-limit-requests: 60) while a bucket of
//     a tenth of it, refilled at the same rate, is enforced (OpenAI: "a
//     limit of 60,000 requests/minute may be enforced as 1,000
//     requests/second"); remaining and reset are that bucket's, and the
//     429's message says "Limit 60, … Please try again in 1s.";
//   - Anthropic's acceleration limit: a bucket of 60 requests a minute,
//     published as it is (anthropic-ratelimit-requests-*), and beside it a
//     limit on sudden growth that the headers do not state: in each second
//     at most twice what was admitted in the second before (at least a
//     floor), the rest refused with a rate_limit_error and a retry-after
//     until the next second, rounded up (Anthropic: "you may encounter 429
//     errors due to acceleration limits if your organization has a sharp
//     increase in usage").
//
// A bucket refills continuously: one unit (a request, or a token) back
// every refill interval, kept as the instant it is full again (the generic
// cell rate algorithm), so all its arithmetic is in exact durations. A request is admitted (or
// refused) when it arrives; an admitted one is answered genTime later, a
// refused one refuseTime later. Headers describe the limit as it stood
// when the request arrived, as providers compute them.
//
// A rateLimiter is an http.RoundTripper that never touches the network and
// starts no goroutine: it reads its clock with time.Now and waits on timers
// only, so inside a synctest bubble its minutes pass at once.

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/llmretry/llmretry/internal/testkit"
)

// rateStyle is how a fake provider enforces and states its limit.
type rateStyle int

const (
	styleOpenAI       rateStyle = iota // request bucket, x-ratelimit-*-requests, wait in the message
	styleAnthropic                     // request bucket, anthropic-ratelimit-requests-*, retry-after
	styleConcurrency                   // concurrent requests, retry-after: 1
	styleOpenRouter                    // request bucket, X-RateLimit-*, no stated wait
	styleOpenAITokens                  // token bucket, x-ratelimit-*-tokens and -requests, wait in the message
)

// rateSpec is one provider's limit, from which each run makes its own
// rateLimiter (inside its bubble).
type rateSpec struct {
	id          string // "openai": for logs
	name        string // for the table
	style       rateStyle
	capacity    int           // bucket: units (requests, or tokens) it holds when full
	refill      time.Duration // bucket: one unit back every refill
	cost        int           // bucket: units one request takes (0: 1)
	maxInFlight int           // concurrency: requests in flight at most
	published   int           // bucket: the limit its headers state (0: capacity, the truth)
	accel       int           // bucket: admissions in a second at most max(accel, twice the second before's) (0: no such limit)
}

// The four limits of issue 19, and OpenRouter's bucket: the issue names
// its headers, and its reset (the instant the bucket is full, with no
// wait in the words) is a shape of its own. Then issue 31's two, whose
// headers do not state what they enforce.
var rateSpecs = []rateSpec{
	{id: "openai", name: "OpenAI request bucket (10, 1/s; wait in the message)", style: styleOpenAI, capacity: 10, refill: time.Second},
	{id: "anthropic", name: "Anthropic request bucket (10, 1/s; retry-after)", style: styleAnthropic, capacity: 10, refill: time.Second},
	{id: "concurrency", name: "Anthropic concurrency limit (8 in flight; retry-after: 1)", style: styleConcurrency, maxInFlight: 8},
	{id: "tpm", name: "OpenAI token limit (20,000/min, 1,000 a request; wait in the message)", style: styleOpenAITokens,
		capacity: 20000, refill: 3 * time.Millisecond, cost: tpmRequestTokens},
	{id: "openrouter", name: "OpenRouter request bucket (10, 1/s; reset instant only)", style: styleOpenRouter, capacity: 10, refill: time.Second},
	{id: "openai-minute", name: "OpenAI request bucket published per minute (60 stated; 10, 1/s enforced; wait in the message)", style: styleOpenAI,
		capacity: 10, refill: time.Second, published: 60},
	{id: "acceleration", name: "Anthropic acceleration limit (60/min stated; at most 2× the second before, from 5; retry-after)", style: styleAnthropic,
		capacity: 60, refill: time.Second, accel: accelFloor},
}

// accelFloor is what the acceleration limit admits in a second whatever
// the second before admitted: a client starting from nothing may send
// that many at once.
const accelFloor = 5

// rateSpecByID returns the spec of rateSpecs with id; it panics if there
// is none (a test's typo).
func rateSpecByID(id string) rateSpec {
	for _, s := range rateSpecs {
		if s.id == id {
			return s
		}
	}
	panic("no rate spec " + id)
}

// tpmRequestTokens is what one request costs a token limit: the
// max_tokens it carries (OpenAI counts a request's tokens as it arrives
// from its prompt and its max_tokens; the crowd's prompt is too short to
// matter, so the fake charges max_tokens alone).
const tpmRequestTokens = 1000

// The request limit that OpenAI's headers state beside a token limit: a
// bucket of tpmRequests, one back every tpmRequestEvery (10,000 a
// minute), which a crowd of 100 never spends.
const (
	tpmRequests     = 10000
	tpmRequestEvery = time.Minute / tpmRequests
)

// refuseTime is how long a refusal (429) takes to come back: a limiter
// answers at once, but not in no time, so that requests arriving together
// are all in flight before the first refusal reaches its caller.
const refuseTime = 100 * time.Millisecond

// rate returns the limit as answers per second: the bucket's refill rate
// in requests, or for a concurrency limit the slots over the generation
// time.
func (s rateSpec) rate() float64 {
	if s.style == styleConcurrency {
		return float64(s.maxInFlight) / genTime.Seconds()
	}
	return 1 / s.every().Seconds()
}

// perRequest returns the units one request takes from a bucket.
func (s rateSpec) perRequest() int { return max(s.cost, 1) }

// burst returns how many requests a full bucket admits at once: for the
// token limit, 20,000 tokens at 1,000 a request, 20.
func (s rateSpec) burst() int { return s.capacity / s.perRequest() }

// every returns how long a bucket takes to get one request back: for the
// token limit, 1,000 tokens at one every 3 ms, 3 s. A bucket of units
// that every request takes alike admits as a bucket of burst requests
// refilled one every every, so ideal pacing and the figures count in
// requests.
func (s rateSpec) every() time.Duration { return time.Duration(s.perRequest()) * s.refill }

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
	bucket   gcra  // bucket: the limit
	requests gcra  // token limit: the request limit its headers state too
	inFlight int   // concurrency: admitted requests not yet answered
	perSec   []int // acceleration: admissions in each second since the start
	log      []rateRecord
}

// statedLimit returns the limit the headers state: the published figure,
// or the bucket's own.
func (s rateSpec) statedLimit() int {
	if s.published > 0 {
		return s.published
	}
	return s.capacity
}

// accelerating reports whether the acceleration limit refuses a request
// arriving at now (since the start, in second sec), given what each
// second so far admitted, and returns the wait until the next second.
func (s rateSpec) accelerating(perSec []int, since time.Duration) (bool, time.Duration) {
	if s.accel == 0 {
		return false, 0
	}
	sec := int(since / time.Second)
	at := func(i int) int {
		if i < 0 || i >= len(perSec) {
			return 0
		}
		return perSec[i]
	}
	return at(sec) >= max(s.accel, 2*at(sec-1)), time.Duration(sec+1)*time.Second - since
}

// newRateLimiter starts a provider enforcing spec now, its buckets full.
func newRateLimiter(spec rateSpec) *rateLimiter {
	now := time.Now()
	return &rateLimiter{spec: spec, start: now,
		bucket:   gcra{capacity: spec.capacity, refill: spec.refill, full: now},
		requests: gcra{capacity: tpmRequests, refill: tpmRequestEvery, full: now},
	}
}

// gcra is a bucket that refills continuously, one unit back every refill,
// kept as the instant it is full again (the generic cell rate algorithm).
type gcra struct {
	capacity int
	refill   time.Duration
	full     time.Time // the instant it is full again (≤ now: full)
}

// state is the bucket at an instant: whole units left (the units spent
// rounded up, as a provider counts them), the time until it is full, and
// the time until cost units are in it (0 if they are).
func (b gcra) state(now time.Time, cost int) (remaining int, untilFull, untilCost time.Duration) {
	untilFull = max(0, b.full.Sub(now))
	used := int((untilFull + b.refill - 1) / b.refill)
	remaining = b.capacity - used
	untilCost = max(0, untilFull-time.Duration(b.capacity-cost)*b.refill)
	return remaining, untilFull, untilCost
}

// take takes cost units from the bucket at now (the caller has checked
// that they are in it).
func (b *gcra) take(now time.Time, cost int) {
	b.full = later(b.full, now).Add(time.Duration(cost) * b.refill)
}

// admit decides on a request arriving now: admitted, and the reply to
// send. Called with l locked.
func (l *rateLimiter) admit(now time.Time) (bool, testkit.Reply) {
	s := l.spec
	if s.style == styleConcurrency {
		if l.inFlight >= s.maxInFlight {
			return false, concurrencyRefused()
		}
		l.inFlight++
		return true, concurrencyAnswer()
	}
	cost := s.perRequest()
	_, _, untilOne := l.bucket.state(now, cost)
	ok := untilOne == 0
	accel, untilNext := s.accelerating(l.perSec, now.Sub(l.start))
	ok = ok && !accel
	if ok {
		l.bucket.take(now, cost)
		sec := int(now.Sub(l.start) / time.Second)
		for len(l.perSec) <= sec {
			l.perSec = append(l.perSec, 0)
		}
		l.perSec[sec]++
	}
	remaining, untilFull, untilOne := l.bucket.state(now, cost)
	fullAt := now.Add(untilFull)
	switch s.style {
	case styleOpenAITokens:
		// Every request passes the request limit (it is never spent) and
		// counts against it; only an admitted one takes its tokens.
		l.requests.take(now, 1)
		reqRemaining, reqFull, _ := l.requests.state(now, 1)
		r := testkit.OpenAIChatCompletion("Paced: here is your answer.")
		if !ok {
			r = openAITokensRefused(s.capacity, s.capacity-remaining, cost, untilOne)
		}
		return ok, r.With("X-Ratelimit-Limit-Requests", strconv.Itoa(tpmRequests)).
			With("X-Ratelimit-Remaining-Requests", strconv.Itoa(reqRemaining)).
			With("X-Ratelimit-Reset-Requests", openAIDuration(reqFull)).
			With("X-Ratelimit-Limit-Tokens", strconv.Itoa(s.capacity)).
			With("X-Ratelimit-Remaining-Tokens", strconv.Itoa(remaining)).
			With("X-Ratelimit-Reset-Tokens", openAIDuration(untilFull))
	case styleOpenAI:
		var r testkit.Reply
		if ok {
			r = testkit.OpenAIChatCompletion("Paced: here is your answer.")
		} else {
			r = openAIRequestsRefused(untilOne)
		}
		return ok, r.With("X-Ratelimit-Limit-Requests", strconv.Itoa(s.statedLimit())).
			With("X-Ratelimit-Remaining-Requests", strconv.Itoa(remaining)).
			With("X-Ratelimit-Reset-Requests", openAIDuration(untilFull))
	case styleAnthropic:
		r := testkit.AnthropicMessage("Paced: here is your answer.")
		switch {
		case accel:
			r = anthropicAccelerationRefused().With("Retry-After", strconv.Itoa(int((untilNext+time.Second-1)/time.Second)))
		case !ok:
			r = anthropicRequestsRefused(s.capacity).
				With("Retry-After", strconv.Itoa(int((untilOne+time.Second-1)/time.Second)))
		}
		return ok, r.With("Anthropic-Ratelimit-Requests-Limit", strconv.Itoa(s.statedLimit())).
			With("Anthropic-Ratelimit-Requests-Remaining", strconv.Itoa(remaining)).
			With("Anthropic-Ratelimit-Requests-Reset", ceilSecond(fullAt).UTC().Format(time.RFC3339))
	default: // styleOpenRouter
		reset := strconv.FormatInt(ceilMilli(fullAt).UnixMilli(), 10)
		h := http.Header{
			"Content-Type":          {"application/json"},
			"X-Ratelimit-Limit":     {strconv.Itoa(s.capacity)},
			"X-Ratelimit-Remaining": {strconv.Itoa(remaining)},
			"X-Ratelimit-Reset":     {reset},
		}
		if ok {
			return true, testkit.Reply{Status: http.StatusOK, Header: h, Body: testkit.OpenAIChatCompletion("Paced: here is your answer.").Body}
		}
		return false, testkit.Reply{Status: http.StatusTooManyRequests, Header: h, Body: openRouterRefusedBody(s.capacity, reset)}
	}
}

// RoundTrip admits or refuses req as it arrives, then answers after
// genTime (admitted) or refuseTime (refused), or earlier with the
// request's context error if its caller gives up first.
func (l *rateLimiter) RoundTrip(req *http.Request) (*http.Response, error) {
	discardBody(req)
	callIdx := -1
	if i, ok := req.Context().Value(crowdCallKey{}).(int); ok {
		callIdx = i
	}
	now := time.Now()
	l.mu.Lock()
	ok, rep := l.admit(now)
	l.log = append(l.log, rateRecord{call: callIdx, at: now.Sub(l.start), status: rep.Status, admitted: ok})
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
	return rep.Response(req), nil
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
// after the first refusal against what the bucket allows in that time
// (the whole requests it held at the first refusal and its refill), or the time-averaged requests in flight against the slots (a
// concurrency limit). It reports false when no request was refused or none
// admitted after the first refusal: no call waited on the limit.
func (l *rateLimiter) throughput() (float64, bool) {
	return throughputOf(l.spec, l.records())
}

// throughputOf is throughput over recs, in arrival order.
func throughputOf(s rateSpec, recs []rateRecord) (float64, bool) {
	t0, t1, refused := waitedOn(recs)
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
	var full time.Duration // the bucket, in requests: the instant it is full again
	for _, r := range recs {
		switch {
		case r.admitted && r.at > t0:
			n++
		case r.admitted:
			full = max(full, r.at) + s.every()
		}
	}
	// What the bucket held at the first refusal counts as allowed too:
	// whole requests (none, when it refused for want of one; an
	// acceleration limit refuses with requests left).
	held := s.burst() - int((max(0, full-t0)+s.every()-1)/s.every())
	return float64(n) / (float64(held) + window.Seconds()*s.rate()), true
}

// waitedOn returns the span in which calls waited on the limit, from recs
// in arrival order: from the first refusal's arrival (t0) to the last
// admission's (t1). It reports false when no request was refused.
func waitedOn(recs []rateRecord) (t0, t1 time.Duration, refused bool) {
	for _, r := range recs {
		switch {
		case !r.admitted && !refused:
			t0, refused = r.at, true
		case r.admitted:
			t1 = r.at
		}
	}
	return t0, t1, refused
}

// longestIdle returns the longest the limit sat wholly unused between the
// first refusal and the last admission: the bucket full, or no request in
// flight. Each admission ends an idle stretch that began when the bucket
// was full again after the one before (or when the last request in flight
// was answered). A bucket is counted in requests (rateSpec.every).
func longestIdle(s rateSpec, recs []rateRecord) time.Duration {
	t0, t1, refused := waitedOn(recs)
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
		full = max(full, r.at) + s.every()
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
