package llmretry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/llmretry/llmretry/internal/coord"
	"github.com/llmretry/llmretry/internal/wire"
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
	event *wire.FirstEvent // the error a 2xx stream opened with; nil if none
	fault bool             // err is the request's own (its body, GetBody, a malformed request)
	cut   error            // the context ended during a wait

	deadline bool // the call has a deadline (c.lim's, kept: the schedule asks it for every retry)

	t         *Transport // the Transport whose call it is; nil for a call made by hand in tests
	continued string     // the way the call continues a cut stream (Attempt.Continued); "" for a call of its own
	from      int64      // the content a continuation continues from, in bytes (Attempt.From)

	routing                   // its routes (see Policy.Fallback); the zero value for a call on its primary alone
	gk       coord.Gatekeeper // the call's part in coordination (see coord.Gatekeeper): the latest attempt's route's
	probe    bool             // the latest attempt went as its provider key's probe
	refused  bool             // the gatekeeper did not let the next attempt go (c.err says why)
	mispaced bool             // a 429 at its pace's turn spent a retry already (see coord.Verdict)
}

// start makes a call of req under p through base: its first attempt (the
// caller's request, with its context marked so that llmretry layers below
// pass it through) is sent at once; a call whose first attempt fails goes
// on as a call (run). A request that works the first time pays for no
// call state, no retry loop and no body copy it does not need.
func (t *Transport) start(req *http.Request, p *Policy, base http.RoundTripper) (*http.Response, error) {
	ctx := req.Context()
	f := &flight{Context: ctx}
	if _, ok := ctx.Deadline(); (ok && p.Reserve == 0) || p.FallbackAfter > 0 {
		// The default reserve is a share of the time left now;
		// FallbackAfter counts from now.
		f.start = time.Now()
	}
	out := req.WithContext(f)
	getBody := req.GetBody
	if getBody == nil && hasBody(req) {
		// Without GetBody the body can be sent only once: keep one copy.
		buf, err := copyBody(ctx, req)
		if err != nil {
			return nil, err
		}
		getBody = replayBody(buf)
		out.GetBody = getBody
		out.Body, _ = getBody()
	}
	var gk coord.Gatekeeper = open{}
	if t.keepers != nil {
		gk = t.keepers.Join(req, (*callPolicy)(p), 0)
	}
	defer gk.Leave()
	probe, err := gk.Admit(ctx, coord.Admission{N: 1, Elsewhere: len(p.Fallback) > 0})
	if err != nil {
		closeBody(out)
		if len(p.Fallback) > 0 && isDown(err) {
			// Its primary is held: the call starts on a route that is up.
			c := newCall(f, base, p, req, out, getBody)
			c.t, c.gk, c.keepers = t, gk, t.keepers
			return c.answer(c.around())
		}
		return nil, &Exhausted{Request: req, Reason: heldReason(ctx, err, p.MaxRetryAfter), Err: err}
	}
	f.probe = probe
	resp, ev, err := exchange(f, p, base, gk, req, out)
	if err == nil && resp.StatusCode < 400 && ev == nil {
		gk.Report(ctx, coord.Outcome{Health: coord.HealthUp, Resp: resp, Status: resp.StatusCode})
		if p.OnAttempt != nil {
			tell(p.OnAttempt, Attempt{ID: newID(), N: 1, Request: out, Response: resp, Probe: probe})
		}
		if p.RetryStreams || p.StreamIdleTimeout > 0 {
			resp = handOver(resp, commit{t: t, f: f, base: base, p: p, req: req, first: out, getBody: getBody, keepers: t.keepers, n: 1})
		}
		return resp, nil
	}
	c := newCall(f, base, p, req, out, getBody)
	c.gk, c.probe, c.event = gk, probe, ev
	c.t, c.keepers = t, t.keepers
	return c.answer(c.run(resp, err))
}

