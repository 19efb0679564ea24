package coord

import (
	"cmp"
	"context"
	"slices"
	"time"
)

// This file is what a call with routes (llmretry's Policy.Fallback) asks
// of coordination beyond a call's: each route is a key of its own (see
// keyID and nameOf); an admission with Elsewhere goes around a key that is
// down instead of waiting on it (see lane.look); and a call whose every
// route is held waits on all of their keys at once (AdmitAny).

// AdmitAny is Admit (without a.Elsewhere) on cc's key and on each of
// others' at once: others are the Gatekeepers of the same call on its
// other routes (Calls of the same Coordinator; any other holds nothing and
// is passed over). It returns once the attempt may go on one
// of them, which (0 cc, i others[i-1]), and whether it goes as that key's
// probe: the first to let it go when the call looks (a key back up, after
// the release spread; its probe turn; a server wait or a pace's turn
// over), in route order whatever the order they are given in, so that the
// primary is preferred. The call waits with a waiter on every key, woken
// on one channel, so that a change on any wakes it; it takes a lease (the
// probe, a retry's, a send's) on the key it goes on alone, and leaves the
// others' lists when it returns.
//
// Its limits and context hold as Admit's: its error is ctx's, or a
// *coordination.HeldError when it cannot wait on any key as long as its
// hold may last, or once its latest instant is past. The refusal names
// the key of the lowest route among them (the primary's, if it is one:
// the key the caller chose, whose hold the call waits out first), as does
// the one hold it records (see hold).
func (cc *Call) AdmitAny(ctx context.Context, a Admission, others []Gatekeeper) (int, bool, error) {
	a.Elsewhere = false
	var lanes []lane
	if len(others) > 0 {
		ch := make(chan struct{}, 1)
		lanes = make([]lane, 1, 1+len(others))
		lanes[0] = lane{cc: cc, ch: ch}
		for i, o := range others {
			if c, ok := o.(*Call); ok {
				lanes = append(lanes, lane{cc: c, ch: ch, given: i + 1})
			}
		}
	}
	if len(lanes) < 2 {
		probe, err := cc.Admit(ctx, a)
		return 0, probe, err
	}
	if a.N <= 1 {
		a.N, a.NotBefore = 1, time.Time{}
		a.Left, a.Latest = cc.p.FirstBounds(ctx, cc.req)
	}
	slices.SortStableFunc(lanes, func(x, y lane) int { return cmp.Compare(x.cc.k.id.route, y.cc.k.id.route) })
	for i := range lanes {
		l := &lanes[i]
		c := l.cc
		c.unrefuse(ctx)
		c.wasProbe = false
		if a.N > 1 {
			c.notBefore = a.NotBefore
			l.budget = c.co.budget(c.k.calls.load())
		}
		c.co.refresh(ctx, c.k)
		if c.k.quiet() && l.budget == 0 {
			return l.given, false, nil
		}
	}
	which, err := hold(ctx, a, lanes)
	return lanes[which].given, lanes[which].cc.wasProbe, err
}
