package llmretry

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"net/http"
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

	down      bool      // the provider failed as if down
	downSince time.Time // when it went down
	last      error     // the last failure seen
	probing   bool      // a probe is in flight
	nextProbe time.Time // no probe before this
	until     time.Time // the server's wait: nothing is sent before this

	changed chan struct{} // closed on any change a held call cares about; nil if nobody waits
}

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
	if k.calls == 0 && k.retrying == 0 && !k.down && !k.until.After(time.Now()) {
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

// check says what the gate of key k does now for an attempt (budgeted: a
// retry on the call's own schedule), and when it next changes by itself
// (zero: only when something happens). co.mu must be held.
func (co *coordinator) check(k *keyState, now time.Time, budgeted bool) (gate, time.Time) {
	switch {
	case k.until.After(now):
		return gateWait, k.until
	case k.down && k.probing:
		return gateDown, time.Time{}
	case k.down && now.Before(k.nextProbe):
		return gateDown, k.nextProbe
	case k.down:
		return gateProbe, time.Time{}
	case budgeted && k.retrying >= co.budget(k.calls):
		return gateBudget, time.Time{}
	}
	return gateOpen, time.Time{}
}

// admit holds c's next attempt (retry: not its first) until its key lets
// it through, and says whether it goes as the probe. It returns an error,
// without the attempt being sent, when c's context ends (the context's
// error) or c cannot wait as long as the hold may last (a *DownError).
func (co *coordinator) admit(ctx context.Context, c *call, retry bool) (bool, error) {
	k := c.key
	deadline, hasDeadline := ctx.Deadline()
	giveUp := deadline.Add(-c.p.Reserve)
	var (
		h      *holding // non-nil once held
		exempt bool     // held by the key's state: the budget no longer applies
		spread bool     // the random place in the release spread was taken
		timer  *time.Timer
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		co.mu.Lock()
		now := time.Now()
		g, wake := co.check(k, now, retry && !exempt)
		switch g {
		case gateOpen:
			if exempt && !spread && co.cfg.ReleaseSpread > 0 {
				// Released: not all at once.
				spread = true
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
				k.probing = true
			}
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
		if g != gateBudget {
			exempt, spread = true, false
		}
		until := k.until
		down := DownError{Key: k.name, Last: k.last}
		if k.down {
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

// sent ends the accounting of one of c's attempts that admit let through.
func (co *coordinator) sent(retry bool, k *keyState) {
	if !retry {
		return
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	k.retrying--
	co.broadcast(k)
}

// downStatus reports whether a response status says the provider is down.
func downStatus(status int) bool {
	return status >= 500 && retryableStatus(status)
}

// report tells c's key how c's latest attempt ended (why: classify's
// verdict; serverWait: the wait the server asked for), once per attempt,
// and returns whether c's next attempt will be held by the key's state.
func (co *coordinator) report(c *call, why stop, serverWait time.Duration, hasServerWait bool, now time.Time) bool {
	co.mu.Lock()
	defer co.mu.Unlock()
	k := c.key
	if c.reported < c.n {
		c.reported = c.n
		co.update(k, c, why, serverWait, hasServerWait, now)
	}
	return k.down || k.until.After(now)
}

// update applies one attempt's result to k. co.mu must be held.
func (co *coordinator) update(k *keyState, c *call, why stop, serverWait time.Duration, hasServerWait bool, now time.Time) {
	probe := c.probe
	c.probe = false
	changed := probe
	if probe {
		k.probing = false
	}
	failedDown := false
	switch {
	case c.err != nil:
		// The call's own end (its context, a Permanent error) says
		// nothing of the provider.
		if retryableErr(c.err) {
			failedDown = true
			k.last = c.err
		}
	case downStatus(c.resp.StatusCode) && why != stopProvider:
		failedDown = true
		k.last = &failedStatus{code: c.resp.StatusCode, status: c.resp.Status}
	default:
		// The provider answered: it is up.
		if c.resp.StatusCode >= 400 {
			k.last = &failedStatus{code: c.resp.StatusCode, status: c.resp.Status}
		}
		if k.down {
			k.down, k.downSince, changed = false, time.Time{}, true
		}
	}
	if failedDown && !k.down {
		k.down, k.downSince, changed = true, now, true
		k.nextProbe = now.Add(co.probeGap())
	} else if failedDown && probe {
		k.nextProbe = now.Add(co.probeGap())
	}
	if hasServerWait && serverWait > 0 && serverWait <= c.p.MaxRetryAfter {
		if u := now.Add(serverWait); u.After(k.until) {
			k.until, changed = u, true
		}
	}
	if k.down && k.until.After(k.nextProbe) {
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