// newCall returns the state of a call whose first attempt first (carrying
// context f) the Transport is about to send or has sent. Its gatekeeper is
// open until the Transport sets its own.
func newCall(f *flight, base http.RoundTripper, p *Policy, req, first *http.Request, getBody func() (io.ReadCloser, error)) *call {
	c := &call{f: f, base: base, p: p, req: req, first: first, out: first, getBody: getBody, gk: open{}}
	c.lim = limitsFrom(f.Context, p, req, f.start)
	c.deadline = c.lim.hasDeadline()
	return c
}

// open is the gatekeeper of a call that is not coordinated (a Transport
// made by New): it lets every attempt go at once and hears nothing. It is
// zero-size, so that holding it in an interface allocates nothing, and it
// lives beside the call that asks it.
type open struct{}

func (open) Admit(context.Context, coord.Admission) (bool, error) { return false, nil }
func (open) AdmitAny(context.Context, coord.Admission, []coord.Gatekeeper) (int, bool, error) {
	return 0, false, nil
}
func (open) Begin()                                              {}
func (open) End(context.Context, *http.Response)                 {}
func (open) Sent()                                               {}
func (open) Report(context.Context, coord.Outcome) coord.Verdict { return coord.Verdict{} }
func (open) Leave()                                              {}

// routed reports whether the call's policy has routes beside its primary:
// a call without them never asks fallback.go.
func (c *call) routed() bool { return len(c.p.Fallback)+len(c.p.LongContext) > 0 }

// run takes over after a failed first attempt (resp, err) and drives the
// retry loop, one round per answer of OnExhausted (see runRounds).
func (c *call) run(resp *http.Response, err error) (*http.Response, error) {
	c.n, c.resp, c.err = 1, resp, err
	if c.routed() {
		defer c.leaveRoutes()
		c.took(0)
	}
	runRounds(c.f.Context, c.p.OnExhausted, c)
	return c.result()
}

// exhausted is the record OnExhausted is shown when a round's retries are
// spent.
func (c *call) exhausted() *Exhausted {
	return &Exhausted{Request: c.req, Attempts: c.n, Reason: ErrRetriesSpent, Response: c.resp, Err: c.err, Routes: c.routesTaken(), sent: c.out}
}

// routesTaken returns the routes the call's attempts took, for its record:
// nil for a policy without routes (Fallback, LongContext).
func (c *call) routesTaken() []int {
	if !c.routed() {
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
		return nil, &Exhausted{Request: c.req, Attempts: c.n, Reason: c.cut, Err: c.cut, Routes: c.routesTaken(), sent: c.out}
	}
	ex := &Exhausted{Request: c.req, Attempts: c.n, Reason: c.why.reason(c.f.Context), Err: c.err, Routes: c.routesTaken(), sent: c.out}
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
		if c.event != nil {
			ex.Event = c.event.What
		}
		markGaveUp(c.resp, c.out, ex)
	}
	return c.resp, nil
}

// send makes the next attempt, once the call's gatekeeper lets it go: a
// shallow copy of the first attempt's request, with a fresh body from
// GetBody and its own number in its context. Nothing else changes, so the
// base receives what it received the first time. The result is left in c.
func (c *call) send() {
	a := coord.Admission{
		N:         c.n + 1,
		Left:      c.p.retryLimit(c.deadline) - c.retries + 1, // this retry included
		Latest:    c.lim.latest(),
		NotBefore: c.server,
	}
	var route int
	var routed *http.Request
	var probe, fault bool
	var err error
	if c.routed() {
		route, routed, probe, fault, err = c.admitRoute(c.f.Context, a)
	} else {
		probe, err = c.gk.Admit(c.f.Context, a)
	}
	c.probe = probe
	if err != nil {
		c.resp, c.err = nil, err
		c.fault = fault // a gatekeeper's refusal is not the request's fault; a body that fails is
		c.refused = !fault
		return
	}
	defer c.gk.Sent()
	ctx := &resend{flight: c.f, n: c.n + 1, probe: probe, route: route, continued: c.continued, from: c.from}
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
	if c.routed() {
		c.took(route)
	}
	c.out = out
	c.resp, c.event, c.err = exchange(c.f, c.p, c.base, c.gk, c.req, out)
	c.fault = false
}

