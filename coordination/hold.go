package coordination

import (
	"fmt"
	"net/http"
	"time"

	"github.com/llmretry/llmretry/internal/credential"
)

// HoldReason says why a coordinated call was held (see the package doc).
// The zero HoldReason is no reason: its String is "unknown". A HoldReason
// is a plain value, safe to copy and read anywhere.
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

// String names the reason: "provider down", "server wait", "retry budget
// spent", "paced under a rate limit", "at the limit on calls in flight",
// or "unknown".
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

// HoldOutcome says how a hold ended. The zero HoldOutcome is HoldWaiting:
// the hold has not ended. A HoldOutcome is a plain value, safe to copy and
// read anywhere.
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
	// sending (see HeldError).
	HoldGaveUp
	// HoldCanceled: the call's context ended.
	HoldCanceled
)

// String names the outcome: "waiting", "sent as the probe", "released",
// "gave up", "canceled", or "unknown".
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
// passed to Config.OnHold twice: when the hold begins (Outcome HoldWaiting,
// End zero) and when it ends.
//
// A Hold is a value, made for each record and not changed after it is
// passed, so an OnHold may keep it and read it from any goroutine; the zero
// Hold records nothing (no request, no key, reason unknown, waiting).
// Request is the caller's request, shared with the call that is held:
// treat it as read-only, and do not keep it past the call.
type Hold struct {
	// Request is the caller's request.
	Request *http.Request
	// N is the number of the attempt the hold delays: 1 for a call held
	// before its first attempt, counting across rounds as llmretry's
	// Attempt.N does.
	N int
	// Key names the provider key: its host and a hash of the credential
	// (see the package doc).
	Key string
	// Reason is why the hold began.
	Reason HoldReason
	// Start is when the hold began; End when it ended (zero until then).
	Start, End time.Time
	// Outcome is how it ended, or HoldWaiting.
	Outcome HoldOutcome
}

// String renders the hold on one line without credentials: the request's
// method and URL (no user information, no query: "?…"), the key, the
// reason, the outcome and, once it ended, how long it lasted.
func (h Hold) String() string {
	s := "hold"
	if h.Request != nil {
		s += " " + h.Request.Method + " " + credential.RedactURL(h.Request.URL)
	}
	s += " on " + h.Key + " (" + h.Reason.String() + "): " + h.Outcome.String()
	if !h.End.IsZero() {
		s += fmt.Sprintf(" after %v", h.End.Sub(h.Start))
	}
	return s
}
