package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/llmretry/llmretry/internal/memstore"
	"github.com/llmretry/llmretry/store"
	"github.com/llmretry/llmretry/store/storetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The in-process store keeps the Store contract (the Redis store runs the
// same checks in redisstore/).
func TestStoreContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) []store.Store {
		s := memstore.New()
		return []store.Store{s, s}
	})
}

// A key's name is its host and 8 hex digits of a hash seeded per store:
// the same for every caller of one store, and another store's differs.
func TestKeyIsSeededPerStore(t *testing.T) {
	a, b := memstore.New(), memstore.New()
	cred := []byte("Authorization\x00Bearer sk-1\x00")
	assert.Regexp(t, `^api\.example\.com#[0-9a-f]{8}$`, a.Key("api.example.com", cred))
	assert.Equal(t, a.Key("api.example.com", cred), a.Key("api.example.com", cred))
	assert.NotEqual(t, a.Key("api.example.com", cred), b.Key("api.example.com", cred), "another store's seed")
	assert.Equal(t, "api.example.com", a.Key("api.example.com", nil), "no credential: the host alone")
}

// Adopt takes a process's last view of a key (unless the store knows newer
// facts of its own) and counts the rest of the fleet's calls in flight
// under one owner's tally, which Uncount lowers by one; Sweep forgets a key
// whose facts all lapsed, and Size counts the keys held.
func TestAdoptUncountSweep(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	now := time.Now()
	view := store.Facts{Version: 7, DownSince: now, DownUntil: now.Add(time.Minute), Reason: "502 Bad Gateway"}
	s.Adopt("k", view, "fleet", 3, now.Add(time.Minute), now)
	f, err := s.Load(ctx, "k", now)
	require.NoError(t, err)
	assert.Equal(t, uint64(7), f.Version)
	assert.True(t, f.Down(now))
	assert.Equal(t, 3, f.InFlight, "the rest of the fleet's calls")
	s.Uncount("k", "fleet", now)
	f, err = s.Load(ctx, "k", now)
	require.NoError(t, err)
	assert.Equal(t, 2, f.InFlight, "one of them ended")

	older := view
	older.Version, older.Reason = 3, "older"
	s.Adopt("k", older, "fleet", 0, now, now)
	f, err = s.Load(ctx, "k", now)
	require.NoError(t, err)
	assert.Equal(t, "502 Bad Gateway", f.Reason, "the store's newer facts stay")

	assert.Equal(t, 1, s.Size())
	later := now.Add(time.Hour)
	s.Sweep(later)
	assert.Zero(t, s.Size(), "every fact lapsed and the version was kept long enough")
}
