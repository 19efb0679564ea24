package coord

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/internal/clock"
	"github.com/llmretry/llmretry/store"
)

// This file is the gate: what a coordinated call goes through before each
// attempt, and what it tells its key after one. A call's part in its key's
// coordination is its Call; the key's list of held calls refers to
// their waiters. Callbacks (OnHold) run with no lock held, once the shared
// state is consistent; leases a call holds are released by leave even if
// one panics.

// Call is one call's part in its key's coordination: the leases it
// holds and what it needs to ask for more: the Gatekeeper of a
// coordinated call. It belongs to the goroutine of the call's RoundTrip:
// it is not safe for concurrent use. Its zero value is not usable:
// Coordinator.Join makes one.
type Call struct {
	co     *Coordinator
	k      *keyState
	stripe int           // of k's count of calls in flight
	req    *http.Request // the caller's, for Hold records
	p      Policy

	probe     string    // the probe lease the latest attempt went under, until reported
	probeSent time.Time // when it went
	retry     string    // the retry lease of a budgeted retry in flight
	send      string    // the send lease of an attempt under a limit on calls in flight
	sentAt    time.Time // when the latest attempt went
	sending   int       // its stripe of the key's count of attempts in flight without a lease
	countsAt  uint64    // the key's counts taken (keyState.counts) as its latest attempt began without a lease
	notBefore time.Time // the call's own server wait: its next attempt goes no sooner

	// Together, so that the Call stays in the allocation size class it had
	// when p was a pointer (192 bytes).
	wasProbe bool // the latest attempt went as the probe
	leased   bool // the latest attempt went under a send lease
	refused  bool // its lease (send) is kept until Report tells its 429
	counted  bool // the latest attempt is counted in flight (begun, not ended)
	told     bool // the latest attempt, sent without a lease, was held by a count told to the store (see Report)
	turn     bool // the latest attempt went at a turn its key's pace or lesson gave it
}

// Join makes the call's part in the coordination of req's key, for a call
// under policy p: its *Call, as the Gatekeeper the core calls. The call's
// goroutine calls its methods in the order Gatekeeper states, and Leave
// last.
//
// route is the route the call takes with req (0 its primary, k its
// policy's Fallback[k-1]): each route is a key of its own, even to the
// same host with the same credential.
func (co *Coordinator) Join(req *http.Request, p Policy, route int) Gatekeeper {
	return co.join(req, p, route)
}

// join is Join, as the *Call it makes.
func (co *Coordinator) join(req *http.Request, p Policy, route int) *Call {
	k, stripe := co.enter(req, route)
	if wait := p.MaxServerWait(); int64(wait) > co.maxWait.Load() {
		co.honours(wait)
	}
	reach := retryLease
	if d, ok := req.Context().Deadline(); ok {
		reach = time.Until(d)
	}
	if int64(reach) > co.horizon.Load() {
		co.reaches(reach)
	}
	return &Call{co: co, k: k, stripe: stripe, req: req, p: p}
}

// Leave ends the call's part: it releases what it still holds (a probe
// sent without a result, after a panic say) and leaves the key.
func (cc *Call) Leave() {
	if cc.counted {
		// Its base panicked: the attempt is over all the same.
		cc.counted = false
		if cc.send == "" {
			cc.k.unleasedIn.leave(cc.sending)
		}
	}
	if cc.probe != "" || cc.retry != "" || cc.send != "" {
		now := time.Now()
		for _, h := range [...]string{cc.probe, cc.retry, cc.send} {
			if h != "" {
				cc.co.let(cc.req.Context(), cc.k, h, now)
			}
		}
		cc.probe, cc.retry, cc.send, cc.refused = "", "", "", false
		cc.k.wakeBudget()
		cc.k.wakeRoom(1)
	}
	cc.k.calls.leave(cc.stripe)
}

// Admit holds attempt a until its key lets it through (see pass), and
// reports whether it goes as the key's probe. Its error is ctx's, or a
// *coordination.HeldError when the call cannot wait as long as the hold may last, or,
// with a.Elsewhere, when the key is down and the attempt may not go as its
// probe now (see Admission). A first attempt to a quiet key passes at
// once, with no store call.
func (cc *Call) Admit(ctx context.Context, a Admission) (bool, error) {
	if a.N > 1 {
		cc.notBefore = a.NotBefore
		err := cc.pass(ctx, a)
		return cc.wasProbe, err
	}
	if cc.k.quiet() && !cc.co.stale(cc.k) {
		return false, nil
	}
	if !cc.co.stale(cc.k) && cc.k.facts(time.Now()) == (store.Facts{}) {
		return false, nil // its facts lapsed: quiet again, with no store call
	}
	cc.co.refresh(ctx, cc.k)
	if cc.k.quiet() {
		return false, nil
	}
	left, latest := cc.p.FirstBounds(ctx, cc.req)
	err := cc.pass(ctx, Admission{N: 1, Left: left, Latest: latest, Elsewhere: a.Elsewhere})
	return cc.wasProbe, err
}

