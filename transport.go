package llmretry

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/llmretry/llmretry/internal/coord"
)

// Transport is an http.RoundTripper that retries failed model requests by
// its Policy. Create it with New, or with NewCoordinated to have the calls
// to each provider share one probe during an outage (see package coordination).
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
	refusals coord.Refusals // the provider keys and models that refused a prefill, when not coordinated (see Policy.ContinueStreams)
	base     http.RoundTripper
	policy   Policy            // resolved by New
	ready    bool              // false for the zero Transport
	keepers  coord.Gatekeepers // the engine's Coordinator from NewCoordinated; nil: not coordinated
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
	return &Transport{base: base, policy: p.resolved(), ready: true}, nil
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
	if cp != nil && cp.err != nil {
		// Refused before anything is sent, nested or not (WithPolicy).
		closeBody(req)
		return nil, fmt.Errorf("llmretry: policy from WithPolicy: %w", cp.err)
	}
	if nested {
		// An outer llmretry call does the retrying; the base's result
		// still comes back as a response or an error, never both.
		return normalize(base.RoundTrip(req))
	}

	return t.start(req, t.policyFor(cp), base)
}
