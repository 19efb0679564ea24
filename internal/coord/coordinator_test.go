package coord

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/internal/memstore"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/llmretry/llmretry/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testCore is what the root gives a Coordinator: llmretry's default
// MaxRetryAfter, and its stream test in its plainest form.
func testCore() Core {
	return Core{
		MaxRetryAfter: 5 * time.Minute,
		IsStream: func(resp *http.Response) bool {
			return resp.StatusCode/100 == 2 && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
		},
	}
}

// newCoordinator is New with cfg and testCore, stopped when the test ends.
func newCoordinator(t testing.TB, cfg coordination.Config) *Coordinator {
	co, stop := New(cfg, testCore())
	t.Cleanup(stop)
	return co
}

// A store error on one key sends that key alone to the in-process
// fallback; one that wraps ErrStoreUnreachable sends every key.
func TestCoordinatedKeyFailsAlone(t *testing.T) {
	for _, wide := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			shared := memstore.New()
			req := func(auth string) *http.Request {
				r, _ := http.NewRequest("POST", "https://api.example.com/v1/chat", nil)
				r.Header.Set("Authorization", auth)
				return r
			}
			// Every Report on one key fails, as it does on a Redis key of
			// the wrong type, or with ErrUnreachable.
			var bad atomic.Pointer[string]
			fs := &testkit.Store{Store: shared, Fail: func(op testkit.Op, key string) error {
				switch {
				case op != testkit.OpReport || bad.Load() == nil || key != *bad.Load():
					return nil
				case wide:
					return fmt.Errorf("test: %w", store.ErrUnreachable)
				}
				return errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")
			}}
			co := newCoordinator(t, coordination.Config{Store: fs, ProbeInterval: time.Second})
			kx, _ := co.enter(req("x"), 0)
			ky, _ := co.enter(req("y"), 0)
			bad.Store(&kx.name)
			now := time.Now()
			co.use(context.Background(), kx, now, func(ctx context.Context, s store.Store) (store.Facts, bool, error) {
				f, err := s.Report(ctx, kx.name, store.Report{At: now, Evidence: store.ProviderDown, DownFor: time.Minute, NextProbe: now})
				return f, true, err
			})
			assert.Same(t, co.local, co.store(kx, now), "the failing key")
			if wide {
				assert.Same(t, co.local, co.store(ky, now), "another key, the store unreachable")
			} else {
				assert.Equal(t, co.shared, co.store(ky, now), "another key")
			}
			time.Sleep(time.Second)
			assert.Equal(t, co.shared, co.store(kx, time.Now()), "a probe interval later")
		})
	}
}

// What a shared store says is read as this process would have written it:
// a lease, a next probe and a down state no further off than its own, and
// a wait longer than any its calls honour as none.
func TestCoordinatedClampsFacts(t *testing.T) {
	co := newCoordinator(t, coordination.Config{ProbeInterval: time.Second})
	now := time.Now()
	far := now.Add(10 * 365 * 24 * time.Hour)
	f := co.clamp(store.Facts{DownSince: far, DownUntil: far, NextProbe: far, Prober: "evil", ProbeUntil: far, WaitUntil: far, Retries: -3}, now)
	assert.Equal(t, now, f.DownSince)
	assert.Equal(t, now.Add(4*time.Second), f.DownUntil)
	assert.Equal(t, now.Add(time.Second), f.NextProbe)
	assert.Equal(t, now.Add(time.Second), f.ProbeUntil)
	assert.True(t, f.WaitUntil.IsZero())
	assert.Zero(t, f.Retries)
	// A wait the calls honour stays.
	w := now.Add(time.Minute)
	assert.Equal(t, w, co.clamp(store.Facts{WaitUntil: w}, now).WaitUntil)
	co.honours(time.Hour)
	w = now.Add(30 * time.Minute)
	assert.Equal(t, w, co.clamp(store.Facts{WaitUntil: w}, now).WaitUntil)
}