// Begin counts an attempt about to be sent on the key: among the key's
// attempts in flight without a send lease if it has none (the store counts
// the others by their leases).
func (cc *Call) Begin() {
	if cc.send == "" {
		// Read before it is counted: a count taken after this read, and
		// before it ends, may hold it (see End, Report).
		cc.countsAt = cc.k.counts.Load()
		cc.sending, _ = cc.k.unleasedIn.enter()
	}
	cc.sentAt, cc.counted = time.Now(), true
}

// End counts the attempt begun last as over (its result, resp or nil, is
// in), ends its send lease, if any, and lets a call waiting for room go. A
// stream sent under a send lease stays in flight until its body is done
// (read to its end, failed or closed): a provider counts its connection
// until its last byte.
func (cc *Call) End(ctx context.Context, resp *http.Response) {
	if cc.send != "" && resp != nil && cc.co.core.IsStream(resp) {
		resp.Body = &leasedBody{ReadCloser: resp.Body, ctx: context.WithoutCancel(ctx), co: cc.co, k: cc.k, holder: cc.send}
		cc.send, cc.counted, cc.leased = "", false, true
		return
	}
	cc.leased = cc.send != ""
	if !cc.leased {
		cc.k.unleasedIn.leave(cc.sending)
		cc.told = cc.k.counts.Load() != cc.countsAt
	}
	cc.counted = false
	if cc.leased && resp != nil && resp.StatusCode == http.StatusTooManyRequests {
		// Refused: its room is not given again before its 429 is told,
		// which ends the lease (Report.Sender) as it counts the calls in
		// flight: a call woken by the end meanwhile would go into the
		// limit the 429 just showed, and the cut would not count it.
		cc.refused = true
		return
	}
	if !cc.leased {
		if !cc.k.quiet() || cc.k.tallied.Load() != 0 {
			// An attempt sent without a lease ended: the store's count of
			// them, if it keeps one, goes down. It keeps one if this
			// process told it a count, even while this process's view of
			// the key is still quiet (the reply to the report that told
			// it not in yet, on a loaded store): a count left high there
			// would stand in the next cut.
			cc.co.tally(ctx, cc.k, time.Now())
			cc.k.wakeRoom(1)
		}
		return
	}
	holder := cc.send
	cc.send = ""
	cc.co.release(ctx, cc.k, holder)
}

// unrefuse ends the send lease a refused attempt kept (see End) if no
// Report ended it.
func (cc *Call) unrefuse(ctx context.Context) {
	if !cc.refused {
		return
	}
	holder := cc.send
	cc.send, cc.refused = "", false
	cc.co.release(ctx, cc.k, holder)
}

// release ends the send lease holder held on k, and lets a call waiting
// for room go.
// The caller has counted the attempt as no longer leased.
func (co *Coordinator) release(ctx context.Context, k *keyState, holder string) {
	co.let(ctx, k, holder, time.Now())
	k.wakeRoom(1)
}

// leasedBody is the body of a stream sent under a send lease: the attempt
// stays counted in flight, and its lease held, until the body is done.
type leasedBody struct {
	io.ReadCloser
	ctx    context.Context // the call's values, without its cancellation
	co     *Coordinator
	k      *keyState
	holder string
	done   atomic.Bool
}

// Read reads the stream; its end or failure ends the lease.
func (b *leasedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.finish()
	}
	return n, err
}

// Close closes the stream and ends the lease.
func (b *leasedBody) Close() error {
	err := b.ReadCloser.Close()
	b.finish()
	return err
}

// finish ends the lease, once.
func (b *leasedBody) finish() {
	if b.done.CompareAndSwap(false, true) {
		b.co.release(b.ctx, b.k, b.holder)
	}
}

// waiter is a call held at its key's gate, as the key's list sees it.
// left and since rank it for the probe; the key's mu guards its place in
// the list.
type waiter struct {
	wake   chan struct{} // one slot: a wake-up is never lost, never blocks
	left   int           // attempts it may still send
	since  time.Time     // when it was first held
	gate   gate          // what holds it; under the key's mu
	roomed bool          // woken for room and not yet back at the gate; under the key's mu
}

