// Package memstore is the in-process store.Store: the one a coordinated
// llmretry Transport keeps of its own when coordination.Config.Store is
// nil, the one coordination.NewMemoryStore returns, and the fallback the
// coordination engine (internal/coord) uses while a shared store fails.
// It is a package of its own because both coordination (the user's
// NewMemoryStore) and internal/coord (which imports coordination, and
// needs the fallback's Adopt and Uncount) use it.
package memstore

import (
	"context"
	"encoding/hex"
	"hash/maphash"
	"sync"
	"time"

	"github.com/llmretry/llmretry/store"
)

// SweepEvery is how often, at most, a Store looks for keys to forget: a key
// is forgotten at the first sweep after none of its facts is live and its
// Version has been kept for store.VersionHold.
const SweepEvery = time.Minute

// Store is the in-process store.Store. Its facts live in a map guarded by
// one mutex; its watchers are called after the mutex is released. An entry
// is forgotten once none of its facts is live and its Version has been
// kept for store.VersionHold: by a sweep of the whole map at most once per
// SweepEvery, run by whichever operation comes after that (or by Sweep).
// It starts no goroutine.
//
// A Store is safe for concurrent use. Its zero value is not usable: New
// makes one. It keeps what it is told and nothing of its callers'.
type Store struct {
	seed maphash.Seed

	mu       sync.Mutex
	entries  map[string]*memEntry
	refusals map[refusal]time.Time // when each refusal of a prefill lapses (store.PrefillRefusals)
	lastSwep time.Time

	wmu      sync.Mutex
	watchers map[*func(string, store.Facts)]struct{}
}

// memEntry is one key's facts, with its retry and send leases by holder.
type memEntry struct {
	f       store.Facts
	retries map[string]time.Time // holder → lease end
	sends   map[string]time.Time // holder → lease end
	tallies map[string]tally     // owner → its calls in flight without a lease
	changed time.Time            // when f last changed
}

// tally is one process's count of a key's calls in flight without a send
// lease.
type tally struct {
	n     int
	seq   uint64
	until time.Time
}

// inFlight returns the calls in flight e counts: send leases and tallies.
// Lapsed ones must have been dropped (lapse).
func (e *memEntry) inFlight() int {
	n := len(e.sends)
	for _, t := range e.tallies {
		n += t.n
	}
	return n
}

// New returns an empty Store, with a hash seed of its own for the names
// of keys (see Key).
func New() *Store {
	return &Store{seed: maphash.MakeSeed(), entries: map[string]*memEntry{}, refusals: map[refusal]time.Time{}, watchers: map[*func(string, store.Facts)]struct{}{}}
}

// Key names the key host#8hex: 32 bits of a hash seeded per Store (every
// Transport that shares the Store names a key alike), enough to tell one
// process's credentials apart and too few to test a guess against.
func (s *Store) Key(host string, credential []byte) string {
	if len(credential) == 0 {
		return host
	}
	sum := maphash.Bytes(s.seed, credential)
	var b [4]byte
	for i := range b {
		b[i] = byte(sum >> (56 - 8*i))
	}
	return host + "#" + hex.EncodeToString(b[:])
}

// Load returns key's live facts at now.
func (s *Store) Load(_ context.Context, key string, now time.Time) (store.Facts, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(key, now, existing)
	if e == nil {
		return store.Facts{}, nil
	}
	return e.f, nil
}