// A pace and a limit on calls in flight read from a shared store are
// clamped as this process would have written them: no wait for one request
// longer than any call honours (read as no pace), no full instant beyond
// the longest any of its calls waits for a send, no limit above maxBurst
// (read as none), no cut in the future, no life longer than its own, a
// growth between its two steps, no negative count.
func TestCoordinatedClampsPaceAndLimit(t *testing.T) {
	co := newCoordinator(t, coordination.Config{ProbeInterval: time.Second})
	now := time.Now()
	far := now.Add(10 * 365 * 24 * time.Hour)
	wait := testCore().MaxRetryAfter

	f := co.clamp(store.Facts{Burst: 10, Every: 10 * 365 * 24 * time.Hour, Full: far}, now)
	assert.Zero(t, f.Every, "a pace slower than any call honours is none")
	assert.True(t, f.Full.IsZero())
	f = co.clamp(store.Facts{Burst: 10, Every: time.Second, Full: far}, now)
	assert.Equal(t, now.Add(wait+time.Second), f.Full, "full no further than any call reaches")
	assert.Equal(t, now.Add(2*wait), co.clampSlot(far, now), "a send slot no further than a full instant can be")
	co.reaches(time.Hour)
	f = co.clamp(store.Facts{Burst: 10, Every: time.Second, Full: far}, now)
	assert.Equal(t, now.Add(time.Hour+time.Second), f.Full)
	assert.Equal(t, now.Add(time.Hour+wait), co.clampSlot(far, now))
	assert.Equal(t, now.Add(time.Minute), co.clampSlot(now.Add(time.Minute), now), "a slot within reach stays")
	assert.Zero(t, co.clamp(store.Facts{Burst: -1, Every: time.Second, Full: far}, now).Every, "a negative burst is no pace")
	assert.Zero(t, co.clamp(store.Facts{Burst: maxBurst + 1, Every: time.Second, Full: far}, now).Every)

	f = co.clamp(store.Facts{MaxInFlight: 1 << 40, CapUntil: far, CutAt: far, Grow: time.Nanosecond}, now)
	assert.Zero(t, f.MaxInFlight, "a limit no provider has is none")
	assert.True(t, f.CapUntil.IsZero())
	f = co.clamp(store.Facts{MaxInFlight: 8, CapUntil: far, CutAt: far, Grow: time.Nanosecond, InFlight: -5}, now)
	assert.Equal(t, 8, f.MaxInFlight)
	assert.Equal(t, now, f.CutAt)
	assert.Equal(t, now.Add(capLifeMul*time.Second), f.CapUntil)
	assert.Equal(t, time.Second/5, f.Grow, "no faster than a fifth of a probe interval")
	assert.Zero(t, f.InFlight)
	assert.Equal(t, maxBurst, co.clamp(store.Facts{InFlight: 1 << 40}, now).InFlight, "no count of calls in flight beyond any provider's")
	f = co.clamp(store.Facts{MaxInFlight: 8, CapUntil: now.Add(time.Minute), CutAt: now, Grow: 100 * time.Hour}, now)
	assert.Equal(t, co.growStep(), f.Grow)
	assert.Equal(t, 8, f.Cap(now.Add(co.growStep()-1)))
	assert.Equal(t, 9, f.Cap(now.Add(co.growStep())), "not so slow it never grows")

	co.reaches(math.MaxInt64) // a call whose deadline is centuries off
	assert.Equal(t, far, co.clampSlot(far, now), "no overflow")
}

// takeSend asks co's store for a send lease on k under limit, as the gate
// does, and returns its holder ("" if refused).
func takeSend(co *Coordinator, k *keyState, limit int) string {
	now := time.Now()
	holder := co.holder()
	if !co.use(context.Background(), k, now, func(ctx context.Context, s store.Store) (store.Facts, bool, error) {
		holder = co.leaseName(holder, s)
		f, _, ok, err := s.TakeSend(ctx, k.name, store.Lease{Holder: holder, At: now, Until: now.Add(time.Hour)}, limit)
		return f, ok, err
	}) {
		return ""
	}
	return holder
}

// outageRig returns a coordinator over a shared in-process store that
// fails while down is set (probe interval 1 s), and its key for one
// request; the coordinator stops with t.
func outageRig(t *testing.T) (store.Store, *atomic.Bool, *Coordinator, *keyState) {
	shared := memstore.New()
	down := new(atomic.Bool)
	fs := &testkit.Store{Store: shared, Fail: func(op testkit.Op, _ string) error {
		// Every operation fails while down, as a Redis store's do when
		// they overrun their Timeout (but the probe's and the budget's,
		// which these tests do not ask).
		if op != testkit.OpTakeProbe && op != testkit.OpTakeRetry && down.Load() {
			return fmt.Errorf("test: %w", store.ErrUnreachable)
		}
		return nil
	}}
	co, stop := New(coordination.Config{Store: fs, ProbeInterval: time.Second}, testCore())
	t.Cleanup(stop)
	req, err := http.NewRequest("POST", "https://api.example.com/v1/chat", nil)
	require.NoError(t, err)
	k, _ := co.enter(req, 0)
	return shared, down, co, k
}

// A lease is ended at the store that granted it: one the shared store
// granted, ended while that store fails, is ended there when it answers
// again (not left to hold a slot of the fleet's limit until its end); one
// the in-process fallback granted is ended in the fallback, after the
// shared store is back.
func TestCoordinatedFallbackEndsLeasesWhereGranted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		shared, down, co, k := outageRig(t)
		inFlight := func(s store.Store) int {
			f, err := s.Load(ctx, k.name, time.Now())
			require.NoError(t, err)
			return f.InFlight
		}

		sharedLease := takeSend(co, k, 4)
		require.NotEmpty(t, sharedLease)
		require.Equal(t, 1, inFlight(shared))

		down.Store(true)
		co.let(ctx, k, sharedLease, time.Now()) // fails over to the fallback
		require.Same(t, co.local, co.store(k, time.Now()))
		fallbackLease := takeSend(co, k, 4)
		require.NotEmpty(t, fallbackLease)
		assert.Equal(t, 1, inFlight(co.local), "the fallback's own lease (the one ended is no longer counted)")
		assert.Equal(t, 1, inFlight(shared), "the shared store still counts the lease ended while it failed")

		down.Store(false)
		time.Sleep(time.Second) // the fallback lasts a probe interval
		require.Same(t, co.shared, co.store(k, time.Now()))
		co.let(ctx, k, fallbackLease, time.Now())
		assert.Zero(t, inFlight(co.local), "the fallback's lease, ended in the fallback")
		co.use(ctx, k, time.Now(), func(ctx context.Context, s store.Store) (store.Facts, bool, error) {
			f, err := s.Load(ctx, k.name, time.Now())
			return f, true, err
		})
		assert.Zero(t, inFlight(shared), "the owed lease, ended at the shared store's first answer")
	})
}

