package coord

import (
	"time"

	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/store"
)

// holding is a hold in progress: its record, told to the Config's OnHold
// (if set) as it begins and as it ends.
type holding struct {
	coordination.Hold
	on func(coordination.Hold)
}

// beginHold starts the record of the call's hold for the reason g before
// attempt n, and tells it. The caller holds no lock.
func (cc *Call) beginHold(g gate, now time.Time, n int) *holding {
	h := &holding{Hold: coordination.Hold{Request: cc.req, N: n, Key: cc.k.name, Reason: holdReason(g), Start: now}, on: cc.co.cfg.OnHold}
	h.tell()
	return h
}

// holdReason is the reason for a closed gate g.
func holdReason(g gate) coordination.HoldReason {
	switch g {
	case gateWait:
		return coordination.HoldServerWait
	case gateBudget:
		return coordination.HoldBudget
	case gatePace:
		return coordination.HoldPaced
	case gateInFlight:
		return coordination.HoldInFlight
	}
	return coordination.HoldDown
}

// end records how the hold ended, and tells it. A nil h (no hold) does
// nothing. The caller holds no lock.
func (h *holding) end(o coordination.HoldOutcome) {
	if h == nil {
		return
	}
	h.End, h.Outcome = time.Now(), o
	h.tell()
}

// tell passes the record to OnHold, if set.
func (h *holding) tell() {
	if h.on != nil {
		h.on(h.Hold)
	}
}

// heldError says why the call cannot wait any longer, from its key's facts
// f at now: held since start, last for the reason g.
func (cc *Call) heldError(f store.Facts, g gate, now, start time.Time) *coordination.HeldError {
	d := &coordination.HeldError{Key: cc.k.name, Reason: holdReason(g), Waited: now.Sub(start)}
	if f.Reason != "" {
		d.Last = failure(f.Reason)
	}
	if f.Down(now) {
		d.Since, d.For = f.DownSince, now.Sub(f.DownSince)
	}
	if f.Waiting(now) {
		d.Until, d.Left = f.WaitUntil, f.WaitUntil.Sub(now)
	}
	return d
}

// failure is a failure's kind as the store keeps it (store.Facts.Reason:
// a status line, or what failed in the transport) as an error, for
// HeldError.Last.
type failure string

func (f failure) Error() string { return string(f) }
