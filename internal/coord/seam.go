package coord

import (
	"context"
	"net/http"
	"time"

	"github.com/llmretry/llmretry/store"
)

// This file is what the root gives the engine and what it gets back: the
// engine's side of the seam in the root's gatekeeper.go. The root's
// adapter converts its own values (admission, outcome, verdict) to and
// from these, field by field. This file declares types only, so it has no test
// file of its own: the root's coordinate_test.go checks the conversions
// (TestCoordinatedSeamNumbersAgree, TestCoordinatedRefusalIsADownError,
// TestCoordinatedCallPolicy).

// Config is a resolved llmretry.Coordination, and what the engine needs of
// the core: plain values and functions, so that it imports nothing of the
// root. Every field must be set (the root's NewCoordinated does).
type Config struct {
	ProbeInterval time.Duration
	ReleaseSpread time.Duration
	RetryBudget   float64
	MinRetries    int
	Store         store.Store // nil: an in-process store of the Coordinator's own

	// MaxRetryAfter is the longest server wait the fleet's facts may
	// hold calls for even if no call of this process honours one that
	// long: llmretry.DefaultMaxRetryAfter.
	MaxRetryAfter time.Duration
	// IsStream reports whether a response is a stream of events, whose
	// send lease stays held until its body is done.
	IsStream func(*http.Response) bool
}

// Policy is what the engine asks of one call's llmretry.Policy. The root
// implements it on its Policy without allocating.
type Policy interface {
	// MaxServerWait is the longest server wait the call honours
	// (Policy.MaxRetryAfter).
	MaxServerWait() time.Duration
	// FirstBounds returns, for a call's first attempt, the attempts the
	// call may send (that one included) and the last instant it may go
	// (zero: none). It is asked only when the first attempt is held, so
	// that a first attempt to a quiet key pays nothing for it.
	FirstBounds(ctx context.Context, req *http.Request) (left int, latest time.Time)
	// Held records a hold as it begins and as it ends (Policy.OnHold).
	Held(Hold)
}

// Admission is the attempt a Call is asked to let go (the root's
// admission).
type Admission struct {
	N         int       // its number: 1 for the first attempt, counting across rounds
	Left      int       // a retry's only: the attempts the call may still send, this one included
	Latest    time.Time // a retry's only: the last instant it may go; zero: none
	NotBefore time.Time // a retry's only: the end of the server's wait for this call; zero: none
	// Elsewhere: the call has another route to take. A key that is down
	// refuses at once (a *Refused) unless the attempt may go as its probe
	// now, as does any hold that would outlast the call's limits.
	Elsewhere bool
}

// Health is what an attempt's result says of its provider (the root's
// health, by number).
type Health int8

// The healths, as the root numbers them.
const (
	HealthNone Health = iota // the request's own fault, or its caller's context ended
	HealthUp                 // the provider answered
	HealthDown               // it failed as if down
)

// Pause is a wait as one side states it (the root's pause): D, if Set.
type Pause struct {
	D   time.Duration
	Set bool
}

// Outcome is what an attempt's result says, for Call.Report (the root's
// outcome).
type Outcome struct {
	Health Health
	Resp   *http.Response // nil if it failed
	Err    error          // nil if a response came
	Status int            // resp's, or that of the error a 2xx stream opened with; 0 without a response
	Event  string         // the error a 2xx stream opened with, described; "" if none
	Server Pause          // the wait the server asked for
	Own    Pause          // the call's own wait before its retry; unset when none follows
	Body   []byte         // what was read of resp's body to find the server's signals
}

// Verdict is what a Call makes of an attempt's result for the call's next
// attempt (the root's verdict).
type Verdict struct {
	Held  bool // it waits at the gate, not for the schedule's wait
	Paced bool // the gate sends it at its turn under a rate limit's pace
}