// A process whose shared store fails while its key is limited on calls in
// flight counts the rest of the fleet's calls as last heard in its
// fallback (not zero), so that alone it sends only the room they left;
// when the store answers again, its view is the store's, whatever the
// fallback numbered its versions.
func TestCoordinatedFallbackCountsTheFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		shared, down, co, k := outageRig(t)
		now := time.Now()
		// Another process has 3 calls in flight; a 429 cut the limit to 4.
		_, err := shared.Report(ctx, k.name, store.Report{At: now, Owner: "other", Unleased: 3, Seq: 1,
			TallyUntil: now.Add(time.Minute), Cut: true, CapUntil: now.Add(time.Minute)})
		require.NoError(t, err)
		_, _, _, err = shared.TakeSend(ctx, k.name, store.Lease{Holder: "other-1", At: now, Until: now.Add(time.Hour)}, 4)
		require.NoError(t, err)
		co.use(ctx, k, now, func(ctx context.Context, s store.Store) (store.Facts, bool, error) {
			f, err := s.Load(ctx, k.name, now)
			return f, true, err
		})
		require.Equal(t, 4, k.facts(now).InFlight)
		limit := k.facts(now).Cap(now)
		require.Equal(t, 3, limit, "cut to the 3 in flight then")

		down.Store(true)
		assert.Empty(t, takeSend(co, k, limit), "no room: the fleet's 4 calls are counted in the fallback")
		require.Same(t, co.local, co.store(k, time.Now()))
		assert.NotEmpty(t, takeSend(co, k, limit+2), "room for one more than the fleet's 4")
		assert.Empty(t, takeSend(co, k, limit+2))
		assert.True(t, k.view.Load().fallback)

		down.Store(false)
		time.Sleep(time.Second)
		co.use(ctx, k, time.Now(), func(ctx context.Context, s store.Store) (store.Facts, bool, error) {
			f, err := s.Load(ctx, k.name, time.Now())
			return f, true, err
		})
		v := k.view.Load()
		assert.False(t, v.fallback, "the shared store's facts replace the fallback's")
		assert.Equal(t, 4, v.InFlight, "as the shared store counts")
	})
}

// A view whose facts all lapsed is quiet again once a call reads it: the
// key's next calls take the success path (no lock, no clock, no store
// call). (Through a Transport: TestCoordinatedDownLapses.)
func TestLapsedViewIsQuietAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		co := newCoordinator(t, coordination.Config{})
		ctx := context.Background()
		req := mustRequest(t, ctx)
		attempt(t, co, req, 0, HealthDown)
		cc := co.join(req, testPolicy{}, 0)
		defer cc.Leave()
		assert.False(t, cc.k.quiet(), "down")
		time.Sleep(time.Hour)
		assert.False(t, cc.k.quiet(), "lapsed, not read since")
		probe, err := cc.Admit(ctx, Admission{N: 1})
		require.NoError(t, err)
		assert.False(t, probe)
		assert.True(t, cc.k.quiet(), "read: quiet again")
	})
}

// An hour of silence after an outage on ten keys: the first call on a new
// key sweeps the keys no call uses whose facts lapsed, at once (an outage
// past costs its key one rebuild), here and in the Coordinator's own
// store. (Through a Transport: TestCoordinatedSilenceLeavesNothing.)
func TestSweepAfterSilence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		co := newCoordinator(t, coordination.Config{})
		ctx := context.Background()
		withKey := func(key string) *http.Request {
			req := mustRequest(t, ctx)
			req.Header.Set("Authorization", "Bearer "+key)
			return req
		}
		for i := range 10 {
			attempt(t, co, withKey("key-"+strconv.Itoa(i)), 0, HealthDown)
		}
		require.Len(t, co.Stats(time.Now()), 10)
		require.Equal(t, 10, co.StoreKeys())

		time.Sleep(time.Hour)
		cc := co.join(withKey("a-new-key"), testPolicy{}, 0)
		st := co.Stats(time.Now())
		require.Len(t, st, 1, "only the key just used: %v", st)
		for _, k := range st {
			assert.Equal(t, KeyStats{Calls: 1, Quiet: true}, k)
		}
		assert.Zero(t, co.StoreKeys(), "the store forgot every key")
		cc.Leave()
	})
}
