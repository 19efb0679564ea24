package llmretry

import (
	"errors"
	"fmt"
	"time"
)

// Defaults applied where a Policy field is zero.
const (
	// DefaultReserve is the time that must remain before a request's
	// deadline after a wait, when Policy.Reserve is zero.
	DefaultReserve = 60 * time.Second
	// DefaultMaxRetries is the number of retries after the first try when
	// Policy.Waits is empty and Policy.MaxRetries is zero.
	DefaultMaxRetries = 6
	// DefaultMaxWait caps each computed exponential wait when
	// Policy.MaxWait is zero.
	DefaultMaxWait = 60 * time.Second
	// DefaultMaxRetryAfter is the longest server-requested wait honoured
	// when Policy.MaxRetryAfter is zero.
	DefaultMaxRetryAfter = 5 * time.Minute
)

// Policy says when and how often a failed model request is sent again.
//
// The zero Policy is ready to use: up to 6 retries after the first try,
// each after a random wait of up to 1 s, 2 s, 4 s, … capped at 60 s
// (exponential backoff with full jitter); a wait is taken only if, after it,
// at least 60 s remain before the request's context deadline; server waits
// (Retry-After, retry-after-ms) of up to 5 minutes are honoured; streamed
// requests are not retried; when retries run out the last result is
// returned (nobody is asked).
//
// A Policy is a value: the Transport keeps its own copy (including a copy of
// Waits), so changing a Policy after passing it to New or WithPolicy has no
// effect. OnAttempt, OnHold and OnExhausted are called from the goroutine that
// called RoundTrip (or Do); they must be safe for concurrent use when the
// Transport is shared.
type Policy struct {
	// Waits is an explicit schedule: retry k waits Waits[k-1]. Without a
	// context deadline the list is the bound on retries; with one, the last
	// wait repeats for as long as the deadline and Reserve allow. Empty
	// means exponential backoff with full jitter (see MaxWait, MaxRetries).
	Waits []time.Duration
	// Reserve is the time that must remain before the request's context
	// deadline after a wait: a wait is taken only if
	// now + wait + Reserve <= deadline. Zero means DefaultReserve (60 s).
	// It has no effect on requests without a deadline.
	Reserve time.Duration
	// MaxRetries is the number of retries after the first try (retries, not
	// attempts). Zero means DefaultMaxRetries (6) when Waits is empty; with
	// Waits, zero means no cap beyond the schedule and a positive value caps
	// the number of retries.
	MaxRetries int
	// MaxWait caps each computed exponential wait (it does not cap Waits or
	// server waits). Zero means DefaultMaxWait (60 s).
	MaxWait time.Duration
	// MaxRetryAfter is the longest server-requested wait honoured. A
	// response asking for longer ends retrying at once and is returned.
	// Zero means DefaultMaxRetryAfter (5 minutes).
	MaxRetryAfter time.Duration
	// RetryStreams makes requests detected as streams retryable like any
	// other. By default a streamed request is sent once and its first
	// result returned as it is. See IsStream.
	RetryStreams bool
	// OnAttempt, if set, is called once per attempt, after the attempt ends
	// and before any wait. It must not read or close Attempt.Response.Body.
	OnAttempt func(Attempt)
	// OnExhausted, if set, is asked once retries run out whether to run
	// another round of the schedule. Nil means fail: the last result is
	// returned.
	OnExhausted Asker
	// OnHold, if set, is called when a coordinated call is held back before
	// an attempt and again when the hold ends (see Coordination and Hold).
	// It is never called on a Transport made by New.
	OnHold func(Hold)
}

// Validate reports whether p can be used, naming the first field that
// cannot. It refuses negative durations and counts and a negative wait in
// Waits.
func (p Policy) Validate() error {
	var errs []error
	for i, w := range p.Waits {
		if w < 0 {
			errs = append(errs, fmt.Errorf("llmretry: Policy.Waits[%d] is negative (%v)", i, w))
		}
	}
	if p.Reserve < 0 {
		errs = append(errs, fmt.Errorf("llmretry: Policy.Reserve is negative (%v)", p.Reserve))
	}
	if p.MaxRetries < 0 {
		errs = append(errs, fmt.Errorf("llmretry: Policy.MaxRetries is negative (%d)", p.MaxRetries))
	}
	if p.MaxWait < 0 {
		errs = append(errs, fmt.Errorf("llmretry: Policy.MaxWait is negative (%v)", p.MaxWait))
	}
	if p.MaxRetryAfter < 0 {
		errs = append(errs, fmt.Errorf("llmretry: Policy.MaxRetryAfter is negative (%v)", p.MaxRetryAfter))
	}
	return errors.Join(errs...)
}

// resolved returns a copy of p with its defaults filled in and Waits
// copied, so that the caller's slice can change without affecting us.
func (p Policy) resolved() Policy {
	if p.Reserve == 0 {
		p.Reserve = DefaultReserve
	}
	if p.MaxRetries == 0 && len(p.Waits) == 0 {
		p.MaxRetries = DefaultMaxRetries
	}
	if p.MaxWait == 0 {
		p.MaxWait = DefaultMaxWait
	}
	if p.MaxRetryAfter == 0 {
		p.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if p.Waits != nil {
		p.Waits = append([]time.Duration(nil), p.Waits...)
	}
	return p
}
