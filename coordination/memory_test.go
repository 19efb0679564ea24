package coordination_test

import (
	"context"
	"testing"
	"time"

	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each NewMemoryStore is an empty store of its own: it knows no key, and
// its names hash credentials under a seed of its own; what one store is
// told, another does not know. (Its contract: internal/memstore's
// TestStoreContract, storetest.Run.)
func TestNewMemoryStore(t *testing.T) {
	ctx := context.Background()
	a, b := coordination.NewMemoryStore(), coordination.NewMemoryStore()
	cred := []byte("Authorization\x00Bearer sk-1\x00")
	assert.Regexp(t, `^api\.example\.com#[0-9a-f]{8}$`, a.Key("api.example.com", cred))
	assert.NotEqual(t, a.Key("api.example.com", cred), b.Key("api.example.com", cred))
	now := time.Now()
	f, err := a.Load(ctx, "api.example.com", now)
	require.NoError(t, err)
	assert.Equal(t, store.Facts{}, f, "empty")
	_, err = a.Report(ctx, "api.example.com", store.Report{At: now, Evidence: store.ProviderDown, DownFor: time.Minute, NextProbe: now.Add(time.Second), Reason: "502 Bad Gateway"})
	require.NoError(t, err)
	f, err = a.Load(ctx, "api.example.com", now)
	require.NoError(t, err)
	assert.True(t, f.Down(now))
	f, err = b.Load(ctx, "api.example.com", now)
	require.NoError(t, err)
	assert.False(t, f.Down(now), "another store's")
}