// Report applies r to key (see store.Store).
func (s *Store) Report(_ context.Context, key string, r store.Report) (store.Facts, error) {
	s.mu.Lock()
	e := s.entry(key, r.At, orNew)
	f := e.f
	if r.Prober != "" && f.Prober == r.Prober {
		f.Prober, f.ProbeUntil = "", time.Time{}
	}
	switch r.Evidence {
	case store.ProviderDown:
		if !f.Down(r.At) {
			f.DownSince, f.NextProbe = r.At, r.NextProbe
		} else if r.Prober != "" && e.f.Prober == r.Prober {
			f.NextProbe = r.NextProbe
		}
		f.DownUntil = later(f.DownUntil, r.At.Add(r.DownFor))
	case store.ProviderUp:
		f.DownSince, f.DownUntil, f.NextProbe, f.Reason = time.Time{}, time.Time{}, time.Time{}, ""
	}
	if r.Evidence == store.ProviderDown || !r.WaitUntil.IsZero() {
		f.Reason = r.Reason
	}
	f.WaitUntil = later(f.WaitUntil, r.WaitUntil)
	if r.Every > 0 {
		if !f.Paced(r.At) {
			f.Burst, f.Every, f.Full = r.Burst, r.Every, r.Full
		} else {
			f.Full, f.Every, f.Burst = later(f.Full, r.Full), max(f.Every, r.Every), min(f.Burst, r.Burst)
		}
	}
	if _, ok := e.sends[r.Sender]; ok && r.Sender != "" {
		delete(e.sends, r.Sender)
		f.InFlight = e.inFlight()
	}
	rose := false
	if old, ok := e.tallies[r.Owner]; r.Owner != "" && (!ok || r.Seq > old.seq) {
		rose = r.Unleased > old.n
		if e.tallies == nil {
			e.tallies = map[string]tally{}
		}
		e.tallies[r.Owner] = tally{n: max(r.Unleased, 0), seq: r.Seq, until: r.TallyUntil}
		if r.Unleased <= 0 || !r.At.Before(r.TallyUntil) {
			// Ended; its Seq is kept while the entry lives, so that a
			// late count cannot bring it back.
			e.tallies[r.Owner] = tally{seq: r.Seq, until: r.At.Add(store.VersionHold)}
		}
		f.InFlight = e.inFlight()
	}
	switch {
	case r.Cut:
		f.MaxInFlight, f.Grow, f.CutAt = max(f.InFlight, 1), r.Grow, r.At
		f.CapUntil = later(f.CapUntil, r.CapUntil)
	case rose && f.Capped(r.At) && f.InFlight > f.MaxInFlight:
		f.MaxInFlight = f.InFlight
	}
	teach(&f, r)
	return s.commit(key, e, f, r.At, tellWatchers)
}

// teach applies what r teaches of the key's rate to f (see store.Store).
func teach(f *store.Facts, r store.Report) {
	if r.Spacing <= 0 && r.Floor <= 0 {
		return
	}
	sp := max(r.Spacing, r.Floor)
	if !f.Taught(r.At) {
		f.Spacing, f.Floor, f.Next = sp, max(r.Floor, 0), r.At.Add(sp)
	} else {
		f.Spacing, f.Floor, f.Next = max(f.Spacing, sp), max(f.Floor, r.Floor), later(f.Next, r.At.Add(sp))
	}
	f.Spacing = max(f.Spacing, f.Floor)
	f.TaughtUntil = later(f.TaughtUntil, r.At.Add(store.LessonHold))
}

// TakeSend grants the next send of a paced, limited or taught key (see
// store.Store).
func (s *Store) TakeSend(_ context.Context, key string, l store.Lease, limit int) (store.Facts, time.Time, bool, error) {
	s.mu.Lock()
	e := s.entry(key, l.At, orNew)
	f := e.f
	slot := l.At
	if f.Paced(l.At) {
		slot = later(l.At, f.Full.Add(-time.Duration(f.Burst-1)*f.Every))
	}
	taught := f.Taught(l.At)
	if taught {
		slot = later(slot, f.Next)
	}
	if slot.After(l.Until) {
		s.mu.Unlock()
		return f, slot, false, nil
	}
	if limit > 0 && e.inFlight() >= limit {
		s.mu.Unlock()
		return f, time.Time{}, false, nil
	}
	if f.Paced(l.At) {
		f.Full = later(f.Full, slot).Add(f.Every)
	}
	if taught {
		f.Next = slot.Add(f.Spacing)
		f.Spacing = store.Climb(f.Spacing, f.Floor)
		f.TaughtUntil = later(f.TaughtUntil, slot.Add(store.LessonHold))
	}
	if limit > 0 {
		if e.sends == nil {
			e.sends = map[string]time.Time{}
		}
		e.sends[l.Holder] = later(e.sends[l.Holder], l.Until)
		f.InFlight = e.inFlight()
	}
	f, err := s.commit(key, e, f, l.At, tellNobody)
	return f, slot, true, err
}

