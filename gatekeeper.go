package llmretry

import (
	"context"
	"net/http"
	"time"
)

// This file is the seam between the core (transport.go, retry.go and the
// decisions they make) and coordination (the engine in internal/coord,
// which coordinate.go adapts to this seam; see Coordination). The core calls a call's
// gatekeeper at its few points and knows nothing else of coordination: no
// key, lease, waiter or store. Everything that crosses the seam is a plain
// value the core owns.

// gatekeeper is one call's part in coordination, as the core sees it. The
// core calls it on the call's goroutine, in this order: admit before each
// attempt; begin as the attempt is sent and end as its response or failure
// is in; sent once a retry's attempt is over (its stream's opening read
// included, or its body failed to rewind); report once each attempt's
// result is classified; and leave when the call returns (deferred, so
// that it runs even if a callback panics).
//
// A Transport made by New gives every call noGatekeeper, which lets every
// attempt go at once and hears nothing; one made by NewCoordinated gives
// each call its coordCall (coordinate.go), over the engine's coord.Call.
type gatekeeper interface {
	// admit waits until attempt a may go, and reports whether it goes as
	// its provider key's probe. An error means that it may not go, and
	// says why: the caller's context ended (the context's error), or the
	// call cannot wait as long as the hold may last (a *DownError).
	//
	// With a.elsewhere set (the call has another route to take), a key
	// that is down refuses at once (a *DownError) unless the attempt may
	// go as its probe now, and so does any hold that would outlast the
	// call's limits: the call goes around instead of waiting.
	admit(ctx context.Context, a admission) (probe bool, err error)
	// await is admit (without elsewhere) on this gatekeeper's key and on
	// others' at once, for a call whose every route is held: others are
	// the gatekeepers of the call's other routes, joined by the same
	// call. It waits until the attempt may go on one of the keys, the
	// first to let it, and says which: 0 this one, i others[i-1].
	await(ctx context.Context, a admission, others []gatekeeper) (which int, probe bool, err error)
	// begin counts the attempt admitted last as sent.
	begin()
	// end counts it as over: its response, resp, is in, or it failed (resp
	// nil). A stream's response may stay counted until its body is done.
	end(ctx context.Context, resp *http.Response)
	// sent ends what a retry held while its attempt was made.
	sent()
	// report tells what the latest attempt's result says, and returns
	// what that means for the call's next attempt.
	report(ctx context.Context, o outcome) verdict
	// leave ends the call's part: whatever it still holds is released.
	leave()
}

// gatekeepers gives each call of a Transport its gatekeeper, as the call
// starts: noGatekeeper for a Transport made by New, coordinated (the
// engine's coord.Coordinator) for one made by NewCoordinated.
//
// A call joins once per route it takes (see Policy.Fallback): route 0 with
// the caller's request as the call starts, route k with the request
// Fallback[k-1] made, when the call first takes it. Each route is a key of
// its own (its host and credential, and the route itself), and the call
// leaves every key it joined.
type gatekeepers interface {
	join(req *http.Request, p *Policy, route int) gatekeeper
}

// admission is the attempt a gatekeeper is asked to let go.
type admission struct {
	n int // its number: 1 for the first attempt, counting across rounds
	// A retry's (n above 1) only: a first attempt's gatekeeper reads them
	// itself, and only when it holds the attempt, so that a first attempt
	// pays nothing for them.
	left      int       // the attempts the call may still send, this one included
	latest    time.Time // the last instant it may go; zero: none
	notBefore time.Time // it goes no sooner: the end of the server's wait for this call; zero: none
	// elsewhere: the call has another route to take, so a hold it would
	// wait out refuses it instead (see gatekeeper.admit).
	elsewhere bool
}

// health is what an attempt's result says of its provider.
type health int8

const (
	healthNone health = iota // nothing: the request's own fault, or its caller's context ended
	healthUp                 // the provider answered (a 2xx, a 4xx, a 429)
	healthDown               // it failed as if down: a down status (502, 503, 529 …) or a failed connection
)

// outcome is what an attempt's result says, for its gatekeeper's report.
type outcome struct {
	health health
	resp   *http.Response // the attempt's response; nil if it failed
	err    error          // its error; nil if a response came
	status int            // the status it stands for: resp's, or that of the error a 2xx stream opened with; 0 without a response
	event  string         // the error a 2xx stream opened with, described; "" if none
	server pause          // the wait the server asked for
	own    pause          // the call's own wait before its retry; unset when none follows
	body   []byte         // what was read of resp's body to find the server's signals; nil if nothing
}

// verdict is what a gatekeeper makes of an attempt's result for the call's
// next attempt.
type verdict struct {
	// held: the next attempt waits at the gate, not for the schedule's
	// wait (the server's still counts).
	held bool
	// paced: the gate sends it at its turn under a rate limit's pace,
	// sooner than the limit's reset, which is then not the call's own
	// wait.
	paced bool
}

// noGatekeeper is the gatekeeper of a call that is not coordinated: it
// lets every attempt go at once and hears nothing. It is zero-size, so that
// holding it in an interface allocates nothing.
type noGatekeeper struct{}

// join returns noGatekeeper: every call of a Transport made by New has it.
func (noGatekeeper) join(*http.Request, *Policy, int) gatekeeper { return noGatekeeper{} }

func (noGatekeeper) admit(context.Context, admission) (bool, error) { return false, nil }
func (noGatekeeper) await(context.Context, admission, []gatekeeper) (int, bool, error) {
	return 0, false, nil
}
func (noGatekeeper) begin()                                  {}
func (noGatekeeper) end(context.Context, *http.Response)     {}
func (noGatekeeper) sent()                                   {}
func (noGatekeeper) report(context.Context, outcome) verdict { return verdict{} }
func (noGatekeeper) leave()                                  {}

var (
	_ gatekeepers = noGatekeeper{}
	_ gatekeeper  = noGatekeeper{}
)
