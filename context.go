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

// attemptKey is the context key under which an attempt's request says
// which attempt it is: its value is the *flight of a first attempt or the
// *resend of a later one, so that a lookup allocates nothing.
type attemptKey struct{}

// flight is the context of the first attempt of a RoundTrip: the caller's,
// marked as inside a retrying call (so that llmretry layers below pass the
// request through), and the first attempt's for AttemptFromContext.
type flight struct {
	context.Context           // the caller's
	start           time.Time // when the call started; zero unless it has a deadline and a zero Reserve, or a FallbackAfter
	probe           bool      // the first attempt goes as its key's probe
}

// Value returns the mark and the attempt; other keys are the caller's.
func (f *flight) Value(key any) any {
	switch key.(type) {
	case ctxKey:
		return inRetry{}
	case attemptKey:
		return f
	}
	return f.Context.Value(key)
}

// resend is the context of a later attempt: the first attempt's, with the
// attempt's own number, route and probe mark.
type resend struct {
	*flight
	n         int
	probe     bool   // the attempt goes as its key's probe
	route     int    // the route it takes: 0 the primary
	continued string // the way it continues a cut stream (Attempt.Continued); "" for none
	from      int64  // the content it continues from (Attempt.From)
}

// Value returns the attempt; other keys are the first attempt's.
func (r *resend) Value(key any) any {
	if _, ok := key.(attemptKey); ok {
		return r
	}
	return r.flight.Value(key)
}

// AttemptFromContext returns the llmretry attempt whose request carries
// ctx, as far as it is known while the attempt is under way: its number N
// (1 for the first try, 2 for the first retry, and so on, counting across
// rounds; the resend count is N less one), its Route (0 the primary, k
// the policy's Fallback[k-1], len(Fallback)+k its LongContext[k-1]),
// whether it goes as its provider key's Probe (see NewCoordinated) and,
// for an attempt that continues a cut stream (see Policy.ContinueStreams),
// its Continued and From. The rest of the record is known only once
// the attempt ends (see Policy.OnAttempt). It reports false, with the zero
// Attempt, for a context that is not an llmretry attempt's.
//
// A RoundTripper below a Transport (an instrumentation layer, say) uses it
// to tell resends from first tries and to label an attempt before it ends.
// It allocates nothing.
func AttemptFromContext(ctx context.Context) (Attempt, bool) {
	if ctx == nil {
		return Attempt{}, false
	}
	switch v := ctx.Value(attemptKey{}).(type) {
	case *flight:
		return Attempt{N: 1, Probe: v.probe}, true
	case *resend:
		return Attempt{N: v.n, Probe: v.probe, Route: v.route, Continued: v.continued, From: v.from}, true
	}
	return Attempt{}, false
}
