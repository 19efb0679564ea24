package llmretry

import (
	"context"
	"errors"
	"strings"
)

// The reasons a Transport, or Do, sends no further attempt. Exactly one of
// them, or the context's own error, is an *Exhausted's Reason and an
// Attempt's Stop; errors.Is finds it through what RoundTrip and Do return
// (a coordinated give-up, an *Exhausted wrapping a *DownError, included).
var (
	// ErrRetriesSpent: the policy's schedule allowed no further retry
	// (MaxRetries, or the end of Waits without a deadline or with a last
	// wait of zero), and no Asker said to go on.
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
	}
	return ErrNotRetryable
}

// reasonText is a reason in words, without this package's prefix, for a
// text that carries the prefix once already.
func reasonText(err error) string {
	return strings.TrimPrefix(err.Error(), "llmretry: ")
}

// heldReason is the reason of a call whose gatekeeper did not let its
// first attempt go: it held it until the call could wait no longer, or
// until its context ended (the gatekeeper returns the context's error
// only then).
func heldReason(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return ErrNoTimeLeft
}
