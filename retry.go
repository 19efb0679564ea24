package llmretry

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"
)

// call is the state of one request after its first attempt failed. It
// lives only as long as the RoundTrip that made it. The retry loop
// (retryablehttp.go) calls send for each retry and decide after every
// attempt; everything else here is plain decisions on the call's state.
type call struct {
	f       *flight
	base    http.RoundTripper
	p       *Policy
	req     *http.Request                 // the caller's, never modified
	first   *http.Request                 // the first attempt as sent: every retry copies it
	out     *http.Request                 // the request of the latest attempt
	getBody func() (io.ReadCloser, error) // replays the body; nil if none

	rounds        // its limits, attempts, rounds and the wait decide chose, for the loop
	recorded int  // attempts passed to OnAttempt
	stream   int8 // 0 not sniffed yet, 1 a stream, -1 not a stream

	resp  *http.Response // the latest attempt's result
	err   error
	event *firstEvent // the error a 2xx stream opened with; nil if none
	fault bool        // err is the request's own (its body, GetBody, a malformed request)
	cut   error       // the context ended during a wait

	routing            // its routes (see Policy.Fallback); the zero value for a call on its primary alone
	gk      gatekeeper // the call's part in coordination (see gatekeeper): the latest attempt's route's
	probe   bool       // the latest attempt went as its provider key's probe
	refused bool       // the gatekeeper did not let the next attempt go (c.err says why)
}

// newCall returns the state of a call whose first attempt first (carrying
// context f) the Transport is about to send or has sent. Its gatekeeper is
// noGatekeeper until the Transport sets its own.
func newCall(f *flight, base http.RoundTripper, p *Policy, req, first *http.Request, getBody func() (io.ReadCloser, error)) *call {
	c := &call{f: f, base: base, p: p, req: req, first: first, out: first, getBody: getBody, gk: noGatekeeper{}}
	c.lim = limitsFrom(f.Context, p, req, f.start)
	return c
}

// run takes over after a failed first attempt (resp, err) and drives the
// retry loop, one round per answer of the policy's Asker (see runRounds).
func (c *call) run(resp *http.Response, err error) (*http.Response, error) {
	defer c.leaveRoutes()
	c.n, c.resp, c.err = 1, resp, err
	c.took(0)
	c.p.runRounds(c.f.Context, c)
	return c.result()
}

// exhausted is the record an Asker is shown when a round's retries are
// spent.
func (c *call) exhausted() *Exhausted {
	return &Exhausted{Request: c.req, Attempts: c.n, Reason: ErrRetriesSpent, Response: c.resp, Err: c.err, Routes: c.routesTaken()}
}

// routesTaken returns the routes the call's attempts took, for its record:
// nil for a policy without Fallback.
func (c *call) routesTaken() []int {
	if len(c.p.Fallback) == 0 {
		return nil
	}
	return slices.Clone(c.taken)
}

// result turns the loop's outcome into what the caller sees: the last
// response, marked with its record when it is a failure (see GaveUp), or an
// *Exhausted error that says why the call stopped.
func (c *call) result() (*http.Response, error) {
	if c.cut != nil {
		// The context ended during a wait; the last response was
		// discarded before it.
		return nil, &Exhausted{Request: c.req, Attempts: c.n, Reason: c.cut, Err: c.cut, Routes: c.routesTaken()}
	}
	ex := &Exhausted{Request: c.req, Attempts: c.n, Reason: c.why.reason(c.f.Context), Err: c.err, Routes: c.routesTaken()}
	if c.routeErr != nil {
		ex.Err = errors.Join(c.err, c.routeErr) // a route passed over says why
	}
	if c.err != nil {
		return nil, ex
	}
	switch c.why {
	case stopSpent, stopDeadline, stopServerWait, stopProvider, stopHeld:
		// We gave up on a response, or the provider said waiting will
		// not help: tell SDKs above us (openai-go, anthropic-sdk-go) not
		// to send it again. A stale AWS signature is left unmarked: the
		// SDK above signs its own retry afresh.
		c.resp.Header = c.resp.Header.Clone()
		if c.resp.Header == nil {
			c.resp.Header = make(http.Header)
		}
		c.resp.Header.Set("X-Should-Retry", "false")
	}
	if c.resp.StatusCode >= 400 || c.event != nil {
		ex.Response = c.resp
		markGaveUp(c.resp, c.out, ex)
	}
	return c.p.handOver(c.resp), nil
}

