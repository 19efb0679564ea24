package coord

import (
	"context"
	"time"

	"github.com/llmretry/llmretry/internal/memstore"
	"github.com/llmretry/llmretry/store"
)

// KeyStats is what this process and its store hold of one provider key:
// what the engine's own tests check (its counters show nothing a
// Transport's user can see), and what a reader debugging a Coordinator
// looks at.
type KeyStats struct {
	Calls    int32       // calls inside RoundTrip
	Unleased int32       // attempts in flight without a send lease
	Waiters  int         // calls held at the gate
	Woken    int64       // held calls woken, ever
	Quiet    bool        // no live fact as the key last knew: its calls take the success path
	Facts    store.Facts // what the store holds of the key at the time asked
}

// Stats returns the keys co knows, by the store's name, with what its
// store holds of each at now. It takes each key's lock in turn.
func (co *Coordinator) Stats(now time.Time) map[string]KeyStats {
	out := map[string]KeyStats{}
	co.keys.Range(func(_, v any) bool {
		k := v.(*keyState)
		k.mu.Lock()
		st := KeyStats{Calls: k.calls.load(), Unleased: k.unleasedIn.load(), Waiters: len(k.waiters), Woken: k.woken.Load(), Quiet: k.quiet()}
		k.mu.Unlock()
		st.Facts, _ = co.shared.Load(context.Background(), k.name, now)
		out[k.name] = st
		return true
	})
	return out
}

// Sweep forgets the keys nobody uses, as a call's arrival does once per
// sweepEvery (see maybeSweep).
func (co *Coordinator) Sweep(now time.Time) { co.maybeSweep(now) }

// StoreKeys returns how many keys co's own in-process store holds, or -1
// if its store is shared (coordination.Config.Store).
func (co *Coordinator) StoreKeys() int {
	if ms, ok := co.shared.(*memstore.Store); ok && co.own {
		return ms.Size()
	}
	return -1
}
