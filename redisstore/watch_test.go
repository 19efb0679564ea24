package redisstore_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/llmretry/llmretry/redisstore"
	"github.com/llmretry/llmretry/store"
)

// A notice reaches a Store's watchers one after the other, in the order
// they were added, every time: a watcher added after a Transport's hears
// of a change only once the Transport has taken it in (before, map order:
// TestDeadClusterMaster's own watcher could run first, and the test send
// before its Transport knew).
func TestWatchOrder(t *testing.T) {
	m := miniredis.RunT(t)
	c := newClient(t, m.Addr())
	a := newStore(t, c, redisstore.Options{Timeout: roomyTimeout})
	b := newStore(t, c, redisstore.Options{Timeout: roomyTimeout})
	const watchers, notices = 8, 10
	var mu sync.Mutex
	heard := map[string][]int{}
	done := make(chan struct{}, notices)
	for i := range watchers {
		stop := b.Watch(func(k string, _ store.Facts) {
			if k == "" {
				return
			}
			mu.Lock()
			heard[k] = append(heard[k], i)
			last := len(heard[k]) == watchers
			mu.Unlock()
			if last {
				done <- struct{}{}
			}
		})
		defer stop()
	}
	now := time.Now()
	for n := range notices {
		name := "host.test:" + string(rune('a'+n))
		if _, err := a.Report(context.Background(), name, store.Report{At: now, Evidence: store.ProviderDown, Reason: "502", DownFor: time.Minute, NextProbe: now}); err != nil {
			t.Fatal(err)
		}
	}
	for range notices {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("a notice did not reach every watcher")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []int{0, 1, 2, 3, 4, 5, 6, 7}
	for k, order := range heard {
		if !slices.Equal(order, want) {
			t.Errorf("%s reached the watchers in the order %v, want %v", k, order, want)
		}
	}
}
