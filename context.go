package llmretry

import (
	"context"
	"time"
)

// ctxKey is the one context key this package uses, for both a per-request
// policy (WithPolicy) and the mark of a request that is inside a retrying
// call (see Transport). One key means one context look-up per request.
type ctxKey struct{}

// inRetry marks a context as belonging to a call that may retry. It is a
// zero-size value, so storing it in a context allocates nothing for it.
type inRetry struct{}

// ctxPolicy is what WithPolicy stores.
type ctxPolicy struct {
	policy  Policy // resolved
	err     error  // from Validate; the request is refused if set
	inRetry bool   // WithPolicy was called inside a retrying call
}

// WithPolicy returns a copy of ctx that carries p: a Transport that sends a
// request with this context uses p instead of its own policy. This is how
// one shared http.Client serves agents with different policies.
//
// p is validated and copied here, once per context, not per request. If p
// is invalid, requests sent with the returned context are refused with
// Validate's error before anything is sent.
//
// Inside a call that is already retrying (see Transport), WithPolicy keeps
// that mark: a policy cannot turn an inner layer back into a retrying one.
func WithPolicy(ctx context.Context, p Policy) context.Context {
	cp := &ctxPolicy{}
	if err := p.Validate(); err != nil {
		cp.err = err
	} else {
		cp.policy = p.resolved()
	}
	switch v := ctx.Value(ctxKey{}).(type) {
	case inRetry:
		cp.inRetry = true
	case *ctxPolicy:
		cp.inRetry = v.inRetry
	}
	return context.WithValue(ctx, ctxKey{}, cp)
}

// markRetrying returns ctx marked as inside a retrying call.
func markRetrying(ctx context.Context) context.Context {
	return context.WithValue(ctx, ctxKey{}, inRetry{})
}

// lookup returns the per-request policy state of ctx (nil if none) and
// whether ctx is already inside a retrying call.
func lookup(ctx context.Context) (*ctxPolicy, bool) {
	switch v := ctx.Value(ctxKey{}).(type) {
	case inRetry:
		return nil, true
	case *ctxPolicy:
		return v, v.inRetry
	}
	return nil, false
}

// attemptKey is the context key under which an attempt's request carries
// its number.
type attemptKey struct{}

// probeKey is the context key under which an attempt's request says
// whether it is its provider key's probe.
type probeKey struct{}

// routeKey is the context key under which an attempt's request carries
// the route it takes (see Policy.Fallback).
type routeKey struct{}

// flight is the context of the first attempt of a RoundTrip: the caller's,
// marked as inside a retrying call (so that llmretry layers below pass the
// request through), numbered 1 for AttemptFromContext.
type flight struct {
	context.Context           // the caller's
	start           time.Time // when the call started; zero unless it has a deadline and a zero Reserve, or a FallbackAfter
	probe           bool      // the first attempt goes as its key's probe
}

// Value returns the mark and the attempt number; other keys are the
// caller's.
func (f *flight) Value(key any) any {
	switch key.(type) {
	case ctxKey:
		return inRetry{}
	case attemptKey:
		return 1
	case probeKey:
		return f.probe
	case routeKey:
		return 0
	}
	return f.Context.Value(key)
}

// resend is the context of a later attempt: the first attempt's, with the
// attempt's own number.
type resend struct {
	*flight
	n     int
	probe bool // the attempt goes as its key's probe
	route int  // the route it takes: 0 the primary
}

// Value returns the attempt number and whether it is a probe; other keys
// are the first attempt's.
func (r *resend) Value(key any) any {
	switch key.(type) {
	case attemptKey:
		return r.n
	case probeKey:
		return r.probe
	case routeKey:
		return r.route
	}
	return r.flight.Value(key)
}

// AttemptFromContext returns the number of the llmretry attempt whose
// request carries ctx: 1 for the first try, 2 for the first retry, and so
// on, counting across rounds. It returns 0 when ctx is not an llmretry
// attempt's. A RoundTripper below a Transport (an instrumentation layer,
// say) uses it to tell resends from first tries; the resend count is the
// attempt number less one.
func AttemptFromContext(ctx context.Context) int {
	if ctx == nil {
		return 0
	}
	n, _ := ctx.Value(attemptKey{}).(int)
	return n
}

// ProbeFromContext reports whether the llmretry attempt whose request
// carries ctx goes as its provider key's probe (see Coordination): the one
// attempt a coordinated Transport lets through to a key that is down. A
// RoundTripper below a Transport (an instrumentation layer, say) can mark
// the attempt before it ends, which Attempt.Probe, reported after, cannot.
// It returns false for any other context.
func ProbeFromContext(ctx context.Context) bool {
	if ctx == nil {
		return false
	}
	p, _ := ctx.Value(probeKey{}).(bool)
	return p
}

// RouteFromContext returns the route the llmretry attempt whose request
// carries ctx takes: 0 for the primary (the request as the caller made
// it), k for the policy's Fallback[k-1] (see Policy.Fallback). A
// RoundTripper below a Transport (an instrumentation layer, say) can label
// the attempt with it before it ends. It returns 0 for any other context.
func RouteFromContext(ctx context.Context) int {
	if ctx == nil {
		return 0
	}
	r, _ := ctx.Value(routeKey{}).(int)
	return r
}