// send makes the next attempt, once the call's gatekeeper lets it go: a
// shallow copy of the first attempt's request, with a fresh body from
// GetBody and its own number in its context. Nothing else changes, so the
// base receives what it received the first time. The result is left in c.
func (c *call) send() {
	a := admission{
		n:         c.n + 1,
		left:      c.p.retryLimit(c.lim.hasDeadline()) - c.retries + 1, // this retry included
		latest:    c.lim.latest(),
		notBefore: c.server,
	}
	route, routed, probe, fault, err := c.admitRoute(c.f.Context, a)
	c.probe = probe
	if err != nil {
		c.resp, c.err = nil, err
		c.fault = fault // a gatekeeper's refusal is not the request's fault; a body that fails is
		c.refused = !fault
		return
	}
	defer c.gk.sent()
	ctx := &resend{flight: c.f, n: c.n + 1, probe: probe, route: route}
	var out *http.Request
	if routed != nil {
		out = routed.WithContext(ctx)
	} else {
		out = c.first.WithContext(ctx)
		if c.getBody != nil {
			if out.Body, err = c.rewind(); err != nil {
				c.resp, c.err, c.fault = nil, err, true
				return
			}
		}
	}
	c.n++
	c.took(route)
	c.out = out
	c.gk.begin()
	c.resp, c.err = c.p.roundTrip(c.base, out)
	c.gk.end(c.f.Context, c.resp)
	c.fault, c.event = false, nil
	if c.err == nil && c.p.guardsOpening(c.resp) {
		if c.event, c.err = c.p.opening(c.resp, c.lim); c.err != nil {
			c.resp = nil
		}
	}
}

// rewind returns a fresh copy of the request's body for another attempt:
// nil for a request without one. Its error is the request's own fault.
func (c *call) rewind() (io.ReadCloser, error) {
	if c.getBody == nil {
		return nil, nil
	}
	body, err := c.getBody()
	if err != nil {
		return nil, fmt.Errorf("llmretry: rewinding request body: %w", err)
	}
	return body, nil
}

// decide runs after every attempt, as the retry loop's CheckRetry: it says
// whether a retry follows, leaving its wait in c.wait, or why not, in
// c.why. It records the attempt, and discards the response of an attempt
// that is retried.
func (c *call) decide() bool {
	if c.again {
		return c.retryAtOnce()
	}
	if c.refused {
		c.why = stopHeld
		return false
	}
	if c.n == 0 {
		// Nothing was sent: the request's own fault (its body) ended it.
		c.why = stopFinal
		return false
	}
	why, says, server := c.classify()
	routeFault := c.routeFault(why, says)
	if routeFault {
		// The route's request, not the call's: elsewhere it may go, and
		// the move that sent it, which reached no provider, spends no
		// retry.
		why = stopNone
		c.retries = max(0, c.retries-1)
	}
	first := why
	sched := c.p.scheduleWait(c.retries+1, c.lim.hasDeadline())
	var body []byte // what was read of the body, if anything
	if why == stopNone && c.resp != nil && c.event == nil && readableBody(c.resp.Header.Get("Content-Type")) {
		// Quota bodies and Gemini's RetryInfo only matter for a status we
		// would retry, in a body that can carry them, if a retry (or an
		// Asker's round) could still follow; the read may take only the
		// time that leaves the next attempt within the call's limits.
		wait, plan := c.p.plan(sched, server, time.Now(), c.lim)
		if plan == stopSpent && c.p.OnExhausted != nil {
			wait, plan = 0, stopNone
		}
		if plan == stopNone {
			// A body that stalls past that instant is left unread: the
			// status and headers decide, and the response, if returned, is
			// readable from its first byte.
			body, _ = peekBody(c.resp, signalPeek, c.lim.before(wait))
			switch sig := readSignal(c.resp.StatusCode, c.resp.Header, body); {
			case sig.final:
				why, says = stopProvider, healthUp
			case !server.set && sig.hasWait:
				server = pause{d: sig.wait, set: true}
			}
		}
	}
	// Read after any peek: the limits count from now.
	now := time.Now()
	fromReset := false
	if why == stopNone && !server.set && c.event == nil && c.resp != nil && c.resp.StatusCode == http.StatusTooManyRequests {
		// No Retry-After and no wait in words: the reset of the spent
		// rate limit is the server's wait.
		server.d, server.set = rateLimitReset(c.resp.Header, now)
		fromReset = server.set
	}
	v := c.gk.report(c.f.Context, c.outcome(says, server, sched, body))
	var wait time.Duration
	if why == stopNone {
		own := sched
		if v.held {
			own.d = 0 // the gate holds the call instead
		}
		wait, why = c.p.plan(own, server, now, c.lim)
	}
	moved := false
	if len(c.p.Fallback) > 0 {
		c.next = c.route
		passed := says
		if routeFault {
			passed = healthDown // passed over like a route that is down (its key hears nothing)
		}
		if to, ok := c.goAround(first, why, passed, c.outcomeStatus(), now); ok {
			// Go around, at once: the next route's facts are its own.
			c.next, wait, why, moved = to, 0, stopNone, true
		} else if why == stopNone && passed == healthDown && c.route > 0 {
			// The last route that could take it is down too: wait as on
			// the primary, and try again from it.
			c.next = 0
		}
	}
	c.why = why
	held := v.held && why == stopNone && !moved
	c.record(wait, held)
	if why != stopNone {
		return false
	}
	c.server = time.Time{}
	if server.set && !moved && !(fromReset && v.paced) {
		// (A reset is when the limit is full again; a paced call goes at
		// its turn, sooner.)
		c.server = now.Add(server.d)
	}
	if held {
		wait = 0 // the gate holds the call instead
	}
	c.discard(wait)
	c.wait = wait
	c.retries++
	return true
}

