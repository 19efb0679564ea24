package testkit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/llmretry/llmretry/internal/memstore"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/llmretry/llmretry/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Store that misbehaves in no way passes every operation on, counting
// each by kind and telling After.
func TestStoreCountsAndPasses(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	var seen []string
	s := &testkit.Store{Store: memstore.New(), After: func(op testkit.Op, key string, err error) {
		seen = append(seen, op.String()+" "+key)
	}}
	f, err := s.Report(ctx, "k", store.Report{At: now, Evidence: store.ProviderDown, DownFor: time.Minute, NextProbe: now})
	require.NoError(t, err)
	assert.True(t, f.Down(now))
	_, ok, err := s.TakeProbe(ctx, "k", store.Lease{Holder: "h", At: now, Until: now.Add(time.Second)})
	require.NoError(t, err)
	assert.True(t, ok)
	_, ok, err = s.TakeRetry(ctx, "k", store.Lease{Holder: "r", At: now, Until: now.Add(time.Second)}, 1)
	require.NoError(t, err)
	assert.True(t, ok)
	_, _, ok, err = s.TakeSend(ctx, "k", store.Lease{Holder: "s", At: now, Until: now.Add(time.Second)}, 0)
	require.NoError(t, err)
	assert.True(t, ok)
	_, err = s.Release(ctx, "k", "h", now)
	require.NoError(t, err)
	f, err = s.Load(ctx, "k", now)
	require.NoError(t, err)
	assert.NotZero(t, f.Version)
	assert.Equal(t, int64(6), s.Calls())
	assert.Equal(t, int64(1), s.Calls(testkit.OpLoad))
	assert.Equal(t, int64(2), s.Calls(testkit.OpTakeProbe, testkit.OpRelease))
	assert.Equal(t, []string{"Report k", "TakeProbe k", "TakeRetry k", "TakeSend k", "Release k", "Load k"}, seen)
	assert.Equal(t, "unknown", testkit.Op(99).String())
}

// Fail fails the operations it chooses without reaching the wrapped
// store; the failure is counted and told to After.
func TestStoreFails(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	inner := memstore.New()
	var failed []error
	s := &testkit.Store{Store: inner,
		Fail: func(op testkit.Op, key string) error {
			if op == testkit.OpReport && key == "bad" {
				return store.ErrUnreachable
			}
			return nil
		},
		After: func(_ testkit.Op, _ string, err error) { failed = append(failed, err) },
	}
	_, err := s.Report(ctx, "bad", store.Report{At: now, Evidence: store.ProviderDown, DownFor: time.Minute})
	assert.ErrorIs(t, err, store.ErrUnreachable)
	f, err := inner.Load(ctx, "bad", now)
	require.NoError(t, err)
	assert.Zero(t, f.Version, "never reached the wrapped store")
	_, err = s.Report(ctx, "good", store.Report{At: now, Evidence: store.ProviderDown, DownFor: time.Minute})
	assert.NoError(t, err)
	assert.Equal(t, int64(2), s.Calls(testkit.OpReport))
	assert.Equal(t, []error{store.ErrUnreachable, nil}, failed)
}

// A Forgetful store's answers and notices say Version 0.
func TestStoreForgetful(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	s := &testkit.Store{Store: memstore.New(), Forgetful: true}
	var mu sync.Mutex
	var notices []uint64
	defer s.Watch(func(_ string, f store.Facts) {
		mu.Lock()
		defer mu.Unlock()
		notices = append(notices, f.Version)
	})()
	f, err := s.Report(ctx, "k", store.Report{At: now, Evidence: store.ProviderDown, DownFor: time.Minute})
	require.NoError(t, err)
	assert.Zero(t, f.Version)
	assert.True(t, f.Down(now), "the facts themselves are kept")
	f, err = s.Load(ctx, "k", now)
	require.NoError(t, err)
	assert.Zero(t, f.Version)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []uint64{0}, notices)
}

// A Liar refuses every probe lease with facts that say the key is down,
// nobody probes and the probe is due, each time under a new version.
func TestStoreLiar(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	s := &testkit.Store{Store: memstore.New(), Liar: true}
	l := store.Lease{Holder: "h", At: now, Until: now.Add(time.Second)}
	f1, ok, err := s.TakeProbe(ctx, "k", l)
	require.NoError(t, err)
	assert.False(t, ok)
	assert.True(t, f1.Down(now))
	assert.False(t, f1.Probing(now))
	assert.False(t, f1.NextProbe.After(now), "due")
	f2, _, _ := s.TakeProbe(ctx, "k", l)
	assert.Greater(t, f2.Version, f1.Version)
	assert.Equal(t, int64(2), s.Calls(testkit.OpTakeProbe))
}

// A Deaf store hears no notice until Reconnect, which tells each watcher
// that notices may have been lost (an empty key), and no more.
func TestStoreDeaf(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	s := &testkit.Store{Store: memstore.New(), Deaf: true}
	var keys []string
	stop := s.Watch(func(key string, _ store.Facts) { keys = append(keys, key) })
	defer stop()
	_, err := s.Report(ctx, "k", store.Report{At: now, Evidence: store.ProviderDown, DownFor: time.Minute})
	require.NoError(t, err)
	assert.Empty(t, keys, "deaf")
	s.Reconnect()
	assert.Equal(t, []string{""}, keys)
	_, err = s.Report(ctx, "k", store.Report{At: now, Evidence: store.ProviderUp})
	require.NoError(t, err)
	assert.Equal(t, []string{""}, keys, "still deaf")
}
