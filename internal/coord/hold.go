package coord

import (
	"net/http"
	"strconv"
	"time"
)

// HoldReason says why a call was held: llmretry.HoldReason's values, which
// the root converts by number (a test there checks that they agree).
type HoldReason int

// The reasons, as llmretry numbers them.
const (
	HoldDown HoldReason = iota + 1
	HoldServerWait
	HoldBudget
	HoldPaced
	HoldInFlight
)

// HoldOutcome says how a hold ended: llmretry.HoldOutcome's values, which
// the root converts by number.
type HoldOutcome int

// The outcomes, as llmretry numbers them.
const (
	HoldWaiting HoldOutcome = iota
	HoldProbe
	HoldReleased
	HoldGaveUp
	HoldCanceled
)

// Hold is the record of one hold, as the engine reports it to the call's
// Policy: llmretry.Hold's fields, which the root copies into one.
type Hold struct {
	Request    *http.Request // the caller's
	N          int           // the attempt the hold delays
	Key        string        // the store's name of the provider key
	Reason     HoldReason
	Start, End time.Time // End zero until the hold ends
	Outcome    HoldOutcome
}

// holding is a hold in progress.
type holding struct {
	Hold
	p Policy
}

// beginHold starts the record of the call's hold for the reason g before
// attempt n, and passes it to the call's Policy.
func (cc *Call) beginHold(g gate, now time.Time, n int) *holding {
	h := &holding{Hold: Hold{Request: cc.req, N: n, Key: cc.k.name, Reason: holdReason(g), Start: now}, p: cc.p}
	h.p.Held(h.Hold)
	return h
}

// holdReason is the reason for a closed gate g.
func holdReason(g gate) HoldReason {
	switch g {
	case gateWait:
		return HoldServerWait
	case gateBudget:
		return HoldBudget
	case gatePace:
		return HoldPaced
	case gateInFlight:
		return HoldInFlight
	}
	return HoldDown
}

// end records how the hold ended. A nil h (no hold) does nothing.
func (h *holding) end(o HoldOutcome) {
	if h == nil {
		return
	}
	h.End, h.Outcome = time.Now(), o
	h.p.Held(h.Hold)
}

// Refused is why a call may not send its next attempt: it cannot wait as
// long as its key's hold may last. Its fields are llmretry.DownError's,
// which the root makes of it (Last is the failure's kind, "" if none);
// its text is for this package's tests and logs, not the user's.
type Refused struct {
	Key    string
	Reason HoldReason
	Since  time.Time
	For    time.Duration
	Until  time.Time
	Left   time.Duration
	Waited time.Duration
	Last   string
}

// Error names the key and the reason, in the engine's words.
func (e *Refused) Error() string {
	return "llmretry: coordination refused a call on " + e.Key + ": held " + e.Waited.String() + " for reason " + strconv.Itoa(int(e.Reason)) + ", could wait no longer"
}
