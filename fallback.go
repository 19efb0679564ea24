package llmretry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/internal/coord"
	"github.com/llmretry/llmretry/internal/credential"
	"github.com/llmretry/llmretry/internal/wire"
)

// This file is a call's moves between its routes (Policy.Fallback and
// Policy.LongContext): when its next attempt goes to another route, and
// why; which route lets it go; and the request each route sends. A call
// on a policy without routes never comes here.

// Why a call moved to another route, as Attempt.Moved says it.
const (
	movedDown    = "provider down"      // a second down failure in a row, or a key coordination knows is down
	movedNoWait  = "waiting cannot win" // a wait beyond the call's means, retries spent, a provider that says waiting will not help, an attempt timeout
	movedAfter   = "FallbackAfter"      // a retryable failure once FallbackAfter has passed on the primary
	movedContext = "context too long"   // the provider refused the request as longer than its model's window
	movedKey     = "credential refused" // the provider refused the primary's credential
	// Not a route: the route refused a continuation's prefill, which is
	// regenerated and matched instead (see resumer.continuation).
	movedPrefill = "prefill refused, regenerating"
)

// routing is a call's state across its routes, embedded in the call. Its
// zero value is a call on its primary.
type routing struct {
	route    int                // the route of the latest attempt: 0 the primary, k Fallback[k-1], len(Fallback)+k LongContext[k-1]
	next     int                // the route the next attempt asks first
	taken    []int              // the routes the call's attempts took, each once, in order
	keepers  coord.Gatekeepers  // the Transport's, to join a route's key
	gks      []coord.Gatekeeper // each route's gatekeeper, once joined; nil until the call asks another route
	own      []bool             // routes whose request, once made, carried a credential of their own
	spare    *http.Request      // another route's request made to join its key, not sent yet
	spareFor int                // spare's route
	moved    string             // why the latest attempt's result moved the call, for its record; "" if it did not
	stayed   bool               // the latest attempt's down failure, the first its key heard, keeps the call on its primary (see goAround)
	learnt
}

// learnt is what a call learnt of its routes that outlives its attempts:
// a committed stream's continuations keep it (see commit).
type learnt struct {
	behind   []bool // routes the call no longer takes: its Route failed or does not apply, or a move left it behind
	long     bool   // the call moved to its LongContext routes: only they are left
	downs    int    // the primary's down failures in a row (the first is a blip: see goAround)
	routeErr error  // the first error a Route returned, for the record
}

// routes returns the number of the call's routes, its primary included.
func (c *call) routes() int { return 1 + len(c.p.Fallback) + len(c.p.LongContext) }

// routeOf returns route r's Route (r above 0).
func (c *call) routeOf(r int) Route {
	if r <= len(c.p.Fallback) {
		return c.p.Fallback[r-1]
	}
	return c.p.LongContext[r-1-len(c.p.Fallback)]
}

// usable reports whether the call may still take route r: not left
// behind, and among its current routes (its LongContext routes once it
// moved to them, the others before).
func (c *call) usable(r int) bool {
	return !c.isOut(r) && c.long == (r > len(c.p.Fallback))
}

// home returns the first route the call may still take: where it starts
// again after the last route failed as if down.
func (c *call) home() int {
	for r := range c.routes() {
		if c.usable(r) {
			return r
		}
	}
	return c.route
}

// took records that an attempt took route r.
func (c *call) took(r int) {
	c.route = r
	if c.routed() && !slices.Contains(c.taken, r) {
		c.taken = append(c.taken, r)
	}
}

// around runs a call whose primary its gatekeeper refused before the
// first attempt: the call starts on the first route that lets it go.
func (c *call) around() (*http.Response, error) {
	defer c.leaveRoutes()
	c.next = 1
	runRounds(c.f.Context, c.p.OnExhausted, c)
	return c.result()
}

// leaveRoutes leaves the keys of the other routes the call joined (the
// Transport leaves its primary's).
func (c *call) leaveRoutes() {
	for r := 1; r < len(c.gks); r++ {
		if c.gks[r] != nil {
			c.gks[r].Leave()
		}
	}
	if c.spare != nil {
		closeBody(c.spare)
		c.spare = nil
	}
}

