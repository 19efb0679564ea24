package coordination

import (
	"fmt"
	"time"

	"github.com/llmretry/llmretry/internal/credential"
)

// HeldError is why a coordinated call ended without sending its next
// attempt: its provider key was down, under a server wait, out of retry
// budget, at its limit on calls in flight, or paced under a rate limit
// with the call's turn too far off, for longer than the call could wait
// (see the package doc). A Transport's RoundTrip returns it wrapped in an
// *llmretry.Exhausted; errors.As finds it.
//
// A HeldError is made for the call that ends with it and belongs to its
// caller; it is not modified after, so reading it is safe from any
// goroutine. The zero HeldError says only that a call was held (for no
// known reason, on no named key).
type HeldError struct {
	// Key names the provider key (host and credential hash).
	Key string
	// Reason is what held the call last.
	Reason HoldReason
	// Since is when the key went down, and For how long it had been down
	// when the call gave up; both zero if the key was not down then.
	Since time.Time
	For   time.Duration
	// Until is when the server's wait ends (for HoldPaced: when the call's
	// turn under the pace would have come), and Left how much of it was
	// left when the call gave up; both zero if there was none.
	Until time.Time
	Left  time.Duration
	// Waited is how long this call was held before giving up.
	Waited time.Duration
	// Last is the last failure that confirmed the key down or asked for
	// the wait, from any call (of any process sharing the store), as an
	// error whose text is its kind: a status ("502 Bad Gateway") or a
	// transport failure ("connection refused"). It may be nil.
	Last error
}

// Error says what held the call, for how long, and the last failure,
// without credentials (a credential-like name=value in Last's text is
// blanked).
func (e *HeldError) Error() string {
	s := "llmretry: provider " + e.Key
	if !e.Since.IsZero() {
		s += fmt.Sprintf(" down for %v", e.For.Round(time.Millisecond))
		if !e.Until.IsZero() {
			s += " and"
		}
	}
	switch {
	case !e.Until.IsZero() && e.Reason == HoldPaced:
		s += fmt.Sprintf(" paced under a rate limit, its turn %v away", e.Left.Round(time.Millisecond))
	case !e.Until.IsZero():
		s += fmt.Sprintf(" asking to wait %v more", e.Left.Round(time.Millisecond))
	}
	if e.Since.IsZero() && e.Until.IsZero() {
		s += ": " + e.Reason.String()
	}
	s += fmt.Sprintf(": held %v, could wait no longer", e.Waited.Round(time.Millisecond))
	if e.Last != nil {
		s += "; last failure: " + credential.RedactParams(e.Last.Error())
	}
	return s
}

// Unwrap returns the last failure seen for the key (Last).
func (e *HeldError) Unwrap() error { return e.Last }
