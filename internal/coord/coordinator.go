package coord

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"hash/maphash"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/internal/memstore"
	"github.com/llmretry/llmretry/store"
)

// Coordinator is the coordination layer of a Transport made by
// llmretry.NewCoordinated: the provider keys its calls use, each with a
// local view of the key's facts (fed by the store's answers and notices)
// and the calls held on it. The core knows it only through the seam
// (seam.go): it is the Transport's Gatekeepers, and each call's Call
// (gate.go), which Join makes, is that call's Gatekeeper.
//
// Its map of keys is read without a lock on every call; a key's view is an
// atomic pointer, so a call to a quiet key takes no lock and makes no
// store call. Keys are forgotten by a sweep, at most once per sweepEvery.
//
// A Coordinator is safe for concurrent use. Its zero value is not usable:
// New makes one, and returns the function that stops it.
type Coordinator struct {
	cfg   coordination.Config // the user's, its defaults filled in (see resolve)
	core  Core
	seed  maphash.Seed
	owner string        // this coordinator's part of lease holders' names
	seq   atomic.Uint64 // the rest of them

	shared   store.Store     // cfg.Store, or the in-process store
	local    *memstore.Store // the fallback while shared fails; nil if shared is in-process
	fallback atomic.Int64    // until when (Unix ns) the fallback is used for every key
	maxWait  atomic.Int64    // the longest server wait its calls' policies honour (ns)
	horizon  atomic.Int64    // the longest time its calls may wait for a send (ns)
	own      bool            // the store is this coordinator's own: its counts are the whole fleet's

	keys      sync.Map     // keyID → *keyState
	names     sync.Map     // the store's key name → *keyState, for notices
	lastSweep atomic.Int64 // Unix ns

	// Notices of keys this process does not use yet, kept while their
	// facts are live (at most maxUnknown of them), so that its first call
	// to such a key knows what the fleet knows without a store call.
	umu     sync.Mutex
	unknown map[string]store.Facts

	refusals Refusals // the prefills refused, as this process knows them (prefill.go)
}

// maxUnknown bounds the notices kept for keys this process does not use.
const maxUnknown = 4096

// sweepEvery is how often, at most, the coordinator looks for keys to
// forget: the in-process store's, so that both forget a key at once.
const sweepEvery = memstore.SweepEvery

// downFor is how long a failure keeps a key down, in probe intervals: the
// down state lapses that long after the last failure that confirmed it
// (while calls are held, probes keep confirming it).
const downFor = 3

// New returns a Coordinator for the user's c (its zero fields read as
// their defaults, see resolve) over the core's core, and the function
// that stops its subscription to the store's notices. c must be valid
// (coordination.Config.Validate): the root's NewCoordinated checks it.
func New(c coordination.Config, core Core) (*Coordinator, func()) {
	co := &Coordinator{cfg: resolve(c), core: core, seed: maphash.MakeSeed(), owner: randomName()}
	if c.Store == nil {
		co.shared, co.own = memstore.New(), true
	} else {
		co.shared = c.Store
		co.local = memstore.New()
	}
	stop := co.shared.Watch(co.notice)
	if co.local == nil {
		return co, stop
	}
	stopLocal := co.local.Watch(co.noticeFallback)
	return co, func() { stop(); stopLocal() }
}

// The defaults of coordination.Config's zero fields, as its field docs
// state them.
const (
	defaultProbeInterval = 5 * time.Second
	defaultReleaseSpread = time.Second
	defaultRetryBudget   = 0.2 // Envoy's
	defaultMinRetries    = 3
)

// resolve returns c with its zero fields set to their defaults.
func resolve(c coordination.Config) coordination.Config {
	if c.ProbeInterval == 0 {
		c.ProbeInterval = defaultProbeInterval
	}
	if c.ReleaseSpread == 0 {
		c.ReleaseSpread = defaultReleaseSpread
	}
	if c.RetryBudget == 0 {
		c.RetryBudget = defaultRetryBudget
	}
	if c.MinRetries == 0 {
		c.MinRetries = defaultMinRetries
	}
	return c
}

