package llmretry

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// coordinator is the shared state of a coordinated Transport: one
// keyState per provider key in use. One mutex guards it all; the work under
// it is a few comparisons, and one Transport carries at most a few
// thousand calls at once.
type coordinator struct {
	cfg  Coordination // resolved
	seed maphash.Seed

	mu   sync.Mutex
	keys map[keyID]*keyState
}

// keyID identifies a provider key: a host and a hash of the credential.
type keyID struct {
	host string
	cred uint64 // 0: the request carries no credential
}

// keyState is what the calls to one provider key know of it. All fields
// but id and name are guarded by coordinator.mu.
type keyState struct {
	id   keyID
	name string // host#hash, for records and errors

	calls    int // calls inside RoundTrip
	retrying int // retry attempts in flight

	downSince time.Time // when the provider failed as if down; zero while up
	last      error     // the last failure seen
	probing   bool      // a probe is in flight
	probeSent time.Time // when the latest probe was sent
	nextProbe time.Time // no probe before this
	until     time.Time // the server's wait: nothing is sent before this
	held      []*call   // the calls held at the gate: the probe's candidates

	changed chan struct{} // closed on any change a held call cares about; nil if nobody waits
}

// isDown reports whether the provider failed as if down and has not
// answered since. co.mu must be held.
func (k *keyState) isDown() bool { return !k.downSince.IsZero() }

// credentialHeaders are the headers that carry model providers' API keys.
var credentialHeaders = [...]string{"Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key"}

// newCoordinator returns an empty coordinator for cfg (resolved).
func newCoordinator(cfg Coordination) *coordinator {
	return &coordinator{cfg: cfg, seed: maphash.MakeSeed(), keys: make(map[keyID]*keyState)}
}

// keyOf returns req's provider key. The credential's value is hashed here
// and kept nowhere.
func (co *coordinator) keyOf(req *http.Request) keyID {
	var h maphash.Hash
	h.SetSeed(co.seed)
	found := false
	for _, name := range credentialHeaders {
		for _, v := range req.Header[name] {
			h.WriteString(name)
			h.WriteByte(0)
			h.WriteString(v)
			h.WriteByte(0)
			found = true
		}
	}
	if req.URL.RawQuery != "" {
		for _, v := range req.URL.Query()["key"] {
			h.WriteString("key=")
			h.WriteString(v)
			h.WriteByte(0)
			found = true
		}
	}
	id := keyID{host: strings.ToLower(req.URL.Host)}
	if found {
		id.cred = h.Sum64() | 1 // never 0, which means no credential
	}
	return id
}

// String names the key: its host, and 8 hex digits of the credential's hash.
func (id keyID) String() string {
	if id.cred == 0 {
		return id.host
	}
	return fmt.Sprintf("%s#%08x", id.host, uint32(id.cred>>32))
}

// enter registers a call to req's key and returns the key.
func (co *coordinator) enter(req *http.Request) *keyState {
	id := co.keyOf(req)
	co.mu.Lock()
	defer co.mu.Unlock()
	k := co.keys[id]
	if k == nil {
		k = &keyState{id: id, name: id.String()}
		co.keys[id] = k
	}
	k.calls++
	return k
}

// leave ends c's registration with its key, gives up the probe if c still
// holds it (its result never came), and forgets the key when nothing
// remains to remember.
func (co *coordinator) leave(c *call) {
	co.mu.Lock()
	defer co.mu.Unlock()
	k := c.key
	if c.probe {
		c.probe = false
		k.probing = false
		co.broadcast(k)
	}
	k.calls--
	if k.calls == 0 && k.retrying == 0 && !k.isDown() && !k.until.After(time.Now()) {
		delete(co.keys, k.id)
	}
}

// broadcast wakes every call held on k. co.mu must be held.
func (co *coordinator) broadcast(k *keyState) {
	if k.changed != nil {
		close(k.changed)
		k.changed = nil
	}
}

// probeGap returns the time until the next probe: ProbeInterval, less a
// random 0–20 %.
func (co *coordinator) probeGap() time.Duration {
	iv := co.cfg.ProbeInterval
	return iv - rand.N(iv/5+1)
}

