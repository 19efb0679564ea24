package coord

import (
	"context"
	"hash/maphash"
	"net/http"
	"sync"
	"time"

	"github.com/llmretry/llmretry/store"
)

// This file is what a Transport remembers of the provider keys and models
// that refused a prefill (llmretry's Policy.ContinueStreams), so that it
// never sends them one again: Refusals in the process, for every
// Transport; and, for a coordinated one, the store too, when it
// implements store.PrefillRefusals, so that every process that shares it
// learns. Only a cut stream's continuation asks: a call that succeeds
// never comes here.

// refusalSeed hashes the credentials in the keys of Refusals that belong
// to no Coordinator: a process's own, never shown.
var refusalSeed = maphash.MakeSeed()

// Refusals is a PrefillMemory in the process: the provider keys (a host
// and a hash of the credential, as a Coordinator keys its calls) and
// models that refused a prefill, each until store.PrefillHold after the
// refusal. It keeps no credential: 64 bits of a per-process seeded hash.
// An entry is dropped when it is read after it lapsed; there is one per
// refusing key and model, which are few.
//
// Its zero value is ready to use, and it is safe for concurrent use. It
// must not be copied after first use.
type Refusals struct {
	m sync.Map // refusalID → time.Time: when the refusal lapses
}

// refusalID is one refusing provider key (route 0: a route is a key of its
// own only in coordination's facts) and model.
type refusalID struct {
	key   keyID
	model string
}

var (
	_ PrefillMemory = (*Refusals)(nil)
	_ PrefillMemory = (*Coordinator)(nil)
)

// RefusesPrefill reports whether req's provider key refused a prefill for
// model, remembered at now.
func (r *Refusals) RefusesPrefill(_ context.Context, req *http.Request, model string, now time.Time) bool {
	return r.refuses(refusalID{keyOf(refusalSeed, req), model}, now)
}

// RefusedPrefill remembers that req's provider key refused a prefill for
// model at now.
func (r *Refusals) RefusedPrefill(_ context.Context, req *http.Request, model string, now time.Time) {
	r.remember(refusalID{keyOf(refusalSeed, req), model}, now.Add(store.PrefillHold))
}

// refuses reports whether id's refusal is remembered at now, forgetting
// it if it lapsed.
func (r *Refusals) refuses(id refusalID, now time.Time) bool {
	v, ok := r.m.Load(id)
	if !ok {
		return false
	}
	if now.Before(v.(time.Time)) {
		return true
	}
	r.m.CompareAndDelete(id, v)
	return false
}

// remember keeps id's refusal until until, or later if it already is.
func (r *Refusals) remember(id refusalID, until time.Time) {
	for {
		v, loaded := r.m.LoadOrStore(id, until)
		if !loaded || !until.After(v.(time.Time)) || r.m.CompareAndSwap(id, v, until) {
			return
		}
	}
}

// RefusesPrefill reports whether req's provider key refused a prefill for
// model, at now: as this process remembers, or else as the store says,
// when it implements store.PrefillRefusals and is not failing (a store's
// answer is then remembered here, lasting no longer than this process
// would have written it). A store's error counts as no refusal: what the
// process remembers decides.
func (co *Coordinator) RefusesPrefill(ctx context.Context, req *http.Request, model string, now time.Time) bool {
	id := refusalID{keyOf(co.seed, req), model}
	if co.refusals.refuses(id, now) {
		return true
	}
	rs := co.prefillStore(id.key, now)
	if rs == nil {
		return false
	}
	until, err := rs.PrefillRefused(context.WithoutCancel(ctx), co.shared.Key(id.key.host, credentialOf(req)), model, now)
	if err != nil || !until.After(now) {
		return false
	}
	if most := now.Add(store.PrefillHold); until.After(most) {
		until = most // longer than any process of the fleet writes
	}
	co.refusals.remember(id, until)
	return true
}

// RefusedPrefill remembers that req's provider key refused a prefill for
// model at now, for store.PrefillHold: in this process, and in the store
// when it implements store.PrefillRefusals and is not failing (its error
// is dropped: the process remembers).
func (co *Coordinator) RefusedPrefill(ctx context.Context, req *http.Request, model string, now time.Time) {
	id := refusalID{keyOf(co.seed, req), model}
	co.refusals.remember(id, now.Add(store.PrefillHold))
	if rs := co.prefillStore(id.key, now); rs != nil {
		_ = rs.RefusePrefill(context.WithoutCancel(ctx), co.shared.Key(id.key.host, credentialOf(req)), model, now, store.PrefillHold)
	}
}

// prefillStore returns the shared store as store.PrefillRefusals, or nil
// if it does not implement it, is the coordinator's own, or is failing at
// now, for every key or for key's calls (see use): the process then
// remembers alone.
func (co *Coordinator) prefillStore(key keyID, now time.Time) store.PrefillRefusals {
	rs, ok := co.shared.(store.PrefillRefusals)
	switch {
	case !ok || co.own:
		return nil // (a store of this coordinator's own knows what it does)
	case now.UnixNano() < co.fallback.Load():
		return nil
	}
	if v, ok := co.keys.Load(key); ok && now.UnixNano() < v.(*keyState).fallback.Load() {
		return nil
	}
	return rs
}