// randomName returns 8 random bytes in hex.
func randomName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// holder returns a name for a new lease, unique among every coordinator
// that shares a store.
func (co *Coordinator) holder() string {
	return co.owner + "-" + strconv.FormatUint(co.seq.Add(1), 36)
}

// keyState is what this process knows of one provider key.
type keyState struct {
	// Read by every call: apart from what calls write, so that the reads
	// do not miss on their cache line.
	id   keyID
	name string               // the store's name for it
	view atomic.Pointer[view] // the latest facts learnt; nil: none yet
	mark atomic.Bool          // idle at the last sweep
	read atomic.Int64         // when (Unix ns) a shared store last told of the key
	_    [64]byte

	fallback atomic.Int64 // until when (Unix ns) the key uses the in-process fallback

	calls inflight // calls inside RoundTrip; closed once swept
	// Attempts in flight (sent, no result yet) without a send lease; never
	// closed. Those under a lease are not counted here: an attempt is
	// counted in one place from its start, so that the count never reads
	// high while an attempt takes its lease (a high count told to the
	// store raised the limit on calls in flight above the provider's).
	unleasedIn inflight
	cost       atomic.Int64  // tokens one request is known to take (0: unknown)
	tallied    atomic.Int64  // the count of unleased attempts last told to the store; -1: tell the next
	counts     atomic.Uint64 // how many counts of them were taken to tell the store (tallyInto)
	tmu        sync.Mutex    // orders the counts told to the store (tallyInto)
	woken      atomic.Int64  // held calls woken, ever: what a change costs

	// After the shared store failed for the key: fellBack says the key
	// used the in-process fallback since it last used the shared store;
	// owed holds the shared store's leases ended meanwhile, to end there
	// when it answers again (see let).
	fellBack atomic.Bool
	omu      sync.Mutex
	owed     []owedLease

	mu      sync.Mutex // guards waiters and cand
	waiters []*waiter  // calls held at the gate
	cand    *waiter    // of those, the one that probes next
}

// view is the facts of a key as this process last learnt them.
type view struct {
	store.Facts
	at       time.Time // when they were learnt
	busy     bool      // a fact was live then
	fallback bool      // they came from the in-process fallback
}

// source says which store facts came from: the shared one (or the
// in-process store of a Transport without coordination.Config.Store), or the
// in-process fallback used while the shared one fails.
type source int8

const (
	fromShared source = iota
	fromFallback
)

// live reports whether any of f's facts is live at now.
func live(f store.Facts, now time.Time) bool {
	return f.Down(now) || f.Probing(now) || f.Waiting(now) || f.Retries > 0 ||
		f.Paced(now) || f.Capped(now) || f.InFlight > 0 || f.Taught(now)
}

// facts returns the key's facts as this process knows them at now: the
// zero Facts when it knows of none still live. A view whose facts have all
// lapsed is marked quiet, so that the key's next call takes the success
// path again.
func (k *keyState) facts(now time.Time) store.Facts {
	v := k.view.Load()
	if v == nil || !v.busy {
		return store.Facts{}
	}
	if !live(v.Facts, now) {
		k.view.CompareAndSwap(v, &view{Facts: v.Facts, at: v.at})
		return store.Facts{}
	}
	return v.Facts
}

// quiet reports whether the key has no fact this process knows of, without
// reading the clock: the success path's test.
func (k *keyState) quiet() bool {
	v := k.view.Load()
	return v == nil || !v.busy
}

// learn takes f, from src, as the key's facts if they are newer than the
// view (or the view is older than store.VersionHold, when its store may
// have started the key's versions again), and reports whether the view
// changed. The shared store's facts replace the fallback's whatever their
// versions: the two stores number their versions apart.
func (k *keyState) learn(f store.Facts, now time.Time, src source) bool {
	for {
		old := k.view.Load()
		newer := old == nil || f.Version > old.Version || now.Sub(old.at) >= store.VersionHold ||
			old.fallback && src == fromShared
		if old != nil && (f == old.Facts && old.fallback == (src == fromFallback) || !newer) {
			return false
		}
		if k.view.CompareAndSwap(old, &view{Facts: f, at: now, busy: live(f, now), fallback: src == fromFallback}) {
			return true
		}
	}
}

