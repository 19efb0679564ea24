package llmretry

import (
	"context"
	"time"
)

// keyStats is what a test sees of one key: its local state and its facts
// in the store.
type keyStats struct {
	calls   int32
	waiters int
	view    Facts
	facts   Facts
}

// stats returns the keys this coordinator knows, by the store's name, and
// what its store knows of each at now.
func (co *coordinator) stats(now time.Time) map[string]keyStats {
	out := map[string]keyStats{}
	co.keys.Range(func(_, v any) bool {
		k := v.(*keyState)
		k.mu.Lock()
		st := keyStats{calls: k.calls.Load(), waiters: len(k.waiters), view: k.facts(now)}
		k.mu.Unlock()
		st.facts, _ = co.shared.Load(context.Background(), k.name, now)
		out[k.name] = st
		return true
	})
	return out
}

// storeKeys returns how many keys the in-process store holds.
func (s *memStore) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}