// TakeProbe grants the probe lease if key is down, free and due (see
// store.Store).
func (s *Store) TakeProbe(_ context.Context, key string, l store.Lease) (store.Facts, bool, error) {
	s.mu.Lock()
	e := s.entry(key, l.At, orNew)
	f := e.f
	if !f.Down(l.At) || f.Probing(l.At) || f.NextProbe.After(l.At) {
		s.mu.Unlock()
		return f, false, nil
	}
	f.Prober, f.ProbeUntil = l.Holder, l.Until
	f.DownUntil = later(f.DownUntil, l.Until)
	f, err := s.commit(key, e, f, l.At, tellWatchers)
	return f, true, err
}

// TakeRetry grants a retry lease if fewer than limit are live (see store.Store).
func (s *Store) TakeRetry(_ context.Context, key string, l store.Lease, limit int) (store.Facts, bool, error) {
	s.mu.Lock()
	e := s.entry(key, l.At, orNew)
	if len(e.retries) >= limit {
		f := e.f
		s.mu.Unlock()
		return f, false, nil
	}
	if e.retries == nil {
		e.retries = map[string]time.Time{}
	}
	e.retries[l.Holder] = l.Until
	f := e.f
	f.Retries = len(e.retries)
	f, err := s.commit(key, e, f, l.At, tellNobody)
	return f, true, err
}

// Release ends holder's leases on key.
func (s *Store) Release(_ context.Context, key, holder string, now time.Time) (store.Facts, error) {
	s.mu.Lock()
	e := s.entry(key, now, existing)
	if e == nil {
		s.mu.Unlock()
		return store.Facts{}, nil
	}
	f := e.f
	announce := tellNobody
	if f.Prober == holder {
		f.Prober, f.ProbeUntil, announce = "", time.Time{}, tellWatchers
	}
	if _, ok := e.retries[holder]; ok {
		delete(e.retries, holder)
		f.Retries = len(e.retries)
	}
	if _, ok := e.sends[holder]; ok {
		delete(e.sends, holder)
		f.InFlight, announce = e.inFlight(), tellWatchers
	}
	if f == e.f {
		s.mu.Unlock()
		return f, nil
	}
	return s.commit(key, e, f, now, announce)
}

// Watch registers fn for every change.
func (s *Store) Watch(fn func(key string, f store.Facts)) (stop func()) {
	p := &fn
	s.wmu.Lock()
	s.watchers[p] = struct{}{}
	s.wmu.Unlock()
	return func() {
		s.wmu.Lock()
		delete(s.watchers, p)
		s.wmu.Unlock()
	}
}

// making says whether entry makes the entry of a key that has none.
type making bool

const (
	existing making = false // only the entry the key has: nil if none
	orNew    making = true  // the key's entry, made if it has none
)

// entry returns key's entry with its lapsed facts dropped (made if it has
// none and create is orNew, nil otherwise), and sweeps the map when a
// sweep is due. s.mu must be held.
func (s *Store) entry(key string, now time.Time, create making) *memEntry {
	if now.Sub(s.lastSwep) >= SweepEvery {
		s.sweepLocked(now)
	}
	e := s.entries[key]
	if e != nil {
		e.lapse(now)
	} else if create {
		e = &memEntry{}
		s.entries[key] = e
	}
	return e
}

// Sweep forgets the keys whose facts all lapsed at now, and whose Version
// has been kept long enough, as an operation does once per SweepEvery.
func (s *Store) Sweep(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(now)
}

// sweepLocked is Sweep with s.mu held.
func (s *Store) sweepLocked(now time.Time) {
	s.lastSwep = now
	for k, e := range s.entries {
		if e.lapse(now) && now.Sub(e.changed) >= store.VersionHold {
			delete(s.entries, k)
		}
	}
	for r, until := range s.refusals {
		if !now.Before(until) {
			delete(s.refusals, r)
		}
	}
}

// refusal names one record of store.PrefillRefusals: a key and a model.
type refusal struct{ key, model string }

var _ store.PrefillRefusals = (*Store)(nil)

// RefusePrefill records that model, on key, refused a prefill at at,
// until at+ttl (ttl at most store.PrefillHold; nothing if it is not
// positive).
func (s *Store) RefusePrefill(_ context.Context, key, model string, at time.Time, ttl time.Duration) error {
	if ttl <= 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if at.Sub(s.lastSwep) >= SweepEvery {
		s.sweepLocked(at)
	}
	s.refusals[refusal{key, model}] = at.Add(min(ttl, store.PrefillHold))
	return nil
}

