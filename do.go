package llmretry

import (
	"context"
	"errors"
	"time"
)

// Do runs call, and runs it again after a wait while it fails, under the
// same Policy a Transport uses for model requests: the schedule (Waits, or
// exponential backoff with full jitter), MaxRetries, the deadline/reserve
// rule against ctx's deadline, OnAttempt once per call (with a nil
// Request and Response) and OnExhausted, asked once per round when the
// schedule is spent (a yes calls again at once, then runs the schedule's
// retries again). MaxRetryAfter, RetryStreams, the timeouts
// (AttemptTimeout, FirstEventTimeout, StreamIdleTimeout) and OnHold do not
// apply.
//
// Do is for tool calls and other work that is not an HTTP request. Only
// idempotent or read-only tools belong in it: a call that failed may have
// done part of its work. A tool should return an error marked with
// Permanent for failures a retry will not fix (bad arguments, a refused
// permission); Do then gives up at once.
//
// A call is retried while it returns a non-nil error that is not marked
// Permanent and ctx has not ended (an error the call returns once ctx is
// done is the context's own and is never retried). Do returns the last
// call's result: its value and a nil error on success; otherwise the value
// the last call returned and an *Exhausted error (Request nil) that counts
// the calls, says why Do stopped (Reason: ErrNotRetryable for a Permanent
// error, ErrRetriesSpent, ErrNoTimeLeft, or ctx's error) and wraps the last
// call's error, so errors.Is and errors.As reach both. If ctx ends during a
// wait, Do returns at once with an *Exhausted error wrapping ctx's error and
// makes no further call.
//
// An invalid policy is refused with Validate's error before call is made.
//
// call receives a context derived from ctx and marked as inside a retrying
// call, so a Transport the tool uses passes its requests straight through
// instead of multiplying attempts. For the same reason, Do inside a call
// that is already retrying (a Transport's or another Do's) runs call once
// and returns its result unchanged.
//
// Do is safe for concurrent use; it starts no goroutine, and OnAttempt and
// OnExhausted run on the calling goroutine.
func Do[T any](ctx context.Context, p Policy, call func(context.Context) (T, error)) (T, error) {
	var zero T
	if err := p.Validate(); err != nil {
		return zero, err
	}
	if call == nil {
		return zero, errors.New("llmretry: Do: nil call")
	}
	if _, nested := lookup(ctx); nested {
		return call(ctx) // an outer llmretry call does the retrying
	}
	rp := p.resolved()
	inner := markRetrying(ctx)
	lim := limitsOf(ctx, &rp, nil)
	n := 0       // calls made, across rounds
	retries := 0 // retries taken in the current round
	for {
		v, err := call(inner)
		n++
		if err == nil {
			rp.recordCall(n, nil, 0, nil)
			return v, nil
		}
		wait, why := rp.doNext(ctx, retries+1, err, lim)
		rp.recordCall(n, err, wait, why.reason(ctx))
		if why == stopSpent && rp.OnExhausted != nil && ctx.Err() == nil {
			if rp.OnExhausted.Ask(ctx, &Exhausted{Attempts: n, Reason: ErrRetriesSpent, Err: err}) && ctx.Err() == nil {
				// Another round: one call at once (the person who
				// answered has waited already), then the schedule's
				// retries, still under the deadline/reserve rule.
				retries, wait, why = -1, 0, lim.allows(time.Now())
			}
		}
		if why != stopNone {
			return v, &Exhausted{Attempts: n, Reason: why.reason(ctx), Err: err}
		}
		retries++
		if err := sleep(ctx, wait); err != nil {
			return v, &Exhausted{Attempts: n, Reason: err, Err: err}
		}
	}
}

// doNext decides whether retry k (1-based within the round) of a call
// that failed with err follows, and after how long. p must be resolved.
func (p *Policy) doNext(ctx context.Context, k int, err error, lim limits) (time.Duration, stop) {
	if ctx.Err() != nil || isPermanent(err) {
		return 0, stopFinal
	}
	return p.plan(p.scheduleWait(k, lim.hasDeadline()), pause{}, time.Now(), lim)
}

// recordCall passes call n's outcome to OnAttempt, if set: its error, the
// wait before the next call, and why none follows (nil if one does).
func (p *Policy) recordCall(n int, err error, retryIn time.Duration, stop error) {
	if p.OnAttempt != nil {
		p.OnAttempt(Attempt{ID: newID(), N: n, Err: err, RetryIn: retryIn, Stop: stop})
	}
}

// sleep waits d, or until ctx ends, whichever comes first; it returns
// ctx's error if ctx ended first.
func sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
