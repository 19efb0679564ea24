package llmretry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// call is the state of one request after its first attempt failed. It
// lives only as long as the RoundTrip that made it; go-retryablehttp's
// CheckRetry and Backoff (which get no context) reach it through closures.
type call struct {
	base    http.RoundTripper
	p       *Policy
	req     *http.Request                 // the caller's, never modified
	out     *http.Request                 // the request of the latest attempt
	getBody func() (io.ReadCloser, error) // replays the body; nil if none

	n        int  // attempts made
	retries  int  // retries taken in the current round
	recorded int  // attempts passed to OnAttempt
	replay   bool // the next attempt hands back resp/err instead of sending
	stream   int8 // 0 not sniffed yet, 1 a stream, -1 not a stream

	resp *http.Response // the latest attempt's result
	err  error
	wait time.Duration // the wait CheckRetry chose, for Backoff
	why  stop          // why the latest round stopped

	// Coordination (nil co: off).
	co       *coordinator
	key      *keyState
	probe    bool // c holds its key's probe: the latest attempt's result is not reported yet
	wasProbe bool // the latest attempt went as the probe
	reported int  // attempts reported to the key
	gaveUp   bool // the gate refused the next attempt: c.err is a *DownError

	// The call as a candidate for the probe, guarded by coordinator.mu.
	isHeld    bool      // in its key's held list
	left      int       // attempts it may still send
	heldSince time.Time // when it reached the gate
}