// moveOn decides, once the latest attempt is judged (j, whose why is the
// plan's verdict; first is what judge said before planning; v what the
// gatekeeper made of it) and planned, which route the next attempt asks
// first, and reports whether the call goes around to another route at once
// (j.why is then stopNone, and c.moved says why). A call on its primary
// alone never moves.
func (c *call) moveOn(first stop, j *judgement, v coord.Verdict, routeFault bool, now time.Time) bool {
	c.moved, c.stayed = "", false
	if !c.routed() {
		return false
	}
	c.next = c.route
	if to, why, ok := c.cure(j); ok {
		c.next, j.why, c.moved = to, stopNone, why
		return true
	}
	passed := j.says
	if routeFault {
		passed = coord.HealthDown // passed over like a route that is down (its key hears nothing)
	}
	if to, why, ok := c.goAround(first, j, v, passed, now); ok {
		c.next, j.why, c.moved = to, stopNone, why
		return true
	}
	if j.why == stopNone && passed == coord.HealthDown && c.route != c.home() {
		// The last route that could take it is down too: wait as on the
		// first, and try again from it.
		c.next = c.home()
	}
	return false
}

// cure returns the route that may take a request the latest attempt's
// provider refused for a reason another route cures (judge's refusal): a
// prompt too long for the model's window goes to the next LongContext
// route, a refused credential to the next route that sets its own. It
// leaves behind the routes the request may not go back to.
func (c *call) cure(j *judgement) (int, string, bool) {
	if c.f.Context.Err() != nil || c.lim.allows(time.Now()) != stopNone {
		return 0, "", false
	}
	switch j.refusal {
	case wire.ContextTooLong:
		if len(c.p.LongContext) == 0 {
			return 0, "", false
		}
		if !c.long {
			// Never to the primary or a Fallback route again: the
			// request is too long for them as it is.
			c.long = true
			c.leaveBehind(0, 1+len(c.p.Fallback))
		} else {
			c.leaveBehind(c.route, c.route+1)
		}
		if r, ok := c.nextApplying(c.route, func(int) bool { return true }); ok {
			return r, movedContext, true
		}
	case wire.KeyRefused:
		if c.long || c.route != 0 {
			return 0, "", false // only the primary's own credential is left behind
		}
		if r, ok := c.nextApplying(0, c.ownsCredential); ok {
			c.leaveBehind(0, 1)
			return r, movedKey, true
		}
	}
	return 0, "", false
}

// leaveBehind marks routes from (inclusive) to to (exclusive) as no longer
// taken by the call, without a record.
func (c *call) leaveBehind(from, to int) {
	if c.behind == nil {
		c.behind = make([]bool, c.routes())
	}
	for r := from; r < to; r++ {
		c.behind[r] = true
	}
}

// nextApplying returns the first route after r that the call may take,
// applies to the request (its Route makes one; made now, it is kept for
// the attempt) and meets ok.
func (c *call) nextApplying(r int, ok func(int) bool) (int, bool) {
	for n := r + 1; n < c.routes(); n++ {
		if !c.usable(n) {
			continue
		}
		if _, fault, err := c.keeper(n); err != nil || fault {
			continue // its Route failed or does not apply: left behind
		}
		if ok(n) {
			return n, true
		}
	}
	return 0, false
}

// ownsCredential reports whether route r's request carries a credential
// of its own (its Route set one: the primary's were removed).
func (c *call) ownsCredential(r int) bool { return r < len(c.own) && c.own[r] }