// signal wakes w.
func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// better reports whether w goes as the probe before o: the call with the
// most attempts left (a probe spends one of its sender's retries), then
// the one held longest.
func (w *waiter) better(o *waiter) bool {
	return w.left > o.left || w.left == o.left && w.since.Before(o.since)
}

// register adds a waiter for a call with left attempts, held since now.
func (k *keyState) register(left int, now time.Time) *waiter {
	return k.registerOn(make(chan struct{}, 1), left, now)
}

// registerOn is register for a waiter woken on wake, a channel with one
// slot that a call held on several keys (AdmitAny) shares among its
// waiters: a change on any of them wakes it.
func (k *keyState) registerOn(wake chan struct{}, left int, now time.Time) *waiter {
	w := &waiter{wake: wake, left: left, since: now}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.waiters = append(k.waiters, w)
	if k.cand == nil || w.better(k.cand) {
		k.cand = w
	}
	return w
}

// unregister removes w; if it was to probe next, the next best is woken in
// its place.
func (k *keyState) unregister(w *waiter) {
	k.mu.Lock()
	defer k.mu.Unlock()
	i := slices.Index(k.waiters, w)
	if i < 0 {
		return
	}
	k.waiters[i] = k.waiters[len(k.waiters)-1]
	k.waiters[len(k.waiters)-1] = nil
	k.waiters = k.waiters[:len(k.waiters)-1]
	if k.cand != w {
		return
	}
	k.cand = nil
	for _, o := range k.waiters {
		if k.cand == nil || o.better(k.cand) {
			k.cand = o
		}
	}
	if k.cand != nil {
		k.cand.signal()
		k.woken.Add(1)
	}
}

// probesFirst reports whether no call held on the key (other than w's,
// nil for none) is to probe it next: a call with another route to take
// probes a key that is down only then, for a call held on it has nowhere
// else to go.
func (k *keyState) probesFirst(w *waiter) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cand == nil || k.cand == w
}

// candidate reports whether w probes next, and records what holds it.
func (k *keyState) candidate(w *waiter, g gate) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	w.gate, w.roomed = g, false
	return k.cand == w
}

// unleased returns how many of this process's attempts on the key are in
// flight without a send lease. It may read one high for a moment (see
// begin), never low.
func (k *keyState) unleased() int {
	return max(0, int(k.unleasedIn.load()))
}

// wakeRoom wakes the n calls held longest for room under the key's limit
// on calls in flight.
func (k *keyState) wakeRoom(n int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.wakeRoomLocked(n)
}

// wakeRoomLocked is wakeRoom with k.mu held.
func (k *keyState) wakeRoomLocked(n int) {
	for ; n > 0; n-- {
		var oldest *waiter
		for _, w := range k.waiters {
			if w.gate == gateInFlight && !w.roomed && (oldest == nil || w.since.Before(oldest.since)) {
				oldest = w
			}
		}
		if oldest == nil {
			return
		}
		oldest.roomed = true
		oldest.signal()
		k.woken.Add(1)
	}
}

// held reports whether calls are held on the key.
func (k *keyState) held() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.waiters) > 0
}

// wakeBudget wakes the calls held by the retry budget: a retry ended.
func (k *keyState) wakeBudget() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, w := range k.waiters {
		if w.gate == gateBudget {
			w.signal()
		}
	}
}

// gate is what holds a call back, if anything.
type gate int

const (
	gateOpen     gate = iota // send
	gateProbe                // send, as the probe, if the lease is granted
	gateDown                 // hold: the key is down
	gateWait                 // hold: the server's wait is not over
	gateBudget               // hold: the retry budget is spent
	gatePace                 // send at the slot the key's pace grants, or hold
	gateInFlight             // hold: the key's calls in flight are at its limit
)

// pass holds the call's attempt a until its key lets it through. It
// returns an error, without the attempt being sent, when ctx ends (the
// context's error) or the call cannot wait as long as the hold may last (a
// *coordination.HeldError), or, with a.Elsewhere, the key is down and the attempt may not
// go as its probe now (a *coordination.HeldError). A retry (a.N above 1) counts against
// the key's retry budget; a first attempt does not.
func (cc *Call) pass(ctx context.Context, a Admission) error {
	cc.unrefuse(ctx)
	cc.wasProbe, cc.turn = false, false
	budget := 0
	if a.N > 1 {
		budget = cc.co.budget(cc.k.calls.load())
	}
	cc.co.refresh(ctx, cc.k)
	if cc.k.quiet() && budget == 0 {
		return nil
	}
	one := [1]lane{{cc: cc, budget: budget}}
	_, err := hold(ctx, a, one[:])
	return err
}