// exchange sends out, an attempt of the call whose first attempt carried
// f, under p through base: it tells gk as the attempt begins and as it
// ends, bounds the wait for the response's headers by p.AttemptTimeout
// (see roundTripWithin), and reads the opening of a stream p retries
// before anyone else reads it (see Policy.RetryStreams). It returns the
// response; with the error event a 2xx stream opened with, if it did (the
// body then replays what was read); or an error. RoundTrip sends the
// first attempt through it, send every retry: attempt k is sent as
// attempt 1 was.
func exchange(f *flight, p *Policy, base http.RoundTripper, gk coord.Gatekeeper, req, out *http.Request) (*http.Response, *wire.FirstEvent, error) {
	gk.Begin()
	resp, err := roundTripWithin(base, out, p.AttemptTimeout)
	gk.End(f.Context, resp)
	if err != nil || !p.RetryStreams || !p.guardsOpening(resp) {
		return resp, nil, err
	}
	// A stream is retried until committed: read its opening first, by
	// the call's limits (the same for every attempt).
	ev, err := p.opening(resp, limitsFrom(f.Context, p, req, f.start))
	if err != nil {
		return nil, nil, err
	}
	return resp, ev, nil
}

// roundTripWithin sends req through base within d (Policy.AttemptTimeout):
// a base that has not answered with headers by then is abandoned (the
// attempt's context is canceled, which closes its connection) and the
// attempt fails with a *boundError. Headers in time leave the attempt's
// context alive until the body is closed. With d zero it is
// base.RoundTrip, with normalize's guarantees either way.
func roundTripWithin(base http.RoundTripper, req *http.Request, d time.Duration) (*http.Response, error) {
	if d <= 0 {
		return normalize(base.RoundTrip(req))
	}
	ctx, cancel := context.WithCancel(req.Context())
	timer := time.AfterFunc(d, cancel)
	resp, err := normalize(base.RoundTrip(req.WithContext(ctx)))
	if !timer.Stop() && req.Context().Err() == nil {
		// The bound passed first: whatever came is abandoned.
		if resp != nil {
			resp.Body.Close()
		}
		cancel()
		return nil, &boundError{what: "no response headers", name: "Policy.AttemptTimeout", d: d}
	}
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// boundError is an attempt abandoned, or a stream ended, because a bound
// of the policy passed. It is a timeout (Timeout reports true, as for a
// net.Error), never the caller's context's error.
type boundError struct {
	what string        // what did not come in time
	name string        // the Policy field that bounds it
	d    time.Duration // its value
}

func (e *boundError) Error() string {
	return "llmretry: " + e.what + " within " + e.name + " (" + e.d.String() + ")"
}

// Timeout reports true: the error is a timeout.
func (e *boundError) Timeout() bool { return true }

// Temporary reports true, as net.Error's timeouts do.
func (e *boundError) Temporary() bool { return true }

// cancelBody is a response body whose attempt's context ends when it is
// closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

// Close closes the body and ends the attempt's context.
func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
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
//
// It reads the result once, in order: what the status, headers, error or
// a stream's opening event say (judge); what the body's first bytes add,
// only when that can change the decision (peek); a 429's rate-limit
// reset; what the gatekeeper makes of it (report); then one plan of the
// wait, and whether the call goes around to another route (fallback.go).
func (c *call) decide() bool {
	if c.again {
		return c.retryAtOnce()
	}
	if c.refused {
		c.why = heldStop(c.err, c.p.MaxRetryAfter)
		return false
	}
	if c.n == 0 {
		// Nothing was sent: the request's own fault (its body) ended it.
		c.why = stopFinal
		return false
	}
	j := c.judge()
	if j.why == stopAnswered {
		c.gk.Report(c.f.Context, c.outcome(&j, coord.Pause{}))
		c.why, c.moved = stopAnswered, ""
		c.record(0, false)
		return false
	}
	routeFault := c.routed() && c.routeFault(j.why, j.says)
	if routeFault {
		// The route's request, not the call's: elsewhere it may go, and
		// the move that sent it, which reached no provider, spends no
		// retry.
		j.why = stopNone
		c.retries = max(0, c.retries-1)
	}
	first := j.why
	sched := c.p.scheduleWait(c.retries+1, c.deadline)
	c.peek(&j, sched)
	c.readRefusal(&j)
	// After any peek: the limits count from now.
	now := time.Now()
	fromReset := c.resetWait(&j, now)
	if j.why == stopNone && j.status == http.StatusTooManyRequests && !j.server.Set {
		sched = c.p.refusedWait(c.retries+1, sched) // a 429 is never hammered
	}
	o := c.outcome(&j, sched)
	o.Reset = fromReset
	v := c.gk.Report(c.f.Context, o)
	var wait time.Duration
	if j.why == stopNone {
		own := sched
		if v.Held {
			own.D = 0 // the gate holds the call instead
		}
		wait, j.why = c.p.plan(own, j.server, now, c.lim)
	}
	moved := c.routed() && c.moveOn(first, &j, v, routeFault, now)
	if moved {
		wait = 0 // go around at once: the next route's facts are its own
	}
	if c.stayed && v.Held && j.why == stopNone {
		// The key is down by this attempt's own failure, which keeps the
		// call on its primary (a blip): its retry waits its own wait, as
		// without routes, and then goes as the key's probe (whose first
		// turn after a key that was up comes no later). Held by the gate
		// instead, it would be refused there at once, the call having
		// another route, and go around.
		wait, j.why = c.p.plan(sched, j.server, now, c.lim)
	}
	c.why = j.why
	if !moved && c.refusesPrefill(&j) {
		c.moved = movedPrefill // the record says so; the resumer regenerates
	}
	held := v.Held && j.why == stopNone && !moved && !c.stayed
	c.record(wait, held)
	// The server's wait holds for the next attempt: a retry's, or the
	// first of the round OnExhausted's yes runs when the retries are
	// spent (atOnce).
	c.server = time.Time{}
	if j.server.Set && !moved && !(fromReset && v.Paced) {
		// (A reset is when the limit is full again; a paced call goes at
		// its turn, sooner.)
		c.server = now.Add(j.server.D)
	}
	if j.why != stopNone {
		return false
	}
	if held {
		wait = 0 // the gate holds the call instead
	}
	c.discard(wait)
	c.wait = wait
	if !v.Mispaced || !c.mispaced {
		// A 429 at the turn the pace gave the attempt is the pace's
		// error, not the call's: it spends one retry at most, whatever
		// the pace's next turn meets.
		c.retries++
	}
	c.mispaced = c.mispaced || v.Mispaced
	return true
}

// judgement is what the latest attempt's result says, as decide reads it.
type judgement struct {
	why    stop         // stopNone: a retry may fix it; otherwise why not
	says   coord.Health // what it says of the provider
	status int          // the status it stands for: the response's, or that of the error a 2xx stream opened with; 0 for an error
	server coord.Pause  // the wait the server asked for
	body   []byte       // what was read of the body to find the provider's signals; nil if nothing
	// refusal is what a 4xx said is wrong with the request that another
	// route may cure (see readRefusal).
	refusal wire.Refusal
}

// peek reads the first bytes of the latest response's body for what the
// provider says there (a spent quota or spend cap, Gemini's RetryInfo, a
// wait in words), once, and only when that can change the decision: for a
// result a retry may fix, whose body can carry it (on the attempt that
// spends the retries too: the body may name the stop). The read takes
// no longer than leaves that retry within the call's limits: a body that
// stalls past that instant is left unread, the status and headers decide,
// and the response, if returned, is readable from its first byte.
func (c *call) peek(j *judgement, sched coord.Pause) {
	if j.why != stopNone || c.resp == nil || c.event != nil || !wire.ReadableBody(c.resp.Header.Get("Content-Type")) {
		return
	}
	var wait time.Duration // the retry's, which the read must leave room for
	switch {
	case !sched.Set:
		// No retry follows (OnExhausted's round would start at once),
		// but what the body says names the stop: a spent quota, or a
		// wait longer than MaxRetryAfter or the deadline allows.
	case j.server.Set && j.server.D > c.p.MaxRetryAfter:
		return // the server's wait ends the call whatever the body says
	default:
		wait = sched.D
		if j.server.Set {
			wait = max(wait, j.server.D)
		}
	}
	j.body, _ = peekBody(c.resp, signalPeek, c.lim.before(wait))
	switch sig := wire.BodySignal(c.resp.Header, j.body); {
	case sig.Final:
		j.why, j.says = stopProvider, coord.HealthUp
	case !j.server.Set && sig.HasWait:
		j.server = coord.Pause{D: sig.Wait, Set: true}
	}
}

// readRefusal reads, for a 4xx that ends the call where it is, whether the
// provider refused the request for a reason another route may cure (a
// prompt longer than the model's window, a refused credential: see
// wire.RefusalOf), when the policy has a route for it: LongContext for
// the one, Fallback for the other. The body's first bytes are read at once
// (a move waits for nothing), and put back.
func (c *call) readRefusal(j *judgement) {
	switch {
	case j.why != stopFinal || c.resp == nil || c.event != nil || c.f.Context.Err() != nil:
		return
	case j.status < 400 || j.status > 499 || c.streamHeld():
		return
	case len(c.p.LongContext) == 0 && (len(c.p.Fallback) == 0 || !keyStatus(j.status)):
		return
	}
	if j.status != http.StatusUnauthorized {
		j.body, _ = peekBody(c.resp, signalPeek, c.lim.before(0))
	}
	j.refusal = wire.RefusalOf(j.status, c.resp.Header, j.body)
}

// keyStatus reports whether a reply of status may refuse a credential:
// a 401, a 403, or a 400 (Gemini's API_KEY_INVALID).
func keyStatus(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusBadRequest
}

// resetWait makes the reset of a spent rate limit the server's wait for a
// retryable 429 that states no other (no Retry-After, nothing in its
// body), and reports whether it did.
func (c *call) resetWait(j *judgement, now time.Time) bool {
	if j.why != stopNone || j.server.Set || c.event != nil || c.resp == nil || c.resp.StatusCode != http.StatusTooManyRequests {
		return false
	}
	j.server.D, j.server.Set = wire.SpentReset(c.resp.Header, now)
	return j.server.Set
}

// retryAtOnce decides the attempt that follows OnExhausted's yes (see
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

// judge says whether the latest result may be retried, what it says of
// the provider, the status it stands for, and the wait, if any, the server
// asked for in its headers, the error event a stream opened with, or the
// base's error. It reads nothing of the response body.
func (c *call) judge() judgement {
	switch {
	case c.f.Context.Err() != nil:
		// The caller's own context ended: nothing more is sent, and the
		// result says nothing of the provider.
		j := judgement{why: stopFinal}
		if c.err == nil {
			j.status = c.statusOf()
		}
		return j
	case c.err != nil:
		return c.judgeError()
	}
	return c.judgeResponse()
}

// judgeError is judge for an attempt that got no response, with the
// caller's context alive.
func (c *call) judgeError() judgement {
	if c.fault || malformed(c.first) || hasBody(c.first) && c.getBody != nil && bodyFault(c.getBody, c.first.ContentLength) != nil {
		// The request's own: its body fails, or its shape is one no
		// server takes, whatever error the base saw first.
		return judgement{why: stopFinal}
	}
	switch classifyErr(c.err) {
	case errRequest, errFinal:
		return judgement{why: stopFinal}
	}
	// A failed connection or a timeout from below (the caller's context
	// is alive).
	if c.streamHeld() {
		return judgement{why: stopStream, says: coord.HealthDown}
	}
	// A base that knows how long its provider wants (a transport of its
	// own, say) states it as Do's tools do (see statedWait).
	return judgement{why: stopNone, says: coord.HealthDown, server: statedWait(c.err)}
}

// statusOf returns the status the latest response stands for: its own,
// or that of the error a 2xx stream opened with.
func (c *call) statusOf() int {
	if c.event != nil {
		return c.event.Status()
	}
	return c.resp.StatusCode
}

// judgeResponse is judge for a response, with the caller's context alive.
func (c *call) judgeResponse() judgement {
	j := judgement{status: c.statusOf(), says: coord.HealthUp}
	if j.status < 400 {
		j.why = stopAnswered
		return j
	}
	retryable := retryableStatus(j.status)
	if retryable && j.status >= 500 {
		j.says = coord.HealthDown // a retryable 5xx says the provider is down
	}
	h := c.resp.Header
	sig := wire.HeaderSignal(j.status, h) // x-should-retry; the body is peek's
	switch {
	case sig.Final || c.event != nil && c.event.Final:
		j.why, j.says = stopProvider, coord.HealthUp
	case !retryable && !sig.Retry:
		j.why = stopFinal
	case c.streamHeld():
		// Decided before the body is peeked: an error reply to a stream
		// may itself be a stream that the server keeps open.
		j.why = stopStream
	default:
		j.server.D, j.server.Set = wire.RetryAfter(h, time.Now())
		if c.event != nil && c.event.HasWait && !j.server.Set {
			j.server = coord.Pause{D: c.event.Wait, Set: true}
		}
	}
	return j
}

// outcome is what the latest attempt's result says, for the gatekeeper:
// judgement j, and the schedule's wait before its retry.
func (c *call) outcome(j *judgement, own coord.Pause) coord.Outcome {
	o := coord.Outcome{Health: j.says, Resp: c.resp, Err: c.err, Status: j.status, Server: j.server, Own: own, Body: j.body}
	if c.event != nil {
		o.Event = c.event.Describe()
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
	if c.why != stopNone && c.moved != movedPrefill {
		// (A refused prefill is followed by the regeneration.)
		a.Stop = c.why.reason(c.f.Context)
	}
	if c.event != nil {
		a.Event = c.event.What
	}
	a.Moved = c.moved
	a.Continued, a.From = c.continued, c.from
	tell(c.p.OnAttempt, a)
}

// tell passes a to on, a policy's OnAttempt. If on panics, the panic goes
// on to the call's caller, who will never get a.Response: its body is
// closed first, which ends the send lease a stream's body holds under a
// limit on calls in flight (and frees its connection).
func tell(on func(Attempt), a Attempt) {
	defer func() {
		if v := recover(); v != nil {
			if a.Response != nil && a.Response.Body != nil {
				a.Response.Body.Close()
			}
			panic(v)
		}
	}()
	on(a)
}

// normalize enforces the RoundTripper contract on a base's result: a
// response or an error, never both or neither, and a non-nil body.
func normalize(resp *http.Response, err error) (*http.Response, error) {
	switch {
	case err != nil:
		if resp != nil && resp.Body != nil {
			resp.Body.Close()
		}
		return nil, err
	case resp == nil:
		return nil, errors.New("llmretry: base RoundTripper returned neither a response nor an error")
	case resp.Body == nil:
		resp.Body = http.NoBody
	}
	return resp, nil
}

// closeBody closes req's body, if any, as a RoundTripper must.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