// enter registers a call to req's key on route (see keyID) and returns
// the key and the stripe of its count the call is on. A call to a key
// already known allocates nothing.
func (co *Coordinator) enter(req *http.Request, route int) (*keyState, int) {
	id := keyOf(co.seed, req)
	id.route = route
	for {
		var k *keyState
		if v, ok := co.keys.Load(id); ok {
			k = v.(*keyState)
		} else {
			k = co.insert(id, req)
		}
		if stripe, ok := k.calls.enter(); ok {
			if k.mark.Load() {
				k.mark.Store(false)
			}
			return k, stripe
		}
		// Swept between the look-up and the count: look again.
	}
}

// insert adds the key id of req, naming it first (outside any lock), and
// returns the key as the map then holds it.
func (co *Coordinator) insert(id keyID, req *http.Request) *keyState {
	k := &keyState{id: id, name: nameOf(co.shared, id, req)}
	now := time.Now()
	k.read.Store(now.UnixNano()) // what notices told of it is as good as a read
	v, loaded := co.keys.LoadOrStore(id, k)
	if !loaded {
		co.names.Store(k.name, k)
		if f, ok := co.noticed(k.name, now); ok {
			co.learnt(k, co.clamp(f, now), now, fromShared)
		}
		co.maybeSweep(now)
	}
	return v.(*keyState)
}

// maybeSweep forgets, if no sweep ran for sweepEvery, the keys that no call
// uses and nobody waits on: at once if the facts they knew are over (an
// outage past costs its key one rebuild), else if they were idle at the
// previous sweep too.
func (co *Coordinator) maybeSweep(now time.Time) {
	last := co.lastSweep.Load()
	if now.UnixNano()-last < int64(sweepEvery) || !co.lastSweep.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	co.sweep(now)
}

// sweep is maybeSweep's work, done now; the in-process stores sweep too.
func (co *Coordinator) sweep(now time.Time) {
	for _, s := range [...]store.Store{co.shared, co.local} {
		if ms, ok := s.(*memstore.Store); ok && ms != nil {
			ms.Sweep(now)
		}
	}
	co.umu.Lock()
	for n, f := range co.unknown {
		if !live(f, now) {
			delete(co.unknown, n)
		}
	}
	co.umu.Unlock()
	co.keys.Range(func(id, v any) bool {
		k := v.(*keyState)
		if k.calls.load() != 0 || k.held() {
			k.mark.Store(false)
			return true
		}
		vw := k.view.Load()
		switch {
		case vw != nil && live(vw.Facts, now):
			k.mark.Store(false)
			return true
		case vw == nil && !k.mark.Load():
			k.mark.Store(true) // never knew a fact: forgotten if still idle next time
			return true
		}
		if k.calls.close() {
			co.keys.CompareAndDelete(id, k)
			co.names.CompareAndDelete(k.name, k)
		}
		return true
	})
}

// notice is the store's Watch callback: a key's facts changed.
func (co *Coordinator) notice(name string, f store.Facts) {
	if name == "" {
		co.resync()
		return
	}
	now := time.Now()
	f = co.clamp(f, now)
	if v, ok := co.names.Load(name); ok {
		k := v.(*keyState)
		k.read.Store(now.UnixNano())
		co.learnt(k, f, now, fromShared)
		return
	}
	// Not a key this process uses: keep what is live, for its first call.
	if !live(f, now) {
		return
	}
	co.umu.Lock()
	defer co.umu.Unlock()
	if co.unknown == nil {
		co.unknown = map[string]store.Facts{}
	}
	if old, ok := co.unknown[name]; ok && old.Version >= f.Version {
		return
	}
	if len(co.unknown) >= maxUnknown {
		for n, g := range co.unknown {
			if !live(g, now) || len(co.unknown) >= maxUnknown {
				delete(co.unknown, n)
			}
		}
	}
	co.unknown[name] = f
}

// noticeFallback is the in-process fallback's Watch callback: facts of a
// key this process used it for.
func (co *Coordinator) noticeFallback(name string, f store.Facts) {
	if v, ok := co.names.Load(name); ok && name != "" {
		now := time.Now()
		co.learnt(v.(*keyState), co.clamp(f, now), now, fromFallback)
	}
}

