package coord

import (
	"context"
	"testing"
	"time"

	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/internal/memstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Stats shows a key in use with its call and a quiet view; once the call
// left and a sweep found it idle twice, the key is gone, here and in the
// Coordinator's own store; a shared store's keys are not counted.
func TestStats(t *testing.T) {
	co := newCoordinator(t, coordination.Config{})
	req := mustRequest(t, context.Background())
	cc := co.join(req, testPolicy{}, 0)
	st := co.Stats(time.Now())
	require.Contains(t, st, "api.example.com")
	assert.Equal(t, KeyStats{Calls: 1, Quiet: true}, st["api.example.com"])
	assert.Zero(t, co.StoreKeys(), "nothing written to the store")
	cc.Leave()
	now := time.Now()
	co.Sweep(now.Add(sweepEvery))     // idle, and never knew a fact: marked
	co.Sweep(now.Add(2 * sweepEvery)) // still idle: forgotten
	assert.Empty(t, co.Stats(now))

	shared, stopShared := New(coordination.Config{Store: memstore.New()}, testCore())
	defer stopShared()
	assert.Equal(t, -1, shared.StoreKeys())
}