// lane is one key a held attempt may go on: the Call of the call on one of
// its routes (one for Admit, one per route for AdmitAny), and what the
// hold knows of it.
type lane struct {
	cc     *Call
	budget int           // the retries its key allows at once; 0: not counted
	w      *waiter       // registered once held
	ch     chan struct{} // what w is woken on, shared by the call's lanes; nil: its own
	given  int           // its place in AdmitAny's order: 0 the Call asked, i others[i-1]

	// The latest look (see look).
	f      store.Facts
	g      gate
	wake   time.Time // when to look again; zero: when woken
	away   bool      // a.Elsewhere, the key down, and not its probe now: refused
	late   time.Time // the pace's slot, past the call's limits; zero: none
	cannot bool      // the hold would outlast the call's limits

	exempt bool      // held by the key's state: the budget no longer applies
	spread bool      // the release spread was slept
	asked  time.Time // when the call was last refused the probe lease
}

// look reads l's key at now and says what holds the attempt there (l.g)
// and when to look again (l.wake).
func (l *lane) look(a Admission, now time.Time) {
	k := l.cc.k
	iv := l.cc.co.cfg.ProbeInterval
	f := k.facts(now)
	l.f, l.g, l.wake, l.away, l.late, l.cannot = f, gateOpen, time.Time{}, false, time.Time{}, false
	switch {
	case a.Elsewhere && f.Down(now):
		// The call has another route: it goes there, unless this key's
		// probe is due, no held call is to send it, and the call may
		// send it now (no server wait).
		if f.Waiting(now) || f.Probing(now) || now.Before(f.NextProbe) || !l.asked.IsZero() || !k.probesFirst(l.w) {
			l.g, l.away = gateDown, true
			return
		}
		l.g = gateProbe
	case f.Waiting(now):
		l.g, l.wake = gateWait, f.WaitUntil
	case f.Down(now):
		l.register(a, now)
		l.g = gateDown
		if k.candidate(l.w, l.g) {
			switch {
			case f.Probing(now):
				l.wake = f.ProbeUntil
			case now.Before(f.NextProbe):
				l.wake = f.NextProbe
			case !l.asked.IsZero() && now.Before(l.asked.Add(iv/5)):
				// Refused a moment ago, yet the answer says free and
				// due (a store that contradicts itself): a refused
				// lease never spins.
				l.wake = l.asked.Add(iv / 5)
			default:
				l.g = gateProbe
			}
			if l.g == gateDown {
				// Re-checked once a probe interval, so that a lost
				// notice costs no more.
				l.wake = earlier(l.wake, now.Add(iv))
			}
		}
	case f.Capped(now) || f.Taught(now) || f.Paced(now) && turnWithin(f, now, l.cc.p.MaxServerWait()):
		l.g = gatePace
	case l.budget > 0 && !l.exempt:
		l.g = gateBudget
	}
}

// turnWithin reports whether the next turn of f's pace (the bucket's
// refill of one request, Full − (Burst − 1) × Every) is at most d from
// now. A pace whose next turn is further off paces nothing for a call
// that honours server waits up to d: it goes, meets the provider's 429
// and its wait, as the call would have written no such pace (Report).
func turnWithin(f store.Facts, now time.Time, d time.Duration) bool {
	return f.Full.Add(-time.Duration(max(f.Burst-1, 0))*f.Every).Sub(now) <= d
}

// register makes l's waiter, held from now, if it has none.
func (l *lane) register(a Admission, now time.Time) {
	switch {
	case l.w != nil:
	case l.ch != nil:
		l.w = l.cc.k.registerOn(l.ch, a.Left, now)
	default:
		l.w = l.cc.k.register(a.Left, now)
	}
}