// PrefillRefused returns when the record that model, on key, refused a
// prefill lapses, if it is live at now; else the zero time.
func (s *Store) PrefillRefused(_ context.Context, key, model string, now time.Time) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	until, ok := s.refusals[refusal{key, model}]
	if !ok || !now.Before(until) {
		return time.Time{}, nil
	}
	return until, nil
}

// lapse drops e's facts that are no longer live at now, and reports
// whether nothing is left.
func (e *memEntry) lapse(now time.Time) bool {
	f := &e.f
	if !f.Down(now) {
		f.DownSince, f.DownUntil, f.NextProbe, f.Reason = time.Time{}, time.Time{}, time.Time{}, ""
	}
	if !f.Probing(now) {
		f.Prober, f.ProbeUntil = "", time.Time{}
	}
	if !f.Waiting(now) {
		f.WaitUntil = time.Time{}
	}
	for h, until := range e.retries {
		if !now.Before(until) {
			delete(e.retries, h)
		}
	}
	f.Retries = len(e.retries)
	if !f.Paced(now) {
		f.Burst, f.Every, f.Full = 0, 0, time.Time{}
	}
	if !f.Capped(now) {
		f.MaxInFlight, f.Grow, f.CutAt, f.CapUntil = 0, 0, time.Time{}, time.Time{}
	}
	if !f.Taught(now) {
		f.Spacing, f.Floor, f.Next, f.TaughtUntil = 0, 0, time.Time{}, time.Time{}
	}
	for h, until := range e.sends {
		if !now.Before(until) {
			delete(e.sends, h)
		}
	}
	for o, t := range e.tallies {
		if !now.Before(t.until) {
			delete(e.tallies, o)
		}
	}
	f.InFlight = e.inFlight()
	return f.DownSince.IsZero() && f.Prober == "" && f.WaitUntil.IsZero() && f.Retries == 0 &&
		f.Every == 0 && f.MaxInFlight == 0 && f.InFlight == 0 && f.Spacing == 0
}

// telling says whether commit tells the store's watchers of a change.
type telling bool

const (
	tellNobody   telling = false
	tellWatchers telling = true
)

// commit stores f as key's facts if they differ from e's, with a new
// version, unlocks s, and tells the watchers if announce is tellWatchers.
// It returns the facts stored. s.mu must be held; it is released.
func (s *Store) commit(key string, e *memEntry, f store.Facts, now time.Time, announce telling) (store.Facts, error) {
	if f == e.f {
		s.mu.Unlock()
		return f, nil
	}
	f.Version = e.f.Version + 1
	e.f, e.changed = f, now
	s.mu.Unlock()
	if announce {
		s.wmu.Lock()
		fns := make([]func(string, store.Facts), 0, len(s.watchers))
		for p := range s.watchers {
			fns = append(fns, *p)
		}
		s.wmu.Unlock()
		for _, fn := range fns {
			fn(key, f)
		}
	}
	return f, nil
}

// Adopt gives key the facts f — the view a process had when its shared
// store failed — unless the store knows newer ones of its own, and counts
// rest calls in flight (the rest of the fleet's, as last counted) under
// owner's tally until until.
func (s *Store) Adopt(key string, f store.Facts, owner string, rest int, until, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(key, now, existing)
	switch {
	case e == nil || e.lapse(now):
		e = &memEntry{f: f, changed: now}
		s.entries[key] = e
	case e.f.Version < f.Version:
		// Left from an earlier fallback: the view is newer.
		e.f, e.changed = f, now
	}
	if rest > 0 && now.Before(until) {
		if e.tallies == nil {
			e.tallies = map[string]tally{}
		}
		e.tallies[owner] = tally{n: rest, seq: e.tallies[owner].seq, until: until}
	}
	e.f.Retries, e.f.InFlight = len(e.retries), e.inFlight()
}

// Uncount takes one call off owner's tally of key (see Adopt): a call it
// counted ended.
func (s *Store) Uncount(key, owner string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entry(key, now, existing); e != nil {
		if t, ok := e.tallies[owner]; ok && t.n > 0 {
			t.n--
			e.tallies[owner] = t
			e.f.InFlight = e.inFlight()
		}
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Size returns how many keys the store holds.
func (s *Store) Size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}
