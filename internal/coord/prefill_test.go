package coord

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/internal/memstore"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/llmretry/llmretry/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refusalStore is the in-process store, shared as a fleet's would be,
// whose store.PrefillRefusals counts its calls and the names it is given,
// and can fail or answer a lapse no process writes.
type refusalStore struct {
	*memstore.Store
	mu     sync.Mutex
	marks  int
	reads  int
	names  []string
	err    error     // each call's, when set
	forged time.Time // PrefillRefused's answer, when set
}

func (s *refusalStore) RefusePrefill(ctx context.Context, key, model string, at time.Time, ttl time.Duration) error {
	s.mu.Lock()
	s.marks++
	s.names = append(s.names, key)
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.Store.RefusePrefill(ctx, key, model, at, ttl)
}

func (s *refusalStore) PrefillRefused(ctx context.Context, key, model string, now time.Time) (time.Time, error) {
	s.mu.Lock()
	s.reads++
	s.names = append(s.names, key)
	err, forged := s.err, s.forged
	s.mu.Unlock()
	switch {
	case err != nil:
		return time.Time{}, err
	case !forged.IsZero():
		return forged, nil
	}
	return s.Store.PrefillRefused(ctx, key, model, now)
}

// calls returns how many times each method was called.
func (s *refusalStore) calls() (marks, reads int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.marks, s.reads
}

// keyed returns a request to host carrying credential.
func keyed(t *testing.T, host, credential string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "https://"+host+"/v1/chat/completions", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+credential)
	return req
}

// A Transport's own memory of refused prefills, ready at its zero value:
// per provider key (host and credential) and model, until PrefillHold
// after the refusal.
func TestRefusalsInProcess(t *testing.T) {
	ctx, now := context.Background(), time.Now()
	var r Refusals
	a := keyed(t, "api.example.com", "sk-A")
	r.RefusedPrefill(ctx, a, "m", now)
	for _, tc := range []struct {
		name string
		req  *http.Request
		at   time.Duration
		want bool
	}{
		{"the same key and model", keyed(t, "api.example.com", "sk-A"), 0, true},
		{"the same host in other case", keyed(t, "API.example.com", "sk-A"), 0, true},
		{"just before it lapses", a, store.PrefillHold - time.Nanosecond, true},
		{"once it lapsed", a, store.PrefillHold, false},
		{"another credential", keyed(t, "api.example.com", "sk-B"), 0, false},
		{"another host", keyed(t, "api.example.net", "sk-A"), 0, false},
	} {
		assert.Equal(t, tc.want, r.RefusesPrefill(ctx, tc.req, "m", now.Add(tc.at)), tc.name)
	}
	r.RefusedPrefill(ctx, a, "m", now)
	assert.False(t, r.RefusesPrefill(ctx, a, "m-other", now), "another model")
	r.m.Range(func(k, _ any) bool {
		assert.NotContains(t, k.(refusalID).key.host, "sk-A", "no credential kept")
		return true
	})
}