// run takes over after a failed first attempt (resp, err) and drives
// go-retryablehttp's loop, one round per answer of the policy's Asker.
//
// Each round starts by replaying the attempt that ended the previous one
// (or the first attempt), so that CheckRetry sees it like any other: the
// first attempt is sent by RoundTrip itself and never pays for this set-up.
func (c *call) run(resp *http.Response, err error) (*http.Response, error) {
	ctx := c.out.Context()
	c.n, c.resp, c.err, c.replay = 1, resp, err, true
	rc := &retryablehttp.Client{
		HTTPClient: &http.Client{
			// attemptTransport has no CloseIdleConnections, so the calls
			// go-retryablehttp makes on failure cannot empty the caller's
			// connection pool.
			Transport: (*attemptTransport)(c),
			// Redirects are the outer client's business.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		RetryMax:     math.MaxInt32, // CheckRetry alone decides
		CheckRetry:   c.checkRetry,
		Backoff:      c.backoff,
		ErrorHandler: func(_ *http.Response, err error, _ int) (*http.Response, error) { return nil, err },
		// Logger stays nil: go-retryablehttp would log URLs with their
		// query strings, where API keys travel.
	}
	for {
		resp, err = rc.Do(&retryablehttp.Request{Request: c.template()})
		if c.why != stopSpent || c.p.OnExhausted == nil || ctx.Err() != nil {
			break
		}
		ex := &Exhausted{Request: c.req, Attempts: c.n, Response: c.resp, Err: c.err}
		if !c.p.OnExhausted.Ask(ctx, ex) || ctx.Err() != nil {
			break
		}
		c.retries, c.replay, c.why = 0, true, stopNone
	}
	return c.result(resp, err)
}

// template returns the request go-retryablehttp sends each attempt with: a
// shallow copy of the latest one, without a body (attemptTransport gives
// every real attempt a fresh body).
func (c *call) template() *http.Request {
	r := *c.out
	if r.Body != nil {
		r.Body = http.NoBody
	}
	// go-retryablehttp's http.Client refuses a server request passed on
	// with its RequestURI (as httputil.ReverseProxy does) before sending
	// anything; the base never needs it.
	r.RequestURI = ""
	return &r
}

// result turns the loop's outcome into what the caller sees.
func (c *call) result(resp *http.Response, err error) (*http.Response, error) {
	if err == nil && resp != nil {
		switch c.why {
		case stopSpent, stopDeadline, stopServerWait, stopProvider, stopHeld:
			// We gave up on a response, or the provider said waiting
			// will not help: tell SDKs above us (openai-go,
			// anthropic-sdk-go) not to send it again.
			resp.Header = resp.Header.Clone()
			if resp.Header == nil {
				resp.Header = make(http.Header)
			}
			resp.Header.Set("X-Should-Retry", "false")
		}
		return resp, nil
	}
	last := c.err
	if c.why == stopNone || last == nil {
		// The wait before a retry was cut short (the context ended), or
		// go-retryablehttp failed on its own: report that.
		last = err
	}
	return nil, &Exhausted{Request: c.req, Attempts: c.n, Err: last}
}

// checkRetry is go-retryablehttp's CheckRetry: it decides from the latest
// attempt's own result whether a retry follows, computes the wait, and
// records the attempt.
func (c *call) checkRetry(ctx context.Context, _ *http.Response, doErr error) (bool, error) {
	if c.gaveUp {
		c.why = stopHeld
		return false, nil
	}
	if doErr != nil && c.err == nil {
		// The inner http.Client turned a response into an error (a
		// redirect with a bad Location): it has closed the body.
		var ue *url.Error
		if errors.As(doErr, &ue) {
			doErr = ue.Err
		}
		c.resp, c.err = nil, doErr
	}
	why, serverWait, hasServerWait := c.classify(ctx)
	// Read after classify, which may have spent a while on a slow reply's
	// body: the deadline/reserve rule counts from now.
	now := time.Now()
	held := false
	if c.co != nil {
		held = c.co.report(c, why, serverWait, hasServerWait, now)
	}
	var wait time.Duration
	if why == stopNone {
		deadline, hasDeadline := ctx.Deadline()
		wait, why = c.p.nextWait(c.retries+1, serverWait, hasServerWait, now, deadline, hasDeadline, held)
	}
	c.why = why
	held = held && why == stopNone
	c.record(wait, held)
	if why != stopNone {
		return false, nil
	}
	c.wait = wait
	if held {
		c.wait = 0 // the key's gate holds the call instead
	}
	c.retries++
	return true, nil
}

// classify says whether the latest result may be retried and what wait,
// if any, the server asked for.
func (c *call) classify(ctx context.Context) (stop, time.Duration, bool) {
	if ctx.Err() != nil {
		return stopFinal, 0, false
	}
	if c.err != nil {
		if !retryableErr(c.err) || c.streamHeld() {
			return stopFinal, 0, false
		}
		return stopNone, 0, false
	}
	status := c.resp.StatusCode
	if status < 400 {
		return stopFinal, 0, false // an answer
	}
	h := c.resp.Header
	retry := retryableStatus(status)
	sig := readSignal(status, h, nil) // x-should-retry, no body yet
	switch {
	case sig.final:
		return stopProvider, 0, false
	case !retry && !sig.retry:
		return stopFinal, 0, false
	case c.streamHeld():
		// Decided before the body is peeked: an error reply to a stream
		// may itself be a stream that the server keeps open.
		return stopFinal, 0, false
	}
	if retry && readableBody(h.Get("Content-Type")) {
		// Quota bodies and Gemini's RetryInfo only matter for a status we
		// would retry, in a body that can carry them.
		if sig = readSignal(status, h, peekBody(c.resp, signalPeek)); sig.final {
			return stopProvider, 0, false
		}
	}
	serverWait, hasServerWait := RetryAfter(h, time.Now())
	if !hasServerWait && sig.hasWait {
		serverWait, hasServerWait = sig.wait, true
	}
	return stopNone, serverWait, hasServerWait
}

// streamHeld reports whether the request is a stream that the policy does
// not retry.
func (c *call) streamHeld() bool {
	return !c.p.RetryStreams && c.isStream()
}

// signalPeek is how much of a failed response's body is read to find what
// the provider says about retrying.
const signalPeek = 8 << 10

// peekBody reads up to n bytes of resp's body and puts them back in front
// of the rest, so that whoever reads the body later reads all of it.
func peekBody(resp *http.Response, n int) []byte {
	if resp.ContentLength >= 0 && resp.ContentLength < int64(n) {
		n = int(resp.ContentLength)
	}
	if n == 0 {
		return nil
	}
	buf := make([]byte, n)
	m, _ := io.ReadFull(resp.Body, buf)
	buf = buf[:m]
	resp.Body = &peekedBody{Reader: io.MultiReader(bytes.NewReader(buf), resp.Body), Closer: resp.Body}
	return buf
}

// peekedBody is a response body whose first bytes were read ahead.
type peekedBody struct {
	io.Reader
	io.Closer
}

// isStream sniffs the request once per call.
func (c *call) isStream() bool {
	if c.stream == 0 {
		c.stream = -1
		if isStream(c.req, c.getBody) {
			c.stream = 1
		}
	}
	return c.stream == 1
}

// record passes the latest attempt to OnAttempt, once.
func (c *call) record(retryIn time.Duration, held bool) {
	if c.p.OnAttempt == nil || c.recorded >= c.n {
		return
	}
	c.recorded = c.n
	c.p.OnAttempt(Attempt{ID: newID(), N: c.n, Request: c.out, Response: c.resp, Err: c.err, RetryIn: retryIn, Probe: c.wasProbe, Held: held})
}

// backoff is go-retryablehttp's Backoff: the wait checkRetry chose.
func (c *call) backoff(_, _ time.Duration, _ int, _ *http.Response) time.Duration {
	return c.wait
}

// attemptTransport sends one attempt for go-retryablehttp. It deliberately
// has no CloseIdleConnections method.
type attemptTransport call

// RoundTrip replays the previous result at the start of a round, and
// otherwise sends r through the base with a fresh copy of the body.
func (a *attemptTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c := (*call)(a)
	if c.replay {
		c.replay = false
		if c.err != nil {
			return nil, c.err
		}
		return c.resp, nil
	}
	if c.co != nil {
		probe, err := c.co.admit(r.Context(), c, true)
		if err != nil {
			c.resp, c.err, c.gaveUp = nil, err, true
			return nil, err
		}
		c.probe, c.wasProbe = probe, probe
		defer c.co.sent(c.key)
	}
	out := *r
	if c.getBody != nil {
		body, err := c.getBody()
		if err != nil {
			c.resp, c.err = nil, Permanent(fmt.Errorf("llmretry: rewinding request body: %w", err))
			return nil, c.err
		}
		out.Body = body
	}
	c.n++
	out = *out.WithContext(context.WithValue(out.Context(), attemptKey{}, c.n))
	c.out = &out
	c.resp, c.err = normalize(c.base.RoundTrip(&out))
	return c.resp, c.err
}