// hold holds attempt a until the key of one of lanes lets it through, and
// returns which: the first, in lanes' order, that lets it go when it
// looks. A lane's key lets it go (gateOpen, after the release spread if it
// was held), or grants it the probe lease, a retry lease or a send under
// its pace. It returns an error, without the attempt being sent, when ctx
// ends (the context's error) or the call cannot wait on any of them as
// long as the hold may last (a *coordination.HeldError, of lanes[0]'s key), or, with
// a.Elsewhere (one lane), the key is down and the attempt may not go as
// its probe now.
//
// Held, the call has a waiter on each lane's key, all woken on one
// channel (lane.ch; a lane alone may have its own); the waiters are gone
// when hold returns, so that no lease is taken for a key the call
// did not go on. One hold is recorded, on the key the first lane that
// held the attempt (lanes[0]'s, unless a pace's slot held it at its first
// look): its outcome says how the attempt went, on whichever key. An
// attempt refused with a.Elsewhere before it waited records no hold (it
// was not delayed: it goes around).
func hold(ctx context.Context, a Admission, lanes []lane) (int, error) {
	var (
		h     *holding // the hold in progress
		timer *time.Timer
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		for i := range lanes {
			if l := &lanes[i]; l.w != nil {
				l.cc.k.unregister(l.w)
			}
		}
	}()
	// A process that learnt a key's limit on calls in flight (a notice,
	// another call's 429) tells the store its attempts in flight without
	// a lease as soon as a call of it meets the key, not at its first
	// send under the limit (after the server's wait): by then some may
	// have ended, and a count told then raises the limit only to what is
	// left in flight.
	for i := range lanes {
		lanes[i].cc.co.tally(ctx, lanes[i].cc.k, time.Now())
	}
	first := &lanes[0]
	n, latest := a.N, a.Latest
	refuse := func(l *lane, g gate, now time.Time) error {
		if h == nil && !a.Elsewhere {
			h = l.cc.beginHold(g, now, n)
		}
		start := now
		if h != nil {
			start = h.Start
		}
		h.end(coordination.HoldGaveUp)
		d := l.cc.heldError(l.f, g, now, start)
		if !l.late.IsZero() {
			d.Until, d.Left = l.late, l.late.Sub(now)
		}
		return d
	}
	iv := first.cc.co.cfg.ProbeInterval
turns:
	for turn := 0; ; turn++ {
		now := time.Now()
		if turn > 0 {
			// Every turn, whatever the last one read: the call's own
			// limits and context come first.
			if err := ctx.Err(); err != nil {
				h.end(coordination.HoldCanceled)
				return 0, err
			}
			if !latest.IsZero() && !now.Before(latest) {
				// The call's limit came while it was held: its error
				// names what held it last.
				first.f, first.late = first.cc.k.facts(now), time.Time{}
				return 0, refuse(first, first.g, now)
			}
			for i := range lanes {
				lanes[i].cc.co.refresh(ctx, lanes[i].cc.k)
			}
		}
		for i := range lanes {
			lanes[i].look(a, now)
		}

		// The first key that lets the attempt go.
		for i := range lanes {
			l := &lanes[i]
			cc, k := l.cc, l.cc.k
			switch l.g {
			case gateOpen:
				if l.exempt && !l.spread && cc.co.cfg.ReleaseSpread > 0 {
					// Released: not all at once, and never past the limits.
					l.spread = true
					room := cc.co.cfg.ReleaseSpread
					if !latest.IsZero() {
						room = min(room, latest.Sub(now))
					}
					if room > 0 {
						if err := clock.Sleep(ctx, randN(room)); err != nil {
							h.end(coordination.HoldCanceled)
							return 0, err
						}
						continue turns
					}
				}
				h.end(coordination.HoldReleased)
				return i, nil
			case gateProbe:
				holder := cc.co.holder()
				before := k.view.Load()
				granted := cc.co.use(ctx, k, now, func(ctx context.Context, s store.Store) (store.Facts, bool, error) {
					holder = cc.co.leaseName(holder, s)
					return s.TakeProbe(ctx, k.name, store.Lease{Holder: holder, At: now, Until: now.Add(iv)})
				})
				if granted {
					cc.probe, cc.probeSent, cc.wasProbe = holder, now, true
					h.end(coordination.HoldProbe)
					return i, nil
				}
				l.asked = now
				if a.Elsewhere {
					l.f, l.g, l.away = k.facts(now), gateDown, true // another call probes: go around
					break
				}
				if k.view.Load() != before {
					continue turns // the answer says who probes, or when
				}
				// Refused by an answer the view did not take (no newer
				// than what it holds: a store that lost the key, or the
				// fallback): ask again at the next re-check, not at once.
				l.g, l.wake = gateDown, now.Add(iv)
			case gateBudget:
				holder := cc.co.holder()
				until := now.Add(retryLease)
				if !latest.IsZero() {
					until = earlier(until, latest.Add(time.Second))
				}
				if cc.co.use(ctx, k, now, func(ctx context.Context, s store.Store) (store.Facts, bool, error) {
					holder = cc.co.leaseName(holder, s)
					return s.TakeRetry(ctx, k.name, store.Lease{Holder: holder, At: now, Until: until}, l.budget)
				}) {
					cc.retry = holder
					h.end(coordination.HoldReleased)
					return i, nil
				}
				l.wake = now.Add(iv) // a retry elsewhere may end
			case gatePace:
				done, late, err := cc.takeSend(ctx, l.f, now, latest, n, &h)
				if done {
					return i, err
				}
				if !late.IsZero() {
					l.late, l.cannot = late, true // past the call's limits
					break
				}
				// No room under the limit on calls in flight: held until a
				// call ends (here, or a notice from elsewhere), the limit
				// grows, or the next re-check.
				l.g, l.wake = gateInFlight, earlier(now.Add(iv), nextGrowth(l.f, now))
			}
		}

		// Held on every lane, or refused.
		all := true
		for i := range lanes {
			l := &lanes[i]
			if l.away {
				continue
			}
			l.cannot = l.cannot || l.g == gateWait && l.f.WaitUntil.Sub(now) > l.cc.p.MaxServerWait()
			if !latest.IsZero() {
				l.cannot = l.cannot || !now.Before(latest) || l.g == gateWait && l.f.WaitUntil.After(latest)
			}
			all = all && l.cannot
		}
		if a.Elsewhere && first.away {
			return 0, refuse(first, gateDown, now)
		}
		if all {
			return 0, refuse(first, first.g, now)
		}
		var next time.Time
		for i := range lanes {
			l := &lanes[i]
			k := l.cc.k
			l.register(a, now)
			if k.candidate(l.w, l.g) && l.g == gateWait && l.cc.co.local != nil {
				// A shared store's wait is read again once a probe
				// interval: one no process wrote may be gone.
				l.wake = earlier(l.wake, now.Add(iv))
			}
			if l.g != gateBudget {
				l.exempt, l.spread = true, false
			}
			if !l.cannot {
				next = earlier(next, l.wake)
			}
		}
		if h == nil {
			h = first.cc.beginHold(first.g, now, n)
		}
		if !latest.IsZero() {
			next = earlier(next, latest)
		}
		var fire <-chan time.Time
		if !next.IsZero() {
			if timer == nil {
				timer = time.NewTimer(next.Sub(now))
			} else {
				timer.Reset(next.Sub(now))
			}
			fire = timer.C
		}
		woken := first.w.wake // every lane's, when they share one
		select {
		case <-ctx.Done():
			h.end(coordination.HoldCanceled)
			return 0, ctx.Err()
		case <-woken:
		case <-fire:
			for i := range lanes {
				l := &lanes[i]
				k, co := l.cc.k, l.cc.co
				if l.g == gateDown && k.candidate(l.w, l.g) {
					// Due, or a re-check: the store knows best.
					co.use(ctx, k, time.Now(), func(ctx context.Context, s store.Store) (store.Facts, bool, error) {
						f, err := s.Load(ctx, k.name, time.Now())
						return f, true, err
					})
				}
			}
		}
	}
}

