package llmretry

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/llmretry/llmretry/coordination"
)

// stop says why a request is not retried any more; reason turns it into
// the exported sentinel.
type stop int

const (
	stopNone       stop = iota // a retry follows
	stopAnswered               // the result is an answer (a status below 400)
	stopFinal                  // the result is not retryable
	stopSpent                  // the schedule ran out of retries (OnExhausted may be asked)
	stopDeadline               // the wait would break the deadline/reserve rule
	stopServerWait             // the server asked for a wait above MaxRetryAfter
	stopProvider               // the provider says waiting will not help (spent quota, x-should-retry: false)
	stopHeld                   // the gatekeeper held the next attempt (its provider down, or asking for a wait) longer than the call could wait
	stopSigned                 // the request's AWS signature would be too old when resent
	stopStream                 // a stream the policy does not retry failed in a way that would be retried
)

// The reasons a Transport, or Do, sends no further attempt. Exactly one of
// them, or the context's own error, is an *Exhausted's Reason and an
// Attempt's Stop; errors.Is finds it through what RoundTrip and Do return
// (a coordinated give-up, an *Exhausted wrapping a *coordination.HeldError,
// included).
var (
	// ErrRetriesSpent: the policy's schedule allowed no further retry
	// (MaxRetries, or the end of Waits without a deadline or with a last
	// wait of zero), and OnExhausted did not say to go on.
	ErrRetriesSpent = errors.New("llmretry: retries spent")
	// ErrNoTimeLeft: the next attempt would have gone past the call's
	// deadline less its reserve, or past the age at which an AWS
	// Signature Version 4 request is refused; a coordinated call held
	// until then ends with it too.
	ErrNoTimeLeft = errors.New("llmretry: no time left before the deadline less the reserve")
	// ErrWaitTooLong: the server asked for a wait (Retry-After,
	// retry-after-ms, a wait stated in its reply, the reset of a spent
	// rate limit), or a call run by Do returned an error stating one (see
	// Do), longer than Policy.MaxRetryAfter.
	ErrWaitTooLong = errors.New("llmretry: the server asked to wait longer than MaxRetryAfter")
	// ErrProviderRefused: the provider said that waiting will not help: a
	// spent quota or spend cap, a per-day quota, x-should-retry: false.
	ErrProviderRefused = errors.New("llmretry: the provider refused: waiting will not help")
	// ErrNotRetryable: the status or error is one no retry fixes (a 400,
	// a refused certificate, an error marked Permanent), or the request's
	// own fault (its body fails, its shape is one no server takes).
	ErrNotRetryable = errors.New("llmretry: not retryable")
)

// reason returns the sentinel for s, or ctx's error when ctx has ended (a
// call stops for its caller's context before any other reason).
func (s stop) reason(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch s {
	case stopNone, stopAnswered:
		return nil
	case stopSpent:
		return ErrRetriesSpent
	case stopDeadline, stopSigned, stopHeld:
		return ErrNoTimeLeft
	case stopServerWait:
		return ErrWaitTooLong
	case stopProvider:
		return ErrProviderRefused
	case stopStream:
		return errStreamNotRetried
	}
	return ErrNotRetryable
}

// errStreamNotRetried is the reason of a stream that a policy without
// RetryStreams sent once, whose attempt failed in a way that would be
// retried (a 503, a refused connection): not "not retryable", which would
// be false of a 503, but why it was not. errors.Is finds ErrNotRetryable
// in it.
var errStreamNotRetried error = &notRetried{"llmretry: not retried: a stream is sent once without Policy.RetryStreams"}

// notRetried is a reason that is ErrNotRetryable in other words.
type notRetried struct{ text string }

func (e *notRetried) Error() string { return e.text }

// Is reports whether target is ErrNotRetryable.
func (e *notRetried) Is(target error) bool { return target == ErrNotRetryable }

// reasonText is a reason in words, without this package's prefix, for a
// text that carries the prefix once already.
func reasonText(err error) string {
	return strings.TrimPrefix(err.Error(), "llmretry: ")
}

// heldReason is the reason of a call whose gatekeeper did not let its
// first attempt go, err saying why (see heldStop), or its context's error
// when its context ended (the gatekeeper returns that error only then).
func heldReason(ctx context.Context, err error, maxRetryAfter time.Duration) error {
	return heldStop(err, maxRetryAfter).reason(ctx)
}

// heldStop is why the gatekeeper did not let an attempt go, err (a
// *coordination.HeldError) saying why: the server's wait on the key, when
// it is longer than maxRetryAfter (the policy's MaxRetryAfter: the call
// would not wait it out), else the call's limits, past which it could wait
// no longer.
func heldStop(err error, maxRetryAfter time.Duration) stop {
	var held *coordination.HeldError
	if errors.As(err, &held) && held.Reason == coordination.HoldServerWait && held.Left > maxRetryAfter {
		return stopServerWait
	}
	return stopHeld
}