// noticed returns, and forgets, the live facts a notice told of the key
// name before this process used it.
func (co *Coordinator) noticed(name string, now time.Time) (store.Facts, bool) {
	co.umu.Lock()
	defer co.umu.Unlock()
	f, ok := co.unknown[name]
	delete(co.unknown, name)
	return f, ok && live(f, now)
}

// learnt takes f, from src, as k's facts and wakes the calls held on k
// that the change concerns: all of them when the key is free, else the one
// that probes next.
func (co *Coordinator) learnt(k *keyState, f store.Facts, now time.Time, src source) {
	was := k.view.Load()
	if !k.learn(f, now, src) {
		return
	}
	free := !f.Down(now) && !f.Waiting(now)
	capped := f.Capped(now)
	k.mu.Lock()
	defer k.mu.Unlock()
	if free {
		// Calls waiting for room under a limit on calls in flight are
		// woken by room (below), not by every change.
		n := 0
		for _, w := range k.waiters {
			if w.gate != gateInFlight || !capped {
				w.signal()
				n++
			}
		}
		k.woken.Add(int64(n))
		if capped && was != nil && f.InFlight < was.InFlight {
			// Send leases ended (here or elsewhere): room for as many.
			k.wakeRoomLocked(was.InFlight - f.InFlight)
		}
		return
	}
	if k.cand != nil {
		k.cand.signal()
		k.woken.Add(1)
	}
}

// store returns the store to use for k at now: the shared one, or the
// fallback while the shared one fails for k or for every key.
func (co *Coordinator) store(k *keyState, now time.Time) store.Store {
	if co.local != nil && (now.UnixNano() < co.fallback.Load() || now.UnixNano() < k.fallback.Load()) {
		return co.local
	}
	return co.shared
}

// use runs op on k's store, and again on the in-process fallback if the
// shared store fails, which is then used for a probe interval: for k
// alone, or for every key if the store is unreachable. The facts op
// returns are learnt, clamped (see clamp). The store is called with ctx's
// values but never its cancellation: a lease must be released even after
// the caller gave up. It reports what op did; on the fallback, op always
// succeeds.
//
// A key that used the fallback is made whole at its next success on the
// shared store: the leases ended meanwhile are ended there too, and the
// count of its attempts in flight without a lease is told again.
func (co *Coordinator) use(ctx context.Context, k *keyState, now time.Time, op func(context.Context, store.Store) (store.Facts, bool, error)) bool {
	ctx = context.WithoutCancel(ctx)
	s := co.store(k, now)
	f, ok, err := op(ctx, s)
	src := fromShared
	switch {
	case err != nil && s != co.local && co.local != nil:
		until := now.Add(co.cfg.ProbeInterval).UnixNano()
		if errors.Is(err, store.ErrUnreachable) {
			co.fallback.Store(until)
		} else {
			k.fallback.Store(until)
		}
		co.fallBack(ctx, k, now)
		f, ok, err = op(ctx, co.local)
		src = fromFallback
		k.read.Store(unread) // notices may be missed meanwhile: read it again after
	case s == co.local && co.local != nil:
		src = fromFallback
	case err == nil && co.local != nil:
		k.read.Store(time.Now().UnixNano())
	}
	if err != nil {
		return false // the in-process store does not fail
	}
	co.learnt(k, co.clamp(f, now), now, src)
	if src == fromShared && k.fellBack.Load() && k.fellBack.CompareAndSwap(true, false) {
		co.restore(ctx, k, now)
	}
	return ok
}

// fallBack readies the in-process fallback for k, whose shared store just
// failed: it takes the key's facts as this process last learnt them, with
// the rest of the fleet's calls in flight as last counted (they go on,
// unheard of, until the shared store answers again or the count lapses),
// and this process's own count.
func (co *Coordinator) fallBack(ctx context.Context, k *keyState, now time.Time) {
	k.fellBack.Store(true)
	f := k.facts(now)
	rest := 0
	if v := k.view.Load(); v != nil && !v.fallback {
		// The shared store's count includes this process's tally as last
		// told; its attempts under the shared store's leases stay in it.
		rest = max(0, f.InFlight-int(k.tallied.Load()))
	}
	co.local.Adopt(k.name, f, fleetOwner, rest, now.Add(capLifeMul*co.cfg.ProbeInterval), now)
	if k.unleased() > 0 && f.Capped(now) {
		r := store.Report{At: now}
		co.tallyInto(k, &r, now)
		_, _ = co.local.Report(ctx, k.name, r) // learnt by its notice
	}
}