// Coordinated, a refusal goes to the store, under the store's name of the
// provider key (no credential), and every process that shares it learns
// it: once read, a process remembers it and does not ask again. A store
// that does not implement store.PrefillRefusals, or a coordinator's own,
// is never asked: the process remembers alone.
func TestCoordinatorSharesRefusals(t *testing.T) {
	ctx, now := context.Background(), time.Now()
	shared := &refusalStore{Store: memstore.New()}
	one, stop1 := New(coordination.Config{Store: shared}, testCore())
	defer stop1()
	two, stop2 := New(coordination.Config{Store: shared}, testCore())
	defer stop2()
	req := keyed(t, "api.example.com", "sk-SECRET")

	assert.False(t, two.RefusesPrefill(ctx, req, "m", now))
	one.RefusedPrefill(ctx, req, "m", now)
	assert.True(t, one.RefusesPrefill(ctx, req, "m", now), "remembered in the process")
	marks, reads := shared.calls()
	assert.Equal(t, 1, marks)
	assert.Equal(t, 1, reads, "the process that met it asks the store no more")

	assert.True(t, two.RefusesPrefill(ctx, keyed(t, "api.example.com", "sk-SECRET"), "m", now.Add(time.Hour)), "the other process learns it")
	assert.True(t, two.RefusesPrefill(ctx, req, "m", now.Add(2*time.Hour)))
	assert.False(t, two.RefusesPrefill(ctx, req, "m-other", now.Add(2*time.Hour)))
	_, reads = shared.calls()
	assert.Equal(t, 3, reads, "once learnt, remembered: one read for it, one for the other model")
	assert.False(t, two.RefusesPrefill(ctx, req, "m", now.Add(store.PrefillHold)), "lapsed in the store too")
	for _, name := range shared.names {
		assert.NotContains(t, name, "sk-SECRET")
		assert.Equal(t, shared.Key("api.example.com", credentialOf(req)), name, "the store's name of the key")
	}

	// A Store without the optional interface, and a coordinator's own.
	plain := &testkit.Store{Store: memstore.New()}
	three, stop3 := New(coordination.Config{Store: plain}, testCore())
	defer stop3()
	own, stop4 := New(coordination.Config{}, testCore())
	defer stop4()
	for _, co := range []*Coordinator{three, own} {
		assert.False(t, co.RefusesPrefill(ctx, req, "m", now))
		co.RefusedPrefill(ctx, req, "m", now)
		assert.True(t, co.RefusesPrefill(ctx, req, "m", now))
	}
	assert.Zero(t, plain.Calls(), "the refusals made no store call")
}

// What the store says is trusted no further than this process would have
// written it: a refusal lasting past PrefillHold from now is remembered
// that long. A store's failure fails nothing: the process remembers what
// it met, and knows nothing of the others' until the store answers; while
// the store fails for every key, it is not asked.
func TestCoordinatorRefusalsFromAnUntrustedStore(t *testing.T) {
	ctx, now := context.Background(), time.Now()
	req := keyed(t, "api.example.com", "sk-A")
	t.Run("forged", func(t *testing.T) {
		shared := &refusalStore{Store: memstore.New(), forged: now.Add(100 * store.PrefillHold)}
		co := newCoordinator(t, coordination.Config{Store: shared})
		assert.True(t, co.RefusesPrefill(ctx, req, "m", now))
		shared.mu.Lock()
		shared.forged, shared.err = time.Time{}, errors.New("redis: connection refused")
		shared.mu.Unlock()
		assert.True(t, co.RefusesPrefill(ctx, req, "m", now.Add(store.PrefillHold-time.Second)), "remembered")
		assert.False(t, co.RefusesPrefill(ctx, req, "m", now.Add(store.PrefillHold)), "no longer than PrefillHold")
	})
	t.Run("failing", func(t *testing.T) {
		shared := &refusalStore{Store: memstore.New(), err: errors.New("redis: i/o timeout")}
		co := newCoordinator(t, coordination.Config{Store: shared})
		assert.False(t, co.RefusesPrefill(ctx, req, "m", now))
		co.RefusedPrefill(ctx, req, "m", now)
		assert.True(t, co.RefusesPrefill(ctx, req, "m", now), "the process remembers")
		marks, reads := shared.calls()
		assert.Equal(t, 1, marks)
		assert.Equal(t, 1, reads)

		co.fallback.Store(now.Add(time.Minute).UnixNano()) // the store is unreachable
		other := keyed(t, "api.example.com", "sk-B")
		assert.False(t, co.RefusesPrefill(ctx, other, "m", now))
		co.RefusedPrefill(ctx, other, "m", now)
		marks, reads = shared.calls()
		assert.Equal(t, 1, marks, "not asked while it is unreachable")
		assert.Equal(t, 1, reads)
		assert.True(t, co.RefusesPrefill(ctx, other, "m", now))
	})
}
