package coord

import (
	"context"
	"net/http"
	"time"
)

// This file declares types only (their behaviour is the engine's and the
// root's, tested there), so it has no test file of its own.
//
// This file is the seam between llmretry's core (the root package's call)
// and coordination: the one set of types both sides use, defined here
// once. The core calls a call's Gatekeeper at its few points and knows
// nothing else of coordination: no key, lease, waiter or store. A
// Transport made by llmretry.NewCoordinated gives each call the
// Coordinator's *Call; one made by llmretry.New gives its calls a no-op
// gatekeeper of the root's own.

// Gatekeeper is one call's part in coordination, as the core sees it. The
// core calls it on the call's goroutine, in this order: Admit before each
// attempt; Begin as the attempt is sent and End as its response or
// failure is in; Sent once a retry's attempt is over (its stream's
// opening read included, or its body failed to rewind); Report once each
// attempt's result is classified; and Leave when the call returns
// (deferred, so that it runs even if a callback or the base panics).
//
// A Gatekeeper belongs to one call: it is not safe for concurrent use.
type Gatekeeper interface {
	// Admit waits until attempt a may go, and reports whether it goes as
	// its provider key's probe. An error means that it may not go, and
	// says why: the caller's context ended (the context's error), or the
	// call cannot wait as long as the hold may last (a
	// *coordination.HeldError).
	//
	// With a.Elsewhere set (the call has another route to take), a key
	// that is down refuses at once (a *coordination.HeldError) unless the
	// attempt may go as its probe now, and so does any hold that would
	// outlast the call's limits: the call goes around instead of waiting.
	Admit(ctx context.Context, a Admission) (probe bool, err error)
	// AdmitAny is Admit (without Elsewhere) on this Gatekeeper's key and
	// on others' at once, for a call whose every route is held: others
	// are the Gatekeepers of the call's other routes, joined by the same
	// call. It waits until the attempt may go on one of the keys, the
	// first to let it, and says which: 0 this one, i others[i-1].
	AdmitAny(ctx context.Context, a Admission, others []Gatekeeper) (which int, probe bool, err error)
	// Begin counts the attempt admitted last as sent.
	Begin()
	// End counts it as over: its response, resp, is in, or it failed
	// (resp nil). A stream's response may stay counted until its body is
	// done.
	End(ctx context.Context, resp *http.Response)
	// Sent ends what a retry held while its attempt was made.
	Sent()
	// Report tells what the latest attempt's result says, and returns
	// what that means for the call's next attempt.
	Report(ctx context.Context, o Outcome) Verdict
	// Leave ends the call's part: whatever it still holds is released.
	Leave()
}

// Gatekeepers gives each call of a coordinated Transport its Gatekeeper,
// as the call starts: the *Coordinator of one made by
// llmretry.NewCoordinated.
//
// A call joins once per route it takes (see llmretry's Policy.Fallback):
// route 0 with the caller's request as the call starts, route k with the
// request Fallback[k-1] made, when the call first takes it. Each route is
// a key of its own (its host and credential, and the route itself), and
// the call leaves every key it joined. A Gatekeepers is safe for
// concurrent use.
type Gatekeepers interface {
	Join(req *http.Request, p Policy, route int) Gatekeeper
}

// PrefillMemory remembers which provider keys' models refused a prefill
// (a continuation of a cut stream by the delivered text as a last
// assistant turn: llmretry's Policy.ContinueStreams), so that none is
// sent one again: the *Coordinator of a coordinated Transport (through
// its store, for every process that shares it), a Refusals for the
// others. The core asks it only to continue a cut stream, with the
// request the route sends (its provider key: host and credential, never
// kept) and the model it names. A PrefillMemory is safe for concurrent
// use; it never fails a call.
type PrefillMemory interface {
	// RefusesPrefill reports whether req's provider key refused a
	// prefill for model, remembered at now.
	RefusesPrefill(ctx context.Context, req *http.Request, model string, now time.Time) bool
	// RefusedPrefill remembers that req's provider key refused a prefill
	// for model at now.
	RefusedPrefill(ctx context.Context, req *http.Request, model string, now time.Time)
}

var (
	_ Gatekeepers = (*Coordinator)(nil)
	_ Gatekeeper  = (*Call)(nil)
)

// Core is what the engine needs of llmretry's core beyond the user's
// coordination.Config: plain values and functions, so that it imports
// nothing of the root. The root's NewCoordinated sets every field.
type Core struct {
	// MaxRetryAfter is the longest server wait the fleet's facts may
	// hold calls for even if no call of this process honours one that
	// long: llmretry's default Policy.MaxRetryAfter.
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
}

// Admission is the attempt a Gatekeeper is asked to let go.
type Admission struct {
	N int // its number: 1 for the first attempt, counting across rounds
	// A retry's (N above 1) only: a first attempt's Gatekeeper reads them
	// itself (Policy.FirstBounds), and only when it holds the attempt, so
	// that a first attempt pays nothing for them.
	Left      int       // the attempts the call may still send, this one included
	Latest    time.Time // the last instant it may go; zero: none
	NotBefore time.Time // it goes no sooner: the end of the server's wait for this call; zero: none
	// Elsewhere: the call has another route to take, so a hold it would
	// wait out refuses it instead (see Gatekeeper.Admit).
	Elsewhere bool
}

// Health is what an attempt's result says of its provider.
type Health int8

const (
	HealthNone Health = iota // nothing: the request's own fault, or its caller's context ended
	HealthUp                 // the provider answered (a 2xx, a 4xx, a 429)
	HealthDown               // it failed as if down: a down status (502, 503, 529 …) or a failed connection
)

// Pause is a wait before a retry as one side states it: the schedule's,
// or the server's (Retry-After and its kin). D is the wait if Set; the
// zero Pause states none.
type Pause struct {
	D   time.Duration
	Set bool
}

// Outcome is what an attempt's result says, for Gatekeeper.Report.
type Outcome struct {
	Health Health
	Resp   *http.Response // the attempt's response; nil if it failed
	Err    error          // its error; nil if a response came
	Status int            // the status it stands for: Resp's, or that of the error a 2xx stream opened with; 0 without a response
	Event  string         // the error a 2xx stream opened with, described; "" if none
	Server Pause          // the wait the server asked for
	Reset  bool           // Server is a spent limit's reset (when it is full again), not a wait the server stated
	Own    Pause          // the call's own wait before its retry; unset when none follows
	Body   []byte         // what was read of Resp's body to find the server's signals; nil if nothing
}

// Verdict is what a Gatekeeper makes of an attempt's result for the
// call's next attempt.
type Verdict struct {
	// Held: the next attempt waits at the gate, not for the schedule's
	// wait (the server's still counts).
	Held bool
	// Paced: the gate sends it at its turn under a rate limit's pace,
	// sooner than the limit's reset, which is then not the call's own
	// wait.
	Paced bool
	// Mispaced: the attempt was sent at the turn its key's pace gave it,
	// and refused (429): the pace was wrong, not the call, which the core
	// charges one retry at most for such refusals.
	Mispaced bool
	// Down: the key was down before this attempt's failure told it so:
	// other attempts' evidence, which a call that can go elsewhere does
	// not wait out.
	Down bool
}