// fleetOwner is the owner of the tally the in-process fallback keeps for
// the rest of the fleet (see fallBack): no process's name.
const fleetOwner = "fleet"

// restore makes the shared store whole after k used the fallback: it ends
// there the leases ended meanwhile (a lease this fails to end lapses at
// its end) and tells it this process's count of attempts in flight
// without a lease.
func (co *Coordinator) restore(ctx context.Context, k *keyState, now time.Time) {
	k.omu.Lock()
	owed := k.owed
	k.owed = nil
	k.omu.Unlock()
	for _, o := range owed {
		if now.Sub(o.at) >= retryLease {
			continue // lapsed
		}
		if _, err := co.shared.Release(ctx, k.name, o.holder, now); err != nil {
			break // failing again: the rest lapse at their ends
		}
	}
	if k.tallied.Load() != 0 || k.facts(now).Capped(now) {
		k.tallied.Store(-1)
		co.tally(ctx, k, now)
	}
}

// owedLease is a lease of the shared store ended while the store failed.
type owedLease struct {
	holder string
	at     time.Time // when it was ended
}

// maxOwed bounds a key's owed leases; beyond it the oldest are left to
// lapse at their ends.
const maxOwed = 256

// localMark ends the name of a lease the in-process fallback granted, so
// that it is ended there (see let).
const localMark = "~fallback"

// leaseName returns the name holder asks s for a lease under.
func (co *Coordinator) leaseName(holder string, s store.Store) string {
	if co.local != nil && s == co.local {
		return holder + localMark
	}
	return holder
}

// let ends the lease holder holds on k at the store that granted it. A
// lease of the shared store ended while that store fails is owed: ended
// there when it answers again (see restore).
func (co *Coordinator) let(ctx context.Context, k *keyState, holder string, now time.Time) {
	if co.local != nil && strings.HasSuffix(holder, localMark) && co.store(k, now) != co.local {
		_, _ = co.local.Release(context.WithoutCancel(ctx), k.name, holder, now)
		return
	}
	co.use(ctx, k, now, func(ctx context.Context, s store.Store) (store.Facts, bool, error) {
		if s == co.local && co.local != nil && !strings.HasSuffix(holder, localMark) {
			// The fallback counts the lease among the fleet's calls.
			k.owe(holder, now)
			co.local.Uncount(k.name, fleetOwner, now)
		}
		f, err := s.Release(ctx, k.name, holder, now)
		return f, true, err
	})
}

// owe notes that the shared store's lease holder ended at now, while the
// store failed.
func (k *keyState) owe(holder string, now time.Time) {
	k.omu.Lock()
	defer k.omu.Unlock()
	if len(k.owed) >= maxOwed {
		k.owed = k.owed[1:]
	}
	k.owed = append(k.owed, owedLease{holder: holder, at: now})
}

// unread marks in keyState.read a key whose notices may have been lost:
// its next call reads it from the store.
const unread = -1

// resync marks every key this process uses as unread: the shared store
// says notices may have been lost (its subscription was made again).
func (co *Coordinator) resync() {
	co.names.Range(func(_, v any) bool {
		v.(*keyState).read.Store(unread)
		return true
	})
}

// stale reports whether a quiet key must be read from the store before
// its call goes: only after the store said notices may have been lost
// (see resync), so a quiet key's calls make no store call otherwise.
func (co *Coordinator) stale(k *keyState) bool {
	return co.local != nil && k.read.Load() == unread
}