// budget returns how many retries on calls' own schedules a key with
// calls in flight allows at once.
func (co *coordinator) budget(calls int) int {
	return max(co.cfg.MinRetries, int(co.cfg.RetryBudget*float64(calls)))
}

// gate is what holds a call back, if anything.
type gate int

const (
	gateOpen   gate = iota // send
	gateProbe              // send, as the probe
	gateDown               // hold: the key is down
	gateWait               // hold: the server's wait is not over
	gateBudget             // hold: the retry budget is spent
)

// check says what the gate of key k does now for c's attempt (budgeted: a
// retry on the call's own schedule), and when it next changes by itself
// (zero: only when something happens). co.mu must be held.
func (co *coordinator) check(k *keyState, c *call, now time.Time, budgeted bool) (gate, time.Time) {
	switch {
	case k.until.After(now):
		return gateWait, k.until
	case k.isDown() && (k.probing || !k.mayProbe(c)):
		// Another candidate goes first; a change wakes c.
		return gateDown, time.Time{}
	case k.isDown() && now.Before(k.nextProbe):
		return gateDown, k.nextProbe
	case k.isDown():
		return gateProbe, time.Time{}
	case budgeted && k.retrying >= co.budget(k.calls):
		return gateBudget, time.Time{}
	}
	return gateOpen, time.Time{}
}

// mayProbe reports whether c is the held call that goes as the next probe:
// the one with the most attempts left (a probe spends one of its sender's
// retries, so the probes are spread over the calls instead of exhausting
// one), and of those the one held longest. co.mu must be held.
func (k *keyState) mayProbe(c *call) bool {
	for _, o := range k.held {
		if o != c && (o.left > c.left || o.left == c.left && o.heldSince.Before(c.heldSince)) {
			return false
		}
	}
	return true
}

// hold registers c as held on k, once. co.mu must be held.
func (k *keyState) hold(c *call) {
	if !c.isHeld {
		c.isHeld = true
		k.held = append(k.held, c)
	}
}

// unhold removes c from k's held calls, if it is there, and wakes the
// others when the probe could be waiting for c. co.mu must be held.
func (co *coordinator) unhold(k *keyState, c *call) {
	if !c.isHeld {
		return
	}
	c.isHeld = false
	i := slices.Index(k.held, c)
	k.held[i] = k.held[len(k.held)-1]
	k.held[len(k.held)-1] = nil
	k.held = k.held[:len(k.held)-1]
	if k.isDown() && !k.probing {
		co.broadcast(k)
	}
}

// attemptsLeft returns how many attempts c may still send, the one at the
// gate included, by its policy's count (a large number when only the
// deadline bounds it).
func (c *call) attemptsLeft(retry bool) int {
	limit := c.p.retryLimit(c.lim.hasDeadline())
	if !retry {
		return limit + 1
	}
	return limit - c.retries + 1 // c.retries counts the retry at the gate
}

