package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/llmretry/llmretry/store"
	"github.com/stretchr/testify/assert"
)

// ErrUnreachable is found however deep a store wraps it, beside the cause
// (as redisstore does), and its text is the one logs have always shown.
func TestErrUnreachable(t *testing.T) {
	cause := context.DeadlineExceeded
	err := fmt.Errorf("mystore: load: %w", fmt.Errorf("%w: %w", store.ErrUnreachable, cause))
	assert.ErrorIs(t, err, store.ErrUnreachable)
	assert.ErrorIs(t, err, cause)
	assert.False(t, errors.Is(fmt.Errorf("mystore: load: %w", cause), store.ErrUnreachable), "a key's own failure")
	assert.EqualError(t, store.ErrUnreachable, "llmretry: store unreachable")
}

// The zero Evidence says nothing; the zero Report carries it.
func TestZeroEvidenceIsNone(t *testing.T) {
	var r store.Report
	assert.Equal(t, store.NoEvidence, r.Evidence)
	assert.NotEqual(t, store.ProviderUp, store.ProviderDown)
}

// A Version outlives a key's facts by the minute the contract promises.
func TestVersionHold(t *testing.T) {
	assert.Equal(t, time.Minute, store.VersionHold)
}
