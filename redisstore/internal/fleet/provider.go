// Package fleet runs a crowd of calls as several processes against one
// fake provider, for the fleet tests and the demo: the parent serves the
// provider and starts the processes (Spawn); each process makes its calls
// through its own coordinated Transport (Run) and prints what became of
// them.
package fleet

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"
)

// Answer is what the provider says to one request: a status, and a
// Retry-After value if not empty.
type Answer struct {
	Status     int
	RetryAfter string
}

// Request is one request the provider received.
type Request struct {
	At     time.Time // when it arrived
	Proc   int       // the process that sent it (-1 if unknown)
	Status int       // what it was answered
}

// Provider is a fake model provider on 127.0.0.1 whose answers follow a
// function of the time and the requests seen before. It records every
// request. Safe for concurrent use.
type Provider struct {
	URL string
	srv *httptest.Server

	mu     sync.Mutex
	answer func(at time.Time, seen []Request) Answer
	reqs   []Request
}

// NewProvider starts a provider that answers as answer says, called under
// the provider's lock with the requests seen so far.
func NewProvider(answer func(at time.Time, seen []Request) Answer) *Provider {
	p := &Provider{answer: answer}
	p.srv = httptest.NewServer(http.HandlerFunc(p.handle))
	p.URL = p.srv.URL
	return p
}

// Outage returns an answer function: status from start for d, then 200.
func Outage(start time.Time, d time.Duration, status int) func(time.Time, []Request) Answer {
	return func(at time.Time, _ []Request) Answer {
		if !at.Before(start) && at.Before(start.Add(d)) {
			return Answer{Status: status}
		}
		return Answer{Status: http.StatusOK}
	}
}