// refresh reads k from the store if it is stale: once per probe interval
// per key, by whichever call comes first.
func (co *Coordinator) refresh(ctx context.Context, k *keyState) {
	if co.local == nil {
		return
	}
	now := time.Now()
	last := k.read.Load()
	if now.UnixNano()-last < int64(co.cfg.ProbeInterval) || co.store(k, now) != co.shared || !k.read.CompareAndSwap(last, now.UnixNano()) {
		return // read lately, or in-process for now: read when the store is back
	}
	co.use(ctx, k, now, func(ctx context.Context, s store.Store) (store.Facts, bool, error) {
		f, err := s.Load(ctx, k.name, now)
		return f, true, err
	})
}

// honours notes that a call's policy honours server waits up to d.
func (co *Coordinator) honours(d time.Duration) {
	for {
		old := co.maxWait.Load()
		if int64(d) <= old || co.maxWait.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

// clamp returns f as this process would itself have written it at now: no
// probe lease or next probe more than a probe interval off, no down state
// beyond its lapse rule (and a lease's), no down since in the future, and
// no server wait longer than any its calls honour (at least
// Config.MaxRetryAfter), which is read as none; a pace, a limit on calls in
// flight and a lesson within what this process writes. What a store holds that
// no process of the fleet wrote (a forged notice, a rewritten record)
// then holds calls no longer than the fleet's own facts could; what is
// read again once it is gone leaves no trace.
func (co *Coordinator) clamp(f store.Facts, now time.Time) store.Facts {
	iv := co.cfg.ProbeInterval
	if lim := now.Add(iv); f.ProbeUntil.After(lim) {
		f.ProbeUntil = lim
	}
	if lim := now.Add(iv); f.NextProbe.After(lim) {
		f.NextProbe = lim
	}
	if lim := now.Add((downFor + 1) * iv); f.DownUntil.After(lim) {
		f.DownUntil = lim
	}
	if f.DownSince.After(now) {
		f.DownSince = now
	}
	if f.WaitUntil.Sub(now) > max(time.Duration(co.maxWait.Load()), co.core.MaxRetryAfter) {
		f.WaitUntil = time.Time{}
	}
	f.Retries = max(f.Retries, 0)
	// A pace: no wait for one request longer than any call honours, no
	// bucket beyond maxBurst, no full instant beyond the longest any call
	// of this process waits for a send.
	wait := max(time.Duration(co.maxWait.Load()), co.core.MaxRetryAfter)
	if f.Every <= 0 || f.Every > wait || f.Burst <= 0 || f.Burst > maxBurst {
		f.Burst, f.Every, f.Full = 0, 0, time.Time{}
	} else if lim := now.Add(max(time.Duration(co.horizon.Load()), wait) + f.Every); f.Full.After(lim) {
		f.Full = lim
	}
	// A limit on calls in flight: none above maxBurst, no cut in the
	// future, no life longer than this process gives one.
	if f.MaxInFlight <= 0 || f.MaxInFlight > maxBurst {
		f.MaxInFlight, f.Grow, f.CutAt, f.CapUntil = 0, 0, time.Time{}, time.Time{}
	} else {
		f.Grow = min(max(f.Grow, co.cfg.ProbeInterval/5), co.growStep())
		if f.CutAt.After(now) {
			f.CutAt = now
		}
		if lim := now.Add(capLifeMul * iv); f.CapUntil.After(lim) {
			f.CapUntil = lim
		}
	}
	f.InFlight = min(max(f.InFlight, 0), maxBurst)
	// A lesson: no spacing or floor longer than any call honours a wait,
	// no next send beyond the longest any call of this process waits for
	// one, no life longer than a send that far off gives it.
	reach := max(time.Duration(co.horizon.Load()), wait)
	if f.Spacing <= 0 || f.Spacing > wait || f.Floor < 0 || f.Floor > wait {
		f.Spacing, f.Floor, f.Next, f.TaughtUntil = 0, 0, time.Time{}, time.Time{}
	} else {
		if lim := now.Add(reach + f.Spacing); f.Next.After(lim) {
			f.Next = lim
		}
		if lim := now.Add(reach + store.LessonHold); f.TaughtUntil.After(lim) {
			f.TaughtUntil = lim
		}
	}
	return f
}

// clampSlot returns a send slot a store gave at now (TakeSend's) no
// further off than the facts this process reads could put it (see clamp):
// a pace's full instant or a lesson's next send is at most the longest any
// of its calls waits for a send, and one request's wait, from now.
func (co *Coordinator) clampSlot(slot, now time.Time) time.Time {
	wait := max(time.Duration(co.maxWait.Load()), co.core.MaxRetryAfter)
	reach := max(time.Duration(co.horizon.Load()), wait)
	d := reach + wait
	if d < reach {
		d = math.MaxInt64 // a horizon as long as a Duration: no overflow
	}
	if lim := now.Add(d); slot.After(lim) {
		return lim
	}
	return slot
}

// A limit on calls in flight grows by one each growMul probe intervals
// (30 s by default), and lapses capLifeMul probe intervals (a minute)
// after the last 429 that cut it; a process's tally of its unleased calls
// lapses as long after its last count.
const (
	growMul    = 6
	capLifeMul = 12
)

// growStep is how long a limit on calls in flight takes to grow by one.
// Growing back is how a limit the provider raised is found again: each
// step past the provider's limit costs one 429, which cuts it back.
func (co *Coordinator) growStep() time.Duration {
	return growMul * co.cfg.ProbeInterval
}

// tallyInto fills r with this process's tally of k at now: its attempts
// in flight without a send lease, as its next count.
func (co *Coordinator) tallyInto(k *keyState, r *store.Report, now time.Time) {
	// The count and its number are taken together, so that a later count
	// never carries an earlier number (a count read low a moment ago, sent
	// after a higher one, would read as a rise).
	k.tmu.Lock()
	n := k.unleased()
	r.Owner, r.Unleased, r.Seq = co.owner, n, co.seq.Add(1)
	// With the count, so that an attempt that ends after it reads the
	// count that held it (tally, Call.Report).
	k.tallied.Store(int64(n))
	k.counts.Add(1)
	k.tmu.Unlock()
	r.TallyUntil = now.Add(capLifeMul * co.cfg.ProbeInterval)
}

// tally brings the store's count of k's attempts this process has in
// flight without a send lease up to date, if the key is limited (or was
// told a count) and the count changed. The count matters only while a
// limit is live, and only attempts sent before it was learnt have no
// lease: a store call per such attempt, at most.
func (co *Coordinator) tally(ctx context.Context, k *keyState, now time.Time) {
	n := int64(k.unleased())
	told := k.tallied.Load()
	switch {
	case told < 0:
		// Told to another store last (see restore): tell this one.
	case told == 0 && (n == 0 || !k.facts(now).Capped(now)):
		return
	case told > 0 && n >= told:
		// Only a fall is told after the first count: a count read high
		// for a moment must not read as more calls in flight (which
		// raises the limit).
		return
	}
	var r store.Report
	r.At = now
	co.tallyInto(k, &r, now)
	co.use(ctx, k, now, func(ctx context.Context, s store.Store) (store.Facts, bool, error) {
		f, err := s.Report(ctx, k.name, r)
		return f, true, err
	})
}

// nextGrowth returns when the key's limit on calls in flight grows next
// (the zero time if it does not).
func nextGrowth(f store.Facts, now time.Time) time.Time {
	if f.Grow <= 0 || now.Before(f.CutAt) {
		return time.Time{}
	}
	return f.CutAt.Add((now.Sub(f.CutAt)/f.Grow + 1) * f.Grow)
}

// reaches notes that a call may wait up to d for a send.
func (co *Coordinator) reaches(d time.Duration) {
	for {
		old := co.horizon.Load()
		if int64(d) <= old || co.horizon.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

// probeGap returns the time until the next probe: ProbeInterval, less a
// random 0–20 %.
func (co *Coordinator) probeGap() time.Duration {
	iv := co.cfg.ProbeInterval
	return iv - randN(iv/5+1)
}

// budget returns how many retries on calls' own schedules a key with
// calls in flight allows at once; 0 when the budget is off.
func (co *Coordinator) budget(calls int32) int {
	if co.cfg.RetryBudget >= 1 {
		return 0
	}
	return max(co.cfg.MinRetries, int(co.cfg.RetryBudget*float64(calls)))
}
