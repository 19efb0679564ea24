package llmretry

import (
	"context"
	"errors"
	"time"

	"github.com/llmretry/llmretry/internal/clock"
	"github.com/llmretry/llmretry/internal/coord"
)

// Do runs call, and runs it again after a wait while it fails, under the
// same Policy a Transport uses for model requests: the schedule (Waits, or
// exponential backoff with full jitter), MaxRetries, the deadline/reserve
// rule against ctx's deadline, OnAttempt once per call (with a nil
// Request and Response) and OnExhausted, asked once per round when the
// schedule is spent (a yes calls again at once, then runs the schedule's
// retries again), and MaxRetryAfter for the waits an error states (below).
// RetryStreams and the timeouts (AttemptTimeout, FirstEventTimeout,
// StreamIdleTimeout) do not apply.
//
// Do is for tool calls and other work that is not an HTTP request. Only
// idempotent or read-only tools belong in it: a call that failed may have
// done part of its work. A tool should return an error marked with
// Permanent for failures a retry will not fix (bad arguments, a refused
// permission); Do then gives up at once.
//
// A tool whose provider says how long to wait (a search API's 429 with
// Retry-After, a queue's "busy, retry in 2 s") states it in its error: an
// error with a method RetryAfter() time.Duration, anywhere in its chain
// (errors.As finds it; a negative wait counts as zero). Do honours it as
// a Transport honours a server's Retry-After: the next call waits the
// longer of the schedule's wait and the stated one; a stated wait above
// MaxRetryAfter stops Do at once with ErrWaitTooLong, and one that would
// break the deadline/reserve rule with ErrNoTimeLeft, without waiting.
//
// A call is retried while it returns a non-nil error that is not marked
// Permanent and ctx has not ended (an error the call returns once ctx is
// done is the context's own and is never retried). Do returns the last
// call's result: its value and a nil error on success; otherwise the value
// the last call returned and an *Exhausted error (Request nil) that counts
// the calls, says why Do stopped (Reason: ErrNotRetryable for a Permanent
// error, ErrRetriesSpent, ErrNoTimeLeft, ErrWaitTooLong, or ctx's error)
// and wraps the last call's error, so errors.Is and errors.As reach both.
// If ctx ends during a wait, Do returns at once, making no further call,
// with an *Exhausted error whose Reason and Err are ctx's error (the last
// call's error is in the record OnAttempt was given).
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
	d := &doCall[T]{ctx: ctx, inner: markRetrying(ctx), p: &rp, fn: call}
	d.lim = limitsOf(ctx, &rp, nil)
	d.attempt()
	runRounds(ctx, rp.OnExhausted, d)
	return d.result()
}

// doCall is the state of one Do: its rounds and its latest call's result.
// It belongs to Do's goroutine.
type doCall[T any] struct {
	rounds
	ctx   context.Context // the caller's
	inner context.Context // ctx, marked as inside a retrying call
	p     *Policy         // resolved
	fn    func(context.Context) (T, error)
	v     T     // the latest call's value
	err   error // and its error
	cut   error // ctx ended during a wait
}

// attempt calls the operation once.
func (d *doCall[T]) attempt() {
	d.v, d.err = d.fn(d.inner)
	d.n++
}

// round calls the operation again after each wait decide chooses, until
// decide says no retry follows, and says why; a wait that ctx cuts short
// ends the round (and Do) too.
func (d *doCall[T]) round() stop {
	for d.decide() {
		if err := clock.Sleep(d.ctx, d.wait); err != nil {
			d.cut = err
			break
		}
		d.attempt()
	}
	return d.why
}

// decide runs after every call: it says whether a retry follows, leaving
// its wait in d.wait, or why not, in d.why. It records the call for
// OnAttempt (the call after OnExhausted's yes was recorded before it asked).
func (d *doCall[T]) decide() bool {
	if d.again {
		return d.atOnce()
	}
	if d.err == nil {
		d.why = stopAnswered
		d.record(nil, 0, nil)
		return false
	}
	now := time.Now()
	server := statedWait(d.err)
	var wait time.Duration
	why := stopFinal
	if d.ctx.Err() == nil && !isPermanent(d.err) {
		wait, why = d.p.plan(d.p.scheduleWait(d.retries+1, d.lim.hasDeadline()), server, now, d.lim)
	}
	d.record(d.err, wait, why.reason(d.ctx))
	// The stated wait holds for the next call: a retry's, or the first of
	// the round OnExhausted's yes runs (atOnce).
	d.server = time.Time{}
	if server.Set {
		d.server = now.Add(server.D)
	}
	if d.why = why; why != stopNone {
		return false
	}
	d.wait = wait
	d.retries++
	return true
}

// waitStater is an error that states how long to wait before the next
// call (see Do).
type waitStater interface {
	RetryAfter() time.Duration
}

// statedWait returns the wait err states (see Do): that of the first
// error in its chain with a RetryAfter method, at least zero; unset if
// none has one.
func statedWait(err error) coord.Pause {
	var w waitStater
	if !errors.As(err, &w) {
		return coord.Pause{}
	}
	return coord.Pause{D: max(0, w.RetryAfter()), Set: true}
}

// exhausted is the record OnExhausted is shown when a round's retries are
// spent.
func (d *doCall[T]) exhausted() *Exhausted {
	return &Exhausted{Attempts: d.n, Reason: ErrRetriesSpent, Err: d.err}
}

// result is what Do returns: the last call's value, and nil or an
// *Exhausted error that says why Do stopped.
func (d *doCall[T]) result() (T, error) {
	switch {
	case d.cut != nil:
		return d.v, &Exhausted{Attempts: d.n, Reason: d.cut, Err: d.cut}
	case d.err == nil:
		return d.v, nil
	}
	return d.v, &Exhausted{Attempts: d.n, Reason: d.why.reason(d.ctx), Err: d.err}
}

// record passes the latest call's outcome to OnAttempt, if set: its
// error, the wait before the next call, and why none follows (nil if one
// does).
func (d *doCall[T]) record(err error, retryIn time.Duration, stop error) {
	if d.p.OnAttempt != nil {
		d.p.OnAttempt(Attempt{ID: newID(), N: d.n, Err: err, RetryIn: retryIn, Stop: stop})
	}
}

// permanentError marks an error that a retry will not fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as one that a retry will not fix: a Transport whose
// base returns it, or a call run by Do that returns it, gives up at once.
// errors.Is and errors.As still reach err. Permanent(nil) is nil.
//
// Use it in a middleware under the Transport that refused a call, a request
// signer that failed, or a tool that knows its failure is final.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// isPermanent reports whether err or anything it wraps was marked Permanent.
func isPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
