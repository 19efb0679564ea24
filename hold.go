package llmretry

import (
	"fmt"
	"net/http"
	"time"
)

// HoldReason says why a coordinated call was held (see Coordination).
type HoldReason int

const (
	// HoldDown: the provider key is down; the call waits for a probe to
	// succeed or to be sent as the probe.
	HoldDown HoldReason = iota + 1
	// HoldServerWait: the provider asked for a wait (Retry-After) that is
	// not over.
	HoldServerWait
	// HoldBudget: the key's retry budget is spent; the call waits for a
	// retry in flight to end.
	HoldBudget
	// HoldPaced: the key has spent a rate limit the provider publishes;
	// the call waits for its turn at the pace the limit allows.
	HoldPaced
	// HoldInFlight: the key's calls in flight are at the limit learnt
	// from its 429s; the call waits for one of them to end.
	HoldInFlight
)

// String names the reason.
func (r HoldReason) String() string {
	switch r {
	case HoldDown:
		return "provider down"
	case HoldServerWait:
		return "server wait"
	case HoldBudget:
		return "retry budget spent"
	case HoldPaced:
		return "paced under a rate limit"
	case HoldInFlight:
		return "at the limit on calls in flight"
	}
	return "unknown"
}

// HoldOutcome says how a hold ended.
type HoldOutcome int

const (
	// HoldWaiting: the hold has begun and not ended.
	HoldWaiting HoldOutcome = iota
	// HoldProbe: the call was sent as the key's probe.
	HoldProbe
	// HoldReleased: the key came back (a probe or another call got an
	// answer), the server's wait ended or the budget freed up; the call was
	// sent.
	HoldReleased
	// HoldGaveUp: the call could not wait any longer and ended without
	// sending (see DownError).
	HoldGaveUp
	// HoldCanceled: the call's context ended.
	HoldCanceled
)

// String names the outcome.
func (o HoldOutcome) String() string {
	switch o {
	case HoldWaiting:
		return "waiting"
	case HoldProbe:
		return "sent as the probe"
	case HoldReleased:
		return "released"
	case HoldGaveUp:
		return "gave up"
	case HoldCanceled:
		return "canceled"
	}
	return "unknown"
}

// Hold is the record of one coordinated wait: a call held back, before an
// attempt, by what other calls to the same provider key learned. It is
// passed to Policy.OnHold twice: when the hold begins (Outcome HoldWaiting,
// End zero) and when it ends.
//
// Request is the caller's request, to be treated as read-only.
type Hold struct {
	// Request is the caller's request.
	Request *http.Request
	// N is the number of the attempt the hold delays: 1 for a call held
	// before its first attempt, counting across rounds as Attempt.N does.
	N int
	// Key names the provider key: its host and a hash of the credential
	// (see Coordination).
	Key string
	// Reason is why the hold began.
	Reason HoldReason
	// Start is when the hold began; End when it ended (zero until then).
	Start, End time.Time
	// Outcome is how it ended, or HoldWaiting.
	Outcome HoldOutcome
}

// String renders the hold on one line without credentials.
func (h Hold) String() string {
	s := "hold"
	if h.Request != nil {
		s += " " + h.Request.Method + " " + redactURL(h.Request.URL)
	}
	s += " on " + h.Key + " (" + h.Reason.String() + "): " + h.Outcome.String()
	if !h.End.IsZero() {
		s += fmt.Sprintf(" after %v", h.End.Sub(h.Start))
	}
	return s
}

// DownError is why a coordinated call ended without sending its next
// attempt: its provider key was down, under a server wait, out of retry
// budget, at its limit on calls in flight, or paced under a rate limit
// with the call's turn too far off, for longer than the call could wait
// (see Coordination).
// RoundTrip returns it wrapped in an *Exhausted; errors.As finds it.
type DownError struct {
	// Key names the provider key (host and credential hash).
	Key string
	// Reason is what held the call last.
	Reason HoldReason
	// Since is when the key went down, and For how long it had been down
	// when the call gave up; both zero if it was held only by a server
	// wait.
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
// without credentials.
func (e *DownError) Error() string {
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
		s += "; last failure: " + redactErr(e.Last, nil)
	}
	return s
}

// Unwrap returns the last failure seen for the key.
func (e *DownError) Unwrap() error { return e.Last }

// failedStatus is a failure's kind as an error, for DownError.Last.
type failedStatus struct {
	code   int
	status string
}

func (e *failedStatus) Error() string {
	if e.status != "" {
		return e.status
	}
	return fmt.Sprintf("status %d", e.code)
}
