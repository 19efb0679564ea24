package llmretry

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Transport is an http.RoundTripper that retries failed model requests by
// its Policy. Create it with New, or with NewCoordinated to have the calls
// to each provider share one probe during an outage (see Coordination).
//
// The zero Transport is usable: it sends through http.DefaultTransport with
// the zero Policy. A Transport is safe for concurrent use; all per-request
// state lives in the request's own call.
//
// RoundTrip follows the http.RoundTripper contract: it never modifies the
// caller's request, always closes its body (the first attempt sends it;
// retries send fresh copies from req.GetBody; when GetBody is nil, the
// body is read once into memory and every attempt, the first included,
// sends a copy of that), and returns either a response or an error, never
// both. What the caller sees is the last attempt's result: a response
// readable from its first byte (even a final 429 or 5xx, whose record
// GaveUp returns), or an *Exhausted error that says why the call stopped
// (its Reason) and wraps the last attempt's error. A request refused
// before anything is sent (no URL, an invalid policy from WithPolicy, a
// body that cannot be read) gets a plain error. A response that is not
// returned is closed after a bounded read, so that its connection can be
// reused: at most the first 8 KiB of an error reply (what the provider
// says about retrying, then a drain of up to 4 KiB), or a stream's opening
// read ahead (see Policy.RetryStreams).
//
// Only the outermost Transport retries: a request sent while another
// llmretry call is already retrying (its context says so) passes straight
// through to the base, so nested layers cannot multiply attempts.
type Transport struct {
	base    http.RoundTripper
	policy  Policy      // resolved by New
	ready   bool        // false for the zero Transport
	keepers gatekeepers // noGatekeeper from New, coordinated from NewCoordinated; nil for the zero Transport
}

// New returns a Transport that sends through base (http.DefaultTransport if
// nil) under policy p. An invalid policy is an error and no Transport is
// made; see Policy.Validate.
func New(base http.RoundTripper, p Policy) (*Transport, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if base == nil {
		base = http.DefaultTransport
	}
	return &Transport{base: base, policy: p.resolved(), ready: true, keepers: noGatekeeper{}}, nil
}

// CloseIdleConnections closes the base transport's idle connections, if it
// has such a method. The Transport itself never calls it.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.baseRT().(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// baseRT returns the base round tripper.
func (t *Transport) baseRT() http.RoundTripper {
	if t.base == nil {
		return http.DefaultTransport
	}
	return t.base
}

// keeperFor returns the gatekeeper of a call of req under policy p: the
// Transport's, or, for the zero Transport, noGatekeeper.
func (t *Transport) keeperFor(req *http.Request, p *Policy) gatekeeper {
	return t.keepersOrNone().join(req, p, 0)
}

// keepersOrNone returns the Transport's gatekeepers: noGatekeeper for the
// zero Transport.
func (t *Transport) keepersOrNone() gatekeepers {
	if t.keepers == nil {
		return noGatekeeper{}
	}
	return t.keepers
}

// policyFor returns the policy for a request: its context's, else the
// Transport's.
func (t *Transport) policyFor(cp *ctxPolicy) *Policy {
	if cp != nil {
		return &cp.policy
	}
	if !t.ready {
		p := Policy{}.resolved()
		return &p
	}
	return &t.policy
}

// RoundTrip sends req, and sends it again after a wait while the policy
// allows. See Transport for what it returns.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req == nil {
		return nil, errors.New("llmretry: nil request")
	}
	if req.URL == nil {
		closeBody(req)
		return nil, errors.New("llmretry: request has no URL")
	}
	base := t.baseRT()
	ctx := req.Context()
	cp, nested := lookup(ctx)
	if nested {
		return base.RoundTrip(req) // an outer llmretry call does the retrying
	}
	if cp != nil && cp.err != nil {
		closeBody(req)
		return nil, fmt.Errorf("llmretry: policy from WithPolicy: %w", cp.err)
	}

	// The first attempt: the caller's request, with its context marked so
	// that llmretry layers below us pass it through.
	p := t.policyFor(cp)
	f := &flight{Context: ctx}
	if _, ok := ctx.Deadline(); (ok && p.Reserve == 0) || p.FallbackAfter > 0 {
		// The default reserve is a share of the time left now;
		// FallbackAfter counts from now.
		f.start = time.Now()
	}
	out := req.WithContext(f)
	getBody := req.GetBody
	if hasBody(req) {
		if getBody == nil {
			// Without GetBody the body can be sent only once: keep one
			// copy.
			buf, err := copyBody(ctx, req)
			if err != nil {
				return nil, err
			}
			getBody = replayBody(buf)
			out.GetBody = getBody
			out.Body, _ = getBody()
		}
	}
	gk := t.keeperFor(req, p)
	defer gk.leave()
	probe, err := gk.admit(ctx, admission{n: 1, elsewhere: len(p.Fallback) > 0})
	if err != nil {
		closeBody(out)
		if len(p.Fallback) > 0 && isDown(err) {
			// Its primary is held: the call starts on a route that is up.
			c := newCall(f, base, p, req, out, getBody)
			c.gk, c.keepers = gk, t.keepersOrNone()
			return c.around()
		}
		return nil, &Exhausted{Request: req, Reason: heldReason(ctx), Err: err}
	}
	f.probe = probe
	gk.begin()
	resp, err := p.roundTrip(base, out)
	gk.end(ctx, resp)
	var ev *firstEvent
	if err == nil && p.guardsOpening(resp) {
		// A stream is retried until committed: read its opening first.
		if ev, err = p.opening(resp, limitsFrom(ctx, p, req, f.start)); err != nil {
			resp = nil
		}
	}
	if err == nil && resp.StatusCode < 400 && ev == nil {
		gk.report(ctx, outcome{health: healthUp, resp: resp, status: resp.StatusCode})
		if p.OnAttempt != nil {
			p.OnAttempt(Attempt{ID: newID(), N: 1, Request: out, Response: resp, Probe: probe})
		}
		return p.handOver(resp), nil
	}
	c := newCall(f, base, p, req, out, getBody)
	c.gk, c.probe, c.event = gk, probe, ev
	c.keepers = t.keepersOrNone()
	return c.run(resp, err)
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