// retryAtOnce decides the attempt that follows an Asker's yes (see
// atOnce), and discards the latest response if one follows.
func (c *call) retryAtOnce() bool {
	if !c.atOnce() {
		return false
	}
	c.next = 0 // a new round starts from the primary
	c.discard(c.wait)
	return true
}

// discard drains and closes the latest response, which a retry replaces,
// taking no longer than leaves the retry after wait within the call's
// limits.
func (c *call) discard(wait time.Duration) {
	if c.resp != nil {
		discard(c.resp.Body, c.lim.before(wait))
	}
}

// classify says whether the latest result may be retried, what it says of
// the provider, and what wait, if any, the server asked for in its
// headers. It reads nothing of the response body.
func (c *call) classify() (stop, health, pause) {
	if c.f.Context.Err() != nil {
		return stopFinal, healthNone, pause{} // the caller's own context ended
	}
	if c.err != nil {
		if c.fault || malformed(c.first) || hasBody(c.first) && c.getBody != nil && bodyFault(c.getBody, c.first.ContentLength) != nil {
			// The request's own: its body fails, or its shape is one no
			// server takes, whatever error the base saw first.
			return stopFinal, healthNone, pause{}
		}
		switch classifyErr(c.err) {
		case errRequest, errFinal:
			return stopFinal, healthNone, pause{}
		}
		// A failed connection or a timeout from below (the caller's
		// context is alive).
		if c.streamHeld() {
			return stopFinal, healthDown, pause{}
		}
		// A base that knows how long its provider wants (a transport of
		// its own, say) states it as Do's tools do (see statedWait).
		return stopNone, healthDown, statedWait(c.err)
	}
	status := c.resp.StatusCode
	if c.event != nil {
		status = c.event.status() // a 2xx stream that opened with an error
	}
	if status < 400 {
		return stopAnswered, healthUp, pause{}
	}
	says := healthUp
	if downStatus(status) {
		says = healthDown
	}
	h := c.resp.Header
	sig := readSignal(status, h, nil) // x-should-retry, no body yet
	if c.event != nil && c.event.final {
		sig.final = true
	}
	switch {
	case sig.final:
		return stopProvider, healthUp, pause{}
	case !retryableStatus(status) && !sig.retry:
		return stopFinal, says, pause{}
	case c.streamHeld():
		// Decided before the body is peeked: an error reply to a stream
		// may itself be a stream that the server keeps open.
		return stopFinal, says, pause{}
	}
	var server pause
	server.d, server.set = RetryAfter(h, time.Now())
	if c.event != nil && c.event.hasWait && !server.set {
		server = pause{d: c.event.wait, set: true}
	}
	return stopNone, says, server
}

// outcomeStatus returns the status the latest result stands for: its
// response's, or that of the error a 2xx stream opened with; 0 for an
// error.
func (c *call) outcomeStatus() int {
	switch {
	case c.resp == nil:
		return 0
	case c.event != nil:
		return c.event.status()
	}
	return c.resp.StatusCode
}

// outcome is what the latest attempt's result says, for the gatekeeper:
// its health, server's wait and signals' body as decide found them, and
// the schedule's wait before its retry.
func (c *call) outcome(h health, server, own pause, body []byte) outcome {
	o := outcome{health: h, resp: c.resp, err: c.err, server: server, own: own, body: body}
	if c.resp != nil {
		o.status = c.resp.StatusCode
		if c.event != nil {
			o.status = c.event.status()
		}
	}
	if c.event != nil {
		o.event = c.event.describe()
	}
	return o
}

// streamHeld reports whether the request is a stream that the policy does
// not retry.
func (c *call) streamHeld() bool {
	return !c.p.RetryStreams && c.isStream()
}

// signalPeek is how much of a failed response's body is read to find what
// the provider says about retrying.
const signalPeek = 8 << 10

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
	a := Attempt{ID: newID(), N: c.n, Request: c.out, Response: c.resp, Err: c.err, RetryIn: retryIn, Probe: c.probe, Route: c.route, Held: held}
	if c.why != stopNone {
		a.Stop = c.why.reason(c.f.Context)
	}
	c.p.OnAttempt(a)
}