// goAround decides, after an attempt on route c.route that the schedule
// would retry there (j.why stopNone) or not (j.why says why), whether the
// next attempt moves to a later route at once, which, and why. first is
// what judge said of the attempt's result, says its health, v the
// gatekeeper's verdict on it.
//
// A call moves when waiting on its route cannot win: a server that says
// waiting will not help, a wait the call cannot afford, its retries spent,
// an attempt or first-event timeout, a key coordination already knew was
// down; or at a failure that says its provider is down, except the first
// in a row on the primary (a blip: retried there after its wait); or, once
// FallbackAfter has passed on the primary, at any retryable failure. Before
// FallbackAfter has passed, the primary keeps the call while it could be
// retried there. It never moves for a result that is not retryable on its
// own account (the request's fault, a 4xx that says the request is wrong,
// a stream the policy does not retry), nor past the call's limits. A move
// the schedule would not have made (j.why is a stop) goes only to a route
// the call has not taken yet; a route that does not apply to the request
// is no move.
func (c *call) goAround(first stop, j *judgement, v coord.Verdict, says coord.Health, now time.Time) (int, string, bool) {
	switch {
	case c.f.Context.Err() != nil:
		return 0, "", false
	case first == stopProvider && j.status != http.StatusTooManyRequests && j.status < 500:
		return 0, "", false
	case first != stopNone && first != stopProvider:
		return 0, "", false
	}
	down := says == coord.HealthDown
	switch {
	case c.route != 0:
	case down:
		c.downs++
	default:
		c.downs = 0 // the provider answered: the next down failure is a blip again
	}
	cannot := first == stopProvider || j.why != stopNone || v.Down || timedOut(c.err)
	why := movedNoWait
	switch onPrimary := c.route == 0 && !c.long; {
	case onPrimary && c.p.FallbackAfter > 0:
		if now.Sub(c.f.start) < c.p.FallbackAfter && !cannot {
			c.stayed = down
			return 0, "", false
		}
		if !cannot {
			why = movedAfter
		}
	case !cannot && !down:
		return 0, "", false // a 429 the schedule can wait out
	case !cannot && onPrimary && c.downs < 2:
		c.stayed = down
		return 0, "", false // a blip stays home
	case !cannot:
		why = movedDown
	}
	if v.Down {
		why = movedDown
	}
	if !down && !cannot && why != movedAfter {
		return 0, "", false // once FallbackAfter has passed, any retryable failure moves
	}
	if c.lim.allows(now) != stopNone {
		return 0, "", false
	}
	r, ok := c.nextApplying(c.route, func(r int) bool {
		return j.why == stopNone || !slices.Contains(c.taken, r)
	})
	return r, why, ok
}

// timedOut reports whether err is an attempt abandoned for a bound of the
// policy (AttemptTimeout, FirstEventTimeout): the provider took the call
// and went silent, which waiting on it does not cure.
func timedOut(err error) bool {
	var b *boundError
	return errors.As(err, &b)
}

// routeFault reports whether the latest attempt, on a fallback, failed as
// the request's own fault before any provider answered (classify's
// verdict, why and says): the request its Route made (a ContentLength
// that does not match its new body, say), not the caller's, which its
// primary sent. The route is then passed over for the rest of the call,
// as if its Route had failed, and the call goes on elsewhere.
func (c *call) routeFault(why stop, says coord.Health) bool {
	if c.route == 0 || c.err == nil || why != stopFinal || says != coord.HealthNone || c.fault || c.f.Context.Err() != nil {
		return false
	}
	c.breakRoute(c.route, fmt.Errorf("its request failed before any answer: %w", c.err))
	return true
}

// breakRoute passes route r over for the rest of the call, and keeps err,
// the first such, for the call's record; a RouteTo route that does not
// apply to the request's URL is no failure worth a record.
func (c *call) breakRoute(r int, err error) {
	c.leaveBehind(r, r+1)
	var o *outside
	if c.routeErr == nil && !errors.As(err, &o) {
		c.routeErr = fmt.Errorf("llmretry: route %d: %w", r, err)
	}
}

// isOut reports whether the call no longer takes route r (see
// leaveBehind, breakRoute).
func (c *call) isOut(r int) bool { return r < len(c.behind) && c.behind[r] }

// candidates returns the routes the next attempt asks, in order: c.next,
// the routes after it, then those before it, of the routes the call may
// still take.
func (c *call) candidates() []int {
	rs := make([]int, 0, c.routes())
	for i := range c.routes() {
		if r := (c.next + i) % c.routes(); c.usable(r) {
			rs = append(rs, r)
		}
	}
	return rs
}