// takeSend asks the key's store for the call's next send under its pace
// or its limit on calls in flight (see gatePace), at now, with *h the hold
// in progress. It reports done when the call goes (err nil, after
// sleeping to its slot) or its context ended (err); not done when the
// limit on calls in flight leaves no room, or when the slot is past
// latest (late, the slot: the call cannot wait for it). The store's slot
// is not trusted: one granted past the lease's end, which no store that
// keeps the contract grants, is read as refused, its lease released, and
// any slot as no further off than this process's facts could put it
// (clampSlot).
func (cc *Call) takeSend(ctx context.Context, f store.Facts, now, latest time.Time, n int, h **holding) (done bool, late time.Time, err error) {
	k := cc.k
	limit := 0
	if f.Capped(now) {
		// The store counts this process's attempts in flight without a
		// lease (sent before the limit was learnt) from its tally: bring
		// it up to date first.
		cc.co.tally(ctx, k, now)
		limit = f.Cap(now)
	}
	holder := cc.co.holder()
	until := latest
	if until.IsZero() {
		until = now.Add(retryLease)
	}
	var slot time.Time
	granted := cc.co.use(ctx, k, now, func(ctx context.Context, s store.Store) (store.Facts, bool, error) {
		holder = cc.co.leaseName(holder, s)
		f, at, ok, err := s.TakeSend(ctx, k.name, store.Lease{Holder: holder, At: now, Until: until}, limit)
		slot = at
		return f, ok, err
	})
	if granted && slot.After(until) {
		// No grant this process asked for (store.Store: nothing is
		// granted after l.Until): a store no process of the fleet wrote.
		// A send lease it took ends; the slot is one refused.
		cc.co.release(ctx, k, holder)
		granted = false
	}
	slot = cc.co.clampSlot(slot, now)
	switch {
	case granted:
		if limit > 0 {
			cc.send = holder // counted as leased when its attempt begins
		}
		cc.turn = f.Paced(now) || f.Taught(now)
		at := later(slot, cc.notBefore)
		if at.After(now) {
			if *h == nil {
				*h = cc.beginHold(gatePace, now, n)
			}
			if err := clock.Sleep(ctx, at.Sub(now)); err != nil {
				(*h).end(coordination.HoldCanceled)
				return true, time.Time{}, err
			}
		}
		(*h).end(coordination.HoldReleased)
		return true, time.Time{}, nil
	case slot.IsZero():
		return false, time.Time{}, nil
	case latest.IsZero():
		// No deadline: wait for the slot to come within reach, held by
		// the pace (and recorded so) from now.
		if *h == nil {
			*h = cc.beginHold(gatePace, now, n)
		}
		if err := clock.Sleep(ctx, slot.Sub(now)-retryLease/2); err != nil {
			(*h).end(coordination.HoldCanceled)
			return true, time.Time{}, err
		}
		return cc.takeSend(ctx, k.facts(time.Now()), time.Now(), latest, n, h)
	}
	// The slot is past the last instant the call may send.
	return false, slot, nil
}

