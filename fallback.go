package llmretry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// This file is a call's moves between its routes (Policy.Fallback): when
// its next attempt goes to another route, which route lets it go, and the
// request each route sends. A call on a policy without Fallback never
// comes here.

// routing is a call's state across its routes, embedded in the call. Its
// zero value is a call on its primary.
type routing struct {
	route    int           // the route of the latest attempt: 0 the primary, k Fallback[k-1]
	next     int           // the route the next attempt asks first
	taken    []int         // the routes the call's attempts took, each once, in order
	keepers  gatekeepers   // the Transport's, to join a route's key
	gks      []gatekeeper  // each route's gatekeeper, once joined; nil until the call asks a fallback
	broken   []bool        // the routes whose Route failed, passed over for the rest of the call
	routeErr error         // the first error a Route returned, for the record
	spare    *http.Request // a fallback's request made to join its key, not sent yet
	spareFor int           // spare's route
}

// routes returns the number of the call's routes, its primary included.
func (c *call) routes() int { return 1 + len(c.p.Fallback) }

// took records that an attempt took route r.
func (c *call) took(r int) {
	c.route = r
	if len(c.p.Fallback) > 0 && !slices.Contains(c.taken, r) {
		c.taken = append(c.taken, r)
	}
}

// around runs a call whose primary its gatekeeper refused before the
// first attempt: the call starts on the first route that lets it go.
func (c *call) around() (*http.Response, error) {
	defer c.leaveRoutes()
	c.next = 1
	c.p.runRounds(c.f.Context, c)
	return c.result()
}

// leaveRoutes leaves the keys of the fallbacks the call joined (the
// Transport leaves its primary's).
func (c *call) leaveRoutes() {
	for r := 1; r < len(c.gks); r++ {
		if c.gks[r] != nil {
			c.gks[r].leave()
		}
	}
	if c.spare != nil {
		closeBody(c.spare)
		c.spare = nil
	}
}

// goAround decides, after an attempt on route c.route that the schedule
// would retry there (planned stopNone) or not (planned says why), whether
// the next attempt moves to a later route at once, and which. first is
// what classify said of the attempt's result, says its health, status
// the status it stands for (0 for an error).
//
// A call moves when the result says its provider is down, or is
// rate-limited beyond the call's means (a server that says waiting will
// not help, a wait the call cannot afford, its retries spent), or, once
// FallbackAfter has passed on the primary, at any retryable failure; but
// before FallbackAfter has passed, the primary keeps the call while it
// could be retried there. It never moves for a result that is not
// retryable on its own account (the request's fault, a 4xx that says
// the request is wrong, a stream the policy does not retry), nor past the
// call's limits. A move the schedule would not have made (planned is a
// stop) goes only to a route the call has not taken yet.
func (c *call) goAround(first, planned stop, says health, status int, now time.Time) (int, bool) {
	switch {
	case len(c.p.Fallback) == 0 || c.f.Context.Err() != nil:
		return 0, false
	case first == stopProvider && status != http.StatusTooManyRequests && status < 500:
		return 0, false
	case first != stopNone && first != stopProvider:
		return 0, false
	}
	down := says == healthDown
	cannot := first == stopProvider || planned != stopNone
	onPrimary := c.route == 0 && c.p.FallbackAfter > 0
	if onPrimary && now.Sub(c.f.start) < c.p.FallbackAfter && !cannot {
		return 0, false
	}
	if !down && !cannot && !(onPrimary && status == http.StatusTooManyRequests) {
		return 0, false
	}
	if c.lim.allows(now) != stopNone {
		return 0, false
	}
	for r := c.route + 1; r < c.routes(); r++ {
		if c.isBroken(r) || planned != stopNone && slices.Contains(c.taken, r) {
			continue
		}
		return r, true
	}
	return 0, false
}

// routeFault reports whether the latest attempt, on a fallback, failed as
// the request's own fault before any provider answered (classify's
// verdict, why and says): the request its Route made (a ContentLength
// that does not match its new body, say), not the caller's, which its
// primary sent. The route is then passed over for the rest of the call,
// as if its Route had failed, and the call goes on elsewhere.
func (c *call) routeFault(why stop, says health) bool {
	if c.route == 0 || c.err == nil || why != stopFinal || says != healthNone || c.fault || c.f.Context.Err() != nil {
		return false
	}
	c.breakRoute(c.route, fmt.Errorf("its request failed before any answer: %w", c.err))
	return true
}