// admit holds c's next attempt (retry: not its first) until its key lets
// it through, and says whether it goes as the probe. It returns an error,
// without the attempt being sent, when c's context ends (the context's
// error) or c cannot wait as long as the hold may last (a *DownError).
func (co *coordinator) admit(ctx context.Context, c *call, retry bool) (bool, error) {
	k := c.key
	giveUp := c.lim.latest()
	hasDeadline := !giveUp.IsZero()
	var (
		h      *holding // non-nil once held
		exempt bool     // held by the key's state: the budget no longer applies
		spread bool     // the random place in the release spread was taken
		timer  *time.Timer
	)
	c.left, c.heldSince = c.attemptsLeft(retry), time.Now()
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		if c.isHeld {
			co.mu.Lock()
			co.unhold(k, c)
			co.mu.Unlock()
		}
	}()
	for {
		co.mu.Lock()
		now := time.Now()
		g, wake := co.check(k, c, now, retry && !exempt)
		switch g {
		case gateOpen:
			if exempt && !spread && co.cfg.ReleaseSpread > 0 {
				// Released: not all at once.
				spread = true
				co.unhold(k, c)
				co.mu.Unlock()
				if err := sleep(ctx, rand.N(co.cfg.ReleaseSpread)); err != nil {
					h.end(HoldCanceled)
					return false, err
				}
				continue
			}
			fallthrough
		case gateProbe:
			probe := g == gateProbe
			if probe {
				k.probing, k.probeSent = true, now
			}
			co.unhold(k, c)
			if retry {
				k.retrying++
			}
			co.mu.Unlock()
			if probe {
				h.end(HoldProbe)
			} else {
				h.end(HoldReleased)
			}
			return probe, nil
		}

		// Held.
		k.hold(c)
		if g != gateBudget {
			exempt, spread = true, false
		}
		until := k.until
		down := DownError{Key: k.name, Last: k.last}
		if k.isDown() {
			down.Since, down.For = k.downSince, now.Sub(k.downSince)
		}
		if until.After(now) {
			down.Until, down.Left = until, until.Sub(now)
		}
		if k.changed == nil {
			k.changed = make(chan struct{})
		}
		changed := k.changed
		co.mu.Unlock()

		if h == nil {
			h = c.beginHold(k.name, g, now)
		}
		down.Reason = holdReason(g)
		cannot := g == gateWait && until.Sub(now) > c.p.MaxRetryAfter
		if hasDeadline {
			cannot = cannot || !now.Before(giveUp) || (g == gateWait && until.After(giveUp))
			if wake.IsZero() || giveUp.Before(wake) {
				wake = giveUp
			}
		}
		if cannot {
			down.Waited = now.Sub(h.Start)
			h.end(HoldGaveUp)
			return false, &down
		}

		var fire <-chan time.Time
		if !wake.IsZero() {
			if timer == nil {
				timer = time.NewTimer(wake.Sub(now))
			} else {
				timer.Reset(wake.Sub(now))
			}
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			h.end(HoldCanceled)
			return false, ctx.Err()
		case <-changed:
		case <-fire:
		}
	}
}

// sent ends the accounting of a retry that admit let through: one fewer in
// flight for the budget.
func (co *coordinator) sent(k *keyState) {
	co.mu.Lock()
	defer co.mu.Unlock()
	k.retrying--
	co.broadcast(k)
}

// report tells c's key how c's latest attempt ended (why: classify's
// verdict; serverWait: the wait the server asked for), once per attempt,
// and returns whether c's next attempt will be held by the key's state.
func (co *coordinator) report(c *call, ev evidence, why stop, serverWait time.Duration, hasServerWait bool, now time.Time) bool {
	co.mu.Lock()
	defer co.mu.Unlock()
	k := c.key
	if c.reported < c.n {
		c.reported = c.n
		co.update(k, c, ev, serverWait, hasServerWait, now)
	}
	return k.isDown() || k.until.After(now)
}

// update applies one attempt's result to k. co.mu must be held.
func (co *coordinator) update(k *keyState, c *call, ev evidence, serverWait time.Duration, hasServerWait bool, now time.Time) {
	probe := c.probe
	c.probe = false
	changed := probe
	if probe {
		k.probing = false
	}
	failedDown := false
	switch ev {
	case evDown:
		failedDown = true
		if c.err != nil {
			k.last = c.err
		} else {
			k.last = &failedStatus{code: c.resp.StatusCode, status: c.resp.Status}
		}
	case evUp:
		// The provider answered: it is up.
		if c.resp != nil && c.resp.StatusCode >= 400 {
			k.last = &failedStatus{code: c.resp.StatusCode, status: c.resp.Status}
		}
		if k.isDown() {
			k.downSince, changed = time.Time{}, true
		}
	}
	if failedDown && !k.isDown() {
		k.downSince, changed = now, true
		k.nextProbe = now.Add(co.probeGap())
	} else if failedDown && probe {
		// Counted from when the probe was sent, so that a slow failure
		// does not stretch the time between probes.
		k.nextProbe = k.probeSent.Add(co.probeGap())
	}
	if hasServerWait && serverWait > 0 && serverWait <= c.p.MaxRetryAfter {
		if u := now.Add(serverWait); u.After(k.until) {
			k.until, changed = u, true
		}
	}
	if k.isDown() && k.until.After(k.nextProbe) {
		k.nextProbe = k.until
	}
	if changed {
		co.broadcast(k)
	}
}

// failedStatus is a failed response as an error, for DownError.Last.
type failedStatus struct {
	code   int
	status string
}

func (e *failedStatus) Error() string {
	if e.status != "" {
		return e.status
	}
	return fmt.Sprintf("status %d", e.code)
}