// retryLease is the longest a retry lease lasts without being released:
// the retry's own attempt, at most.
const retryLease = 10 * time.Minute

// Sent ends a budgeted retry's lease once its attempt is over.
func (cc *Call) Sent() {
	if cc.retry == "" {
		return
	}
	holder := cc.retry
	cc.retry = ""
	cc.co.let(cc.req.Context(), cc.k, holder, time.Now())
	cc.k.wakeBudget()
}

// Report tells the key what the call's latest attempt says of the
// provider, and returns whether the call's next attempt will be held by
// the key's state, and paced. A first failure on a key that was up is
// probed no later than the call's own schedule would retry it. A 429's
// body that says what a request takes (Requested n tokens) is the key's
// cost. A response that says a published rate limit is spent paces the
// key; a 429 that does not, with other calls in flight, limits the key's
// calls in flight. Only what changes a fact reaches the store: an answer
// from a key known to be up costs nothing, and reads no clock.
func (cc *Call) Report(ctx context.Context, o Outcome) Verdict {
	k := cc.k
	turn := cc.turn
	cc.turn = false
	if o.Status == http.StatusTooManyRequests {
		if n := requestedTokens(o.Body); n > 0 {
			k.cost.Store(n) // what a request of the key costs its token limit
		}
	}
	var header http.Header
	if o.Resp != nil {
		header = o.Resp.Header
	}
	if o.Health == HealthUp && o.Status < 400 && cc.probe == "" && k.quiet() {
		// An answer on a key known to be quiet is news only if it says a
		// rate limit is spent.
		if _, spent := spentPace(header, cc.sentAt, cc.sentAt, k.cost.Load()); !spent {
			return Verdict{}
		}
	}
	now := time.Now()
	r := store.Report{At: now, Evidence: evidenceOf(o.Health), Prober: cc.probe}
	if r.Evidence == store.NoEvidence {
		// A probe that learnt nothing (its caller gave up, its request's
		// own fault) keeps its lease to its end: the next probe goes no
		// sooner than a probe interval after this one was sent.
		r.Prober = ""
	}
	cc.probe = ""
	f := k.facts(now)
	wasDown := f.Down(now)
	if o.Health == HealthDown {
		r.Reason, r.DownFor = failureOf(o), downFor*cc.co.cfg.ProbeInterval
		gap := cc.co.probeGap()
		if r.Prober == "" && !f.Down(now) && o.Own.Set && o.Own.D < gap {
			// One blip is not an outage: the first failure on a key that
			// was up is probed when the failing call's own schedule
			// would retry it, not a probe interval later.
			gap = o.Own.D
		}
		r.NextProbe = now.Add(gap)
		if r.Prober != "" {
			// Timed from when the probe was sent, so that a slow failure
			// does not stretch the time between probes.
			r.NextProbe = cc.probeSent.Add(cc.co.probeGap())
		}
	}
	pc, spent := spentPace(header, cc.sentAt, now, k.cost.Load())
	if spent && pc.full.Add(-time.Duration(pc.burst-1)*pc.every).Sub(cc.sentAt) > cc.p.MaxServerWait() {
		spent = false // a request back later than the call honours: not a pace for it
	}
	if spent && (!f.Paced(now) || pc.full.After(f.Full) || pc.every > f.Every) {
		// News: the key is not paced yet, the provider counts more than
		// its pace does (other clients of the key, say), or its rate is
		// slower than the pace's. (A rate read from whole remaining
		// requests is at most the true one; the store keeps the slowest
		// read, so a pace read fast is corrected by the next response
		// that says the limit is spent.)
		r.Burst, r.Every, r.Full = pc.burst, pc.every, pc.full
	}
	if !spent && (f.Capped(now) || f.Taught(now)) {
		// Every send of the key is counted by its store already: the
		// bucket its answers describe paces it before it runs dry (a
		// store keeps the latest Full, and counts each send granted).
		if sp, ok := statedPace(header, cc.sentAt, now, k.cost.Load()); ok && sp.due().Sub(cc.sentAt) <= cc.p.MaxServerWait() &&
			(!f.Paced(now) || sp.full.After(f.Full)) {
			r.Burst, r.Every, r.Full = sp.burst, sp.every, sp.full
		}
	}
	inFlight := k.unleased() + f.InFlight
	if cc.refused {
		inFlight-- // its own lease, kept until now (see End)
	}
	// Refused with no published limit spent, with other calls in flight:
	// they are too many. The store counts them: this process's without a
	// lease (its tally, sent with the cut), and the fleet's leases and
	// tallies. A refused attempt that a count of this process's told the
	// store held (sent without a lease, counted by a cut as in flight) cuts
	// again, whatever this process's view shows (still quiet, on a loaded
	// store, while its own cuts are on their way): the cut that counted it
	// set the limit with it, and only a later cut takes it out (as a
	// leased attempt's lease is ended by its report before the count).
	told := !cc.leased && cc.told
	cc.told = false
	cut := o.Status == http.StatusTooManyRequests && !spent && (inFlight >= 2 || told)
	// A 429 at the turn a pace or lesson gave the attempt is the pace's
	// error, unless it cuts the calls in flight: then their number, not
	// the rate, was wrong.
	mispaced := turn && o.Status == http.StatusTooManyRequests && !cut
	if o.Status == http.StatusTooManyRequests {
		r.Spacing, r.Floor = cc.lesson(o, f, pc, spent, mispaced, now)
	}
	if cut {
		cc.co.tallyInto(k, &r, now)
		r.Cut, r.CapUntil, r.Grow = true, now.Add(capLifeMul*cc.co.cfg.ProbeInterval), cc.co.growStep()
	}
	if o.Server.Set && o.Server.D > 0 && o.Server.D <= cc.p.MaxServerWait() && !spent && r.Spacing == 0 {
		// A pace, not the whole key, holds the calls after a spent limit;
		// this call's own wait still holds it (notBefore).
		r.WaitUntil, r.Reason = now.Add(o.Server.D), failureOf(o)
	}
	sender, owed := "", false
	if cc.refused {
		sender, cc.send, cc.refused = cc.send, "", false
	}
	if r.Prober != "" || o.Health == HealthDown || !r.WaitUntil.IsZero() || o.Health == HealthUp && f.Down(now) ||
		r.Every > 0 || r.Cut || r.Spacing > 0 || r.Floor > 0 || sender != "" {
		cc.co.use(ctx, k, now, func(ctx context.Context, s store.Store) (store.Facts, bool, error) {
			r.Sender, owed = sender, false
			if sender != "" && (s == cc.co.local && cc.co.local != nil) != strings.HasSuffix(sender, localMark) {
				r.Sender, owed = "", true // granted by the other store: ended there (let)
			}
			f, err := s.Report(ctx, k.name, r)
			return f, true, err
		})
		f = k.facts(now)
	}
	if owed {
		cc.co.let(ctx, k, sender, now)
	}
	if sender != "" {
		k.wakeRoom(1)
	}
	paced := f.Paced(now) || f.Taught(now)
	return Verdict{Held: paced || f.Down(now) || f.Waiting(now) || f.Capped(now), Paced: paced, Mispaced: mispaced,
		Down: wasDown && o.Health == HealthDown && f.Down(now)}
}

// evidenceOf is the store.Evidence a result of health h brings its key.
func evidenceOf(h Health) store.Evidence {
	switch h {
	case HealthUp:
		return store.ProviderUp
	case HealthDown:
		return store.ProviderDown
	}
	return store.NoEvidence
}

// failureOf names the failure o stands for, for its key's facts: the
// error its stream opened with, or its status or transport failure.
func failureOf(o Outcome) string {
	if o.Event != "" {
		return o.Event
	}
	return reasonOf(o.Resp, o.Err)
}

// reasonOf names the kind of a failed attempt's result for the key's
// facts: its status line, or what failed in the transport. It never
// carries a URL, a body or a credential.
func reasonOf(resp *http.Response, err error) string {
	if err == nil {
		if resp.Status != "" {
			return resp.Status
		}
		return strconv.Itoa(resp.StatusCode) + " " + http.StatusText(resp.StatusCode)
	}
	var dns *net.DNSError
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.As(err, &dns):
		return "host not found"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed before a response"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "connection failed"
}

// earlier returns the earlier of a and b, a zero time meaning none.
func earlier(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// randN returns a random duration in [0, d), or 0 if d is not positive.
func randN(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}