// breakRoute passes route r over for the rest of the call, and keeps err,
// the first such, for the call's record; a RouteTo route that does not
// apply to the request's URL is no failure worth a record.
func (c *call) breakRoute(r int, err error) {
	if c.broken == nil {
		c.broken = make([]bool, c.routes())
	}
	c.broken[r] = true
	var o *outside
	if c.routeErr == nil && !errors.As(err, &o) {
		c.routeErr = fmt.Errorf("llmretry: route %d: %w", r, err)
	}
}

// isBroken reports whether route r's Route failed earlier in the call.
func (c *call) isBroken(r int) bool { return r < len(c.broken) && c.broken[r] }

// candidates returns the routes the next attempt asks, in order: c.next,
// the routes after it, then those before it, without the broken ones.
func (c *call) candidates() []int {
	rs := make([]int, 0, c.routes())
	for i := range c.routes() {
		if r := (c.next + i) % c.routes(); !c.isBroken(r) {
			rs = append(rs, r)
		}
	}
	return rs
}

// admitRoute chooses the route of the next attempt, a, and has its
// gatekeeper let it go (see gatekeeper.admit): the first candidate that
// lets it go at once, or, when every one is held, the first of them to
// let it go (await). It returns the route, the request to send there
// (nil for the primary, which sends a copy of the first attempt), and
// whether the attempt goes as its key's probe. An error is the
// gatekeeper's refusal, the context's, or the request's own (its body:
// fault is true).
func (c *call) admitRoute(ctx context.Context, a admission) (route int, req *http.Request, probe, fault bool, err error) {
	if len(c.p.Fallback) == 0 {
		probe, err = c.gk.admit(ctx, a)
		return 0, nil, probe, false, err
	}
	rs := c.candidates()
	a.elsewhere = len(rs) > 1
	held := make([]int, 0, len(rs))
	for _, r := range rs {
		gk, fault, err := c.keeper(r)
		switch {
		case fault:
			return 0, nil, false, true, err
		case err != nil:
			continue // its Route failed: passed over
		}
		probe, err = gk.admit(ctx, a)
		switch {
		case err == nil:
			return c.admitted(r, probe)
		case !a.elsewhere || !isDown(err):
			return 0, nil, false, false, err
		}
		held = append(held, r)
	}
	// Every route left is held (the primary, which has no Route to fail,
	// among them): wait on whichever lets the attempt go first.
	a.elsewhere = false
	if len(held) == 1 {
		probe, err = c.gks[held[0]].admit(ctx, a)
		if err != nil {
			return 0, nil, false, false, err
		}
		return c.admitted(held[0], probe)
	}
	others := make([]gatekeeper, 0, len(held)-1)
	for _, r := range held[1:] {
		others = append(others, c.gks[r])
	}
	which, probe, err := c.gks[held[0]].await(ctx, a, others)
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
		c.gk.sent()
		return 0, nil, probe, fault, err
	}
	return r, req, probe, false, nil
}

// keeper returns route r's gatekeeper, joining its key the first time
// with the request the route sends (kept as the spare, for the attempt
// that follows). An error is the request's own (fault) or the Route's
// (the route is then broken).
func (c *call) keeper(r int) (gatekeeper, bool, error) {
	if c.gks == nil {
		c.gks = make([]gatekeeper, c.routes())
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
	c.gks[r] = c.keepers.join(req, c.p, r)
	return c.gks[r], false, nil
}

// build makes fallback r's request for the next attempt, with the first
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
	req, err := routed(c.f, c.p.Fallback[r-1], c.first, body)
	if err != nil {
		if body != nil {
			body.Close()
		}
		c.breakRoute(r, err)
		return nil, false, err
	}
	return req, false, nil
}

// isDown reports whether err is a gatekeeper's refusal (a *DownError).
func isDown(err error) bool {
	var d *DownError
	return errors.As(err, &d)
}