// admitRoute chooses the route of the next attempt, a, and has its
// gatekeeper let it go (see coord.Gatekeeper.Admit): the first candidate that
// lets it go at once, or, when every one is held, the first of them to
// let it go (AdmitAny). It returns the route, the request to send there
// (nil for the primary, which sends a copy of the first attempt), and
// whether the attempt goes as its key's probe. An error is the
// gatekeeper's refusal, the context's, or the request's own (its body:
// fault is true).
func (c *call) admitRoute(ctx context.Context, a coord.Admission) (route int, req *http.Request, probe, fault bool, err error) {
	if !c.routed() {
		probe, err = c.gk.Admit(ctx, a)
		return 0, nil, probe, false, err
	}
	rs := c.candidates()
	if len(rs) == 0 {
		// Every route the call may take failed to make its request.
		return 0, nil, false, false, errNoRoute
	}
	a.Elsewhere = len(rs) > 1
	held := make([]int, 0, len(rs))
	for _, r := range rs {
		gk, fault, err := c.keeper(r)
		switch {
		case fault:
			return 0, nil, false, true, err
		case err != nil:
			continue // its Route failed: passed over
		}
		probe, err = gk.Admit(ctx, a)
		switch {
		case err == nil:
			return c.admitted(r, probe)
		case !a.Elsewhere || !isDown(err):
			return 0, nil, false, false, err
		}
		held = append(held, r)
	}
	// Every route left is held: wait on whichever lets the attempt go
	// first.
	if len(held) == 0 {
		return 0, nil, false, false, errNoRoute
	}
	a.Elsewhere = false
	if len(held) == 1 {
		probe, err = c.gks[held[0]].Admit(ctx, a)
		if err != nil {
			return 0, nil, false, false, err
		}
		return c.admitted(held[0], probe)
	}
	others := make([]coord.Gatekeeper, 0, len(held)-1)
	for _, r := range held[1:] {
		others = append(others, c.gks[r])
	}
	which, probe, err := c.gks[held[0]].AdmitAny(ctx, a, others)
	if err != nil {
		return 0, nil, false, false, err
	}
	return c.admitted(held[which], probe)
}

// admitted returns route r's request for an attempt its gatekeeper let go:
// the one made to join its key, or a new one.
func (c *call) admitted(r int, probe bool) (int, *http.Request, bool, bool, error) {
	c.gk = c.gks[r]
	if r == 0 {
		return 0, nil, probe, false, nil
	}
	if c.spare != nil && c.spareFor == r {
		req := c.spare
		c.spare = nil
		return r, req, probe, false, nil
	}
	req, fault, err := c.build(r)
	if err != nil {
		// Let go, but nothing to send: what it holds is ended by sent.
		c.gk.Sent()
		return 0, nil, probe, fault, err
	}
	return r, req, probe, false, nil
}

// keeper returns route r's gatekeeper, joining its key the first time
// with the request the route sends (kept as the spare, for the attempt
// that follows). An error is the request's own (fault) or the Route's
// (the route is then broken).
func (c *call) keeper(r int) (coord.Gatekeeper, bool, error) {
	if c.gks == nil {
		c.gks = make([]coord.Gatekeeper, c.routes())
		c.gks[0] = c.gk
	}
	if c.gks[r] != nil {
		return c.gks[r], false, nil
	}
	req, fault, err := c.build(r)
	if err != nil {
		return nil, fault, err
	}
	if c.spare != nil {
		closeBody(c.spare)
	}
	c.spare, c.spareFor = req, r
	if credential.Carried(req) {
		if c.own == nil {
			c.own = make([]bool, c.routes())
		}
		c.own[r] = true
	}
	c.gks[r] = open{}
	if c.keepers != nil {
		c.gks[r] = c.keepers.Join(req, (*callPolicy)(c.p), r)
	}
	return c.gks[r], false, nil
}

// build makes route r's request for the next attempt, with the first
// attempt's context (the attempt's own replaces it): the Route's, given a
// deep copy of the first attempt with a fresh body and without the
// primary's credentials. A body that fails is the request's own fault
// (fault true); a Route that fails breaks route r for the rest of the
// call.
func (c *call) build(r int) (*http.Request, bool, error) {
	body, err := c.rewind()
	if err != nil {
		return nil, true, err
	}
	req, err := routed(c.f, c.routeOf(r), c.first, body)
	if err != nil {
		if body != nil {
			body.Close()
		}
		c.breakRoute(r, err)
		return nil, false, err
	}
	return req, false, nil
}

// errNoRoute is why a call whose every route failed to make its request
// sends nothing more.
var errNoRoute = errors.New("llmretry: no route left that makes its request")

// isDown reports whether err is a gatekeeper's refusal (a
// *coordination.HeldError).
func isDown(err error) bool {
	var d *coordination.HeldError
	return errors.As(err, &d)
}