func (p *Provider) handle(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	proc, err := strconv.Atoi(r.Header.Get(procHeader))
	if err != nil {
		proc = -1
	}
	p.mu.Lock()
	at := time.Now()
	a := p.answer(at, p.reqs)
	p.reqs = append(p.reqs, Request{At: at, Proc: proc, Status: a.Status})
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if a.RetryAfter != "" {
		w.Header().Set("Retry-After", a.RetryAfter)
	}
	w.WriteHeader(a.Status)
	if a.Status == http.StatusOK {
		io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"back"}}]}`)
	} else {
		io.WriteString(w, `{"error":{"message":"upstream connect error"}}`)
	}
}

// Requests returns the requests received so far, in order of arrival.
func (p *Provider) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.reqs...)
}

// Close stops the provider.
func (p *Provider) Close() { p.srv.Close() }

// RateSpec is a rate limit a RateLimiter enforces, the way Anthropic does
// (the semantics of interop/ratelimit_test.go's rateLimiter, over HTTP):
//
//   - a request bucket (Capacity > 0): Capacity requests when full, one
//     back each Refill, kept as the instant it is full again (the generic
//     cell rate algorithm); every response carries anthropic-ratelimit-
//     requests-{limit,remaining,reset} (reset an RFC 3339 instant, rounded
//     up to the second, when the bucket is full), and a 429 carries
//     retry-after in whole seconds, rounded up, until one request is back;
//   - a concurrency limit (MaxInFlight > 0): at most MaxInFlight requests
//     in flight, the next refused with 429 "Number of concurrent
//     connections has exceeded your rate limit" and retry-after: 1; no
//     header states it.
//
// With OpenAI set, a bucket speaks as OpenAI's request limit does instead:
// x-ratelimit-{limit,remaining,reset}-requests (reset a Go duration until
// the bucket is full, rounded up to the millisecond), and a 429 with no
// Retry-After whose message says "Please try again in 1s." with the exact
// wait until a request is back. Published, if set, is the limit the
// headers state instead of Capacity: a per-minute figure enforced over a
// shorter window (issue 31).
//
// An admitted request is answered Answer after it arrived, a refused one
// Refuse after.
type RateSpec struct {
	Capacity    int
	Refill      time.Duration
	MaxInFlight int
	Answer      time.Duration
	Refuse      time.Duration
	OpenAI      bool
	Published   int
}

// Rate returns the limit in answers a second: the bucket's refill rate,
// or the concurrency limit's slots over the answer time.
func (s RateSpec) Rate() float64 {
	if s.MaxInFlight > 0 {
		return float64(s.MaxInFlight) / s.Answer.Seconds()
	}
	return 1 / s.Refill.Seconds()
}

// RateRecord is what a RateLimiter did with one request.
type RateRecord struct {
	Proc, Call int       // the process and call that sent it (-1 if unknown)
	At         time.Time // when it arrived
	Sent       time.Time // when it left its process (zero if unknown)
	Left       time.Time // when its answer left, or its caller gave up on it
	Admitted   bool      // it took a request from the limit (else: 429)
	Cut        bool      // its caller gave up before the answer left
}

// RateLimiter is a fake Anthropic Messages endpoint on 127.0.0.1 that
// enforces a RateSpec and records every request. Safe for concurrent use.
type RateLimiter struct {
	URL  string
	spec RateSpec
	srv  *httptest.Server

	mu       sync.Mutex
	full     time.Time // bucket: the instant it is full again (≤ now: full)
	inFlight int       // concurrency: admitted requests not yet answered
	log      []RateRecord
}

// NewRateLimiter starts a provider enforcing spec, its bucket full.
func NewRateLimiter(spec RateSpec) *RateLimiter {
	l := &RateLimiter{spec: spec, full: time.Now()}
	l.srv = httptest.NewServer(http.HandlerFunc(l.handle))
	l.URL = l.srv.URL
	return l
}

// Close stops the provider.
func (l *RateLimiter) Close() { l.srv.Close() }

// Records returns what the provider did, in order of arrival.
func (l *RateLimiter) Records() []RateRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]RateRecord(nil), l.log...)
}

// bucket returns the bucket at now: whole requests left, and the times
// until it is full and until one request is back (0 if one is). l.mu must
// be held.
func (l *RateLimiter) bucket(now time.Time) (remaining int, untilFull, untilOne time.Duration) {
	s := l.spec
	untilFull = max(0, l.full.Sub(now))
	used := int((untilFull + s.Refill - 1) / s.Refill) // whole requests spent, rounded up
	return s.Capacity - used, untilFull, max(0, untilFull-time.Duration(s.Capacity-1)*s.Refill)
}

// admit decides on a request arriving at now, and sets the headers of its
// answer. l.mu must be held.
func (l *RateLimiter) admit(now time.Time, h http.Header) bool {
	s := l.spec
	if s.MaxInFlight > 0 {
		if l.inFlight >= s.MaxInFlight {
			h.Set("Retry-After", "1")
			return false
		}
		l.inFlight++
		return true
	}
	_, _, untilOne := l.bucket(now)
	ok := untilOne == 0
	if ok {
		if l.full.Before(now) {
			l.full = now
		}
		l.full = l.full.Add(s.Refill)
	}
	remaining, untilFull, untilOne := l.bucket(now)
	stated := s.Capacity
	if s.Published > 0 {
		stated = s.Published
	}
	if s.OpenAI {
		h.Set("X-Ratelimit-Limit-Requests", strconv.Itoa(stated))
		h.Set("X-Ratelimit-Remaining-Requests", strconv.Itoa(remaining))
		h.Set("X-Ratelimit-Reset-Requests", goDuration(untilFull))
		if !ok {
			h.Set(waitHeader, goDuration(untilOne)) // for the body, not sent
		}
		return ok
	}
	h.Set("Anthropic-Ratelimit-Requests-Limit", strconv.Itoa(stated))
	h.Set("Anthropic-Ratelimit-Requests-Remaining", strconv.Itoa(remaining))
	h.Set("Anthropic-Ratelimit-Requests-Reset", ceilSecond(now.Add(untilFull)).UTC().Format(time.RFC3339))
	if !ok {
		h.Set("Retry-After", strconv.Itoa(int((untilOne+time.Second-1)/time.Second)))
	}
	return ok
}

// goDuration renders d as OpenAI writes its waits and resets ("1.2s",
// "820ms"), rounded up to the millisecond so that it is never short.
func goDuration(d time.Duration) string {
	if r := d.Truncate(time.Millisecond); r < d {
		d = r + time.Millisecond
	}
	return d.String()
}

// waitHeader carries an OpenAI 429's wait from admit to its body; it is
// removed before the answer is sent.
const waitHeader = "X-Fleet-Wait"

// ceilSecond rounds t up to the second.
func ceilSecond(t time.Time) time.Time {
	if r := t.Truncate(time.Second); r.Before(t) {
		return r.Add(time.Second)
	}
	return t
}

func (l *RateLimiter) handle(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	num := func(k string) int {
		n, err := strconv.Atoi(r.Header.Get(k))
		if err != nil {
			return -1
		}
		return n
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Request-Id", "req_011CSHoEeqs5C35K2UUqR7Fy")
	now := time.Now()
	l.mu.Lock()
	ok := l.admit(now, h)
	var sent time.Time
	if ns, err := strconv.ParseInt(r.Header.Get(sentHeader), 10, 64); err == nil && ns > 0 {
		sent = time.Unix(0, ns)
	}
	l.log = append(l.log, RateRecord{Proc: num(procHeader), Call: num(callHeader), At: now, Sent: sent, Admitted: ok})
	n := len(l.log) - 1
	l.mu.Unlock()

	took := l.spec.Refuse
	if ok {
		took = l.spec.Answer
	}
	t := time.NewTimer(took)
	defer t.Stop()
	cut := false
	select {
	case <-r.Context().Done():
		cut = true
	case <-t.C:
	}
	l.mu.Lock()
	l.log[n].Left, l.log[n].Cut = time.Now(), cut
	if ok && l.spec.MaxInFlight > 0 {
		l.inFlight--
	}
	l.mu.Unlock()
	if cut {
		return
	}
	switch {
	case ok:
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929",`+
			`"content":[{"type":"text","text":"Paced: here is your answer."}],"stop_reason":"end_turn","stop_sequence":null,`+
			`"usage":{"input_tokens":12,"output_tokens":9}}`)
	case l.spec.OpenAI:
		wait := h.Get(waitHeader)
		h.Del(waitHeader)
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, `{"error":{"message":"Rate limit reached for gpt-4o in organization org-fleet on requests per min (RPM): Limit %d, Used %d, Requested 1. `+
			`Please try again in %s. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
			max(l.spec.Published, l.spec.Capacity), max(l.spec.Published, l.spec.Capacity), wait)
	case l.spec.MaxInFlight > 0:
		h.Set("X-Should-Retry", "true")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of concurrent connections has exceeded your rate limit. `+
			`Please try again later or contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase."},`+
			`"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`)
	default:
		h.Set("X-Should-Retry", "true")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization `+
			`(4e4f8a29-7c1b-4b8e-9a52-1d2e3f4a5b6c) of %d requests per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. `+
			`You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later."},`+
			`"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`, l.spec.Capacity*6)
	}
}
