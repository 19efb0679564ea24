package llmretry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// keyStats is what a test sees of one key: its local state and its facts
// in the store.
type keyStats struct {
	calls   int32
	waiters int
	facts   store.Facts
}

// stats returns the keys this coordinator knows, by the store's name, and
// what its store knows of each at now.
func (co *coordinator) stats(now time.Time) map[string]keyStats {
	out := map[string]keyStats{}
	co.keys.Range(func(_, v any) bool {
		k := v.(*keyState)
		k.mu.Lock()
		st := keyStats{calls: k.calls.load(), waiters: len(k.waiters)}
		k.mu.Unlock()
		st.facts, _ = co.shared.Load(context.Background(), k.name, now)
		out[k.name] = st
		return true
	})
	return out
}

// liveHeap returns the heap in use as of the latest garbage collection,
// without forcing one (runtime.GC inside a synctest bubble trips Go
// 1.26.8's race detector).
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// size returns how many keys the in-process store holds.
func (s *memStore) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// A down state lapses: one 502 that nobody probed (its call could not
// wait), an hour of silence, then 50 calls with 30-s deadlines: every one
// goes straight out and answers.
func TestCoordinatedDownLapses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(fail(502), 20*time.Millisecond, window{0, 200 * time.Millisecond})
		var h holds
		rt, err := NewCoordinated(p, Policy{Reserve: time.Minute, OnHold: h.on}, Coordination{})
		require.NoError(t, err)
		// 30 s of deadline, 60 s of reserve: no retry fits, the 502 is
		// returned and the key is down with nobody to probe it.
		r := callMany(t, rt, p.start, 1, 0, 30*time.Second, nil)
		require.Error(t, r[0].err)
		require.True(t, coordOf(rt).stats(time.Now())["api.example.com"].facts.Down(time.Now()))

		time.Sleep(time.Hour)
		start := time.Now()
		results := callMany(t, rt, p.start, 50, 0, 30*time.Second, nil)
		for i, r := range results {
			assert.NoError(t, r.err, "call %d", i)
		}
		for _, a := range p.arrivals()[1:] {
			assert.Equal(t, start.Sub(p.start), a, "sent at once, not held")
		}
		assert.Empty(t, h.all, "nobody was held")
		var k *keyState
		coordOf(rt).keys.Range(func(_, v any) bool { k = v.(*keyState); return false })
		assert.True(t, k.quiet(), "the lapsed view is quiet again: the next call takes the success path")
	})
}

// An hour of silence after an outage leaves nothing behind: no key, no
// lease, no hold, here or in the store; a call then goes straight out.
func TestCoordinatedSilenceLeavesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(fail(502), time.Second, window{0, 20 * time.Second})
		rt, err := NewCoordinated(p, Policy{Waits: hostWaits, Reserve: time.Minute}, Coordination{})
		require.NoError(t, err)
		results := callMany(t, rt, p.start, 30, 100*time.Millisecond, 8*time.Minute, func(i int, req *http.Request) {
			req.Header.Set("Authorization", "Bearer key-"+strconv.Itoa(i%10))
		})
		for _, r := range results {
			require.NoError(t, r.err)
		}
		require.Len(t, coordOf(rt).stats(time.Now()), 10, "ten keys in use")

		time.Sleep(time.Hour)
		start := time.Now()
		n := len(p.arrivals())
		results = callMany(t, rt, p.start, 1, 0, time.Minute, func(_ int, req *http.Request) {
			req.Header.Set("Authorization", "Bearer a-new-key")
		})
		require.NoError(t, results[0].err)
		assert.Equal(t, start.Sub(p.start), p.arrivals()[n], "straight out")
		st := coordOf(rt).stats(time.Now())
		assert.Len(t, st, 1, "only the key just used: %v", st)
		for name, k := range st {
			assert.Zero(t, k.calls, name)
			assert.Zero(t, k.waiters, name)
			assert.Equal(t, store.Facts{}, k.facts, name)
		}
		assert.Zero(t, coordOf(rt).shared.(*memStore).size(), "the store forgot every key")
	})
}

// Memory is bounded by the keys in use, not the keys ever used: rounds of
// 10,000 one-off credentials (one key per API key ever seen), each of which
// saw a 502 or a 429 with Retry-After: 2, are forgotten once their facts
// lapse, and the heap comes back to where it was. (The calls of a round go
// in batches of 100: Go 1.26.8 with -race crashes in synctest bubbles
// where hundreds of goroutines select on timers firing at one instant;
// Go 1.27.3 does not.)
func TestCoordinatedForgetsOneOffKeys(t *testing.T) {
	const perRound, batch = 10000, 100
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		seen := map[string]bool{}
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			key := req.Header.Get("Authorization")
			mu.Lock()
			first := !seen[key]
			seen[key] = true
			mu.Unlock()
			h := http.Header{}
			status := 200
			switch {
			case first && strings.HasSuffix(key, "0"):
				status = 502
			case first:
				status = 429
				h.Set("Retry-After", "2")
			}
			return &http.Response{StatusCode: status, Header: h, Body: http.NoBody, Request: req}, nil
		})
		rt, err := NewCoordinated(base, Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second}, Coordination{ProbeInterval: time.Second})
		require.NoError(t, err)
		var heaps []uint64
		for round := range 4 {
			mu.Lock()
			seen = map[string]bool{} // the provider's own memory is not the point
			mu.Unlock()
			for b := range perRound / batch {
				results := callMany(t, rt, time.Now(), batch, 0, time.Minute, func(i int, req *http.Request) {
					req.Header.Set("Authorization", "Bearer round-"+strconv.Itoa(round)+"-"+strconv.Itoa(b*batch+i))
				})
				for _, r := range results {
					require.NoError(t, r.err)
				}
			}
			time.Sleep(time.Hour)
			coordOf(rt).maybeSweep(time.Now())
			assert.Zero(t, coordOf(rt).shared.(*memStore).size(), "round %d: the store kept keys", round)
			left := len(coordOf(rt).stats(time.Now()))
			assert.LessOrEqual(t, left, perRound, "round %d: at most the last round's quiet keys, marked to go", round)
			time.Sleep(sweepEvery)
			coordOf(rt).maybeSweep(time.Now())
			assert.Empty(t, coordOf(rt).stats(time.Now()), "round %d: every key forgotten", round)
			heaps = append(heaps, liveHeap())
		}
		t.Logf("live heap after each round (as of the latest GC): %v", heaps)
		assert.Less(t, heaps[3], 2*heaps[0]+1<<20, "the heap does not grow with the keys ever used")
	})
}

// Two Transports sharing a store are two processes of a fleet: a 429
// Retry-After: 5 that one of them receives holds the first call the other
// makes to the key, though it never used the key before.
func TestCoordinatedSharedStoreHoldsAColdTransport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(fail(429, "Retry-After", "5"), 0, window{0, time.Nanosecond})
		st := NewMemoryStore()
		a, err := NewCoordinated(p, Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second}, Coordination{Store: st})
		require.NoError(t, err)
		b, err := NewCoordinated(p, Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second}, Coordination{Store: st})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- callMany(t, a, p.start, 1, 0, time.Minute, nil)[0].err }()
		synctest.Wait() // a's call got the 429 and is held until 5 s
		r := callMany(t, b, p.start, 1, 0, time.Minute, nil)
		require.NoError(t, r[0].err)
		require.NoError(t, <-done)
		at := p.arrivals()
		require.Len(t, at, 3)
		for _, x := range at[1:] {
			assert.GreaterOrEqual(t, x, 5*time.Second, "nothing before the shared wait ends: %v", at)
		}
	})
}

// forgetfulStore is a store that has lost its versions: every answer and
// notice says Version 0, as a store restarted empty may.
type forgetfulStore struct {
	store.Store
	probes int
	mu     sync.Mutex
}

func (s *forgetfulStore) Report(ctx context.Context, key string, r store.Report) (store.Facts, error) {
	f, err := s.Store.Report(ctx, key, r)
	f.Version = 0
	return f, err
}

func (s *forgetfulStore) Watch(fn func(string, store.Facts)) func() {
	return s.Store.Watch(func(key string, f store.Facts) {
		f.Version = 0
		fn(key, f)
	})
}

func (s *forgetfulStore) Load(ctx context.Context, key string, now time.Time) (store.Facts, error) {
	f, err := s.Store.Load(ctx, key, now)
	f.Version = 0
	return f, err
}

func (s *forgetfulStore) Release(ctx context.Context, key, holder string, now time.Time) (store.Facts, error) {
	f, err := s.Store.Release(ctx, key, holder, now)
	f.Version = 0
	return f, err
}

func (s *forgetfulStore) TakeProbe(ctx context.Context, key string, l store.Lease) (store.Facts, bool, error) {
	s.mu.Lock()
	s.probes++
	s.mu.Unlock()
	f, ok, err := s.Store.TakeProbe(ctx, key, l)
	f.Version = 0
	return f, ok, err
}

// A held call whose store answers refuse the probe with facts the view will
// not take (no newer than its own) does not spin: it asks again at the
// next re-check, and gives up at its deadline minus its reserve.
func TestCoordinatedNoSpinOnStaleAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(fail(502), 0, window{0, time.Hour})
		st := &forgetfulStore{Store: NewMemoryStore()}
		rt, err := NewCoordinated(p, Policy{Reserve: 10 * time.Millisecond}, Coordination{Store: st, ProbeInterval: 200 * time.Millisecond})
		require.NoError(t, err)
		// One call takes the probe and hangs on to it (never reported
		// within the test); another is refused the lease over and over.
		results := callMany(t, rt, p.start, 2, 0, 500*time.Millisecond, nil)
		for _, r := range results {
			require.Error(t, r.err)
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		t.Logf("probes asked: %d, arrivals %v", st.probes, p.arrivals())
		assert.Less(t, st.probes, 50, "asked for the probe lease %d times in 500 ms", st.probes)
	})
}

// liarStore refuses every probe lease with facts that say the key is down,
// nobody probes and the probe is due, under a new version each time: a
// store whose records no process of the fleet wrote.
type liarStore struct {
	store.Store
	mu     sync.Mutex
	probes int
	v      uint64
}

func (s *liarStore) TakeProbe(_ context.Context, _ string, l store.Lease) (store.Facts, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.probes++
	s.v++
	return store.Facts{Version: 1e6 + s.v, DownSince: l.At.Add(-time.Second), DownUntil: l.At.Add(time.Hour), NextProbe: l.At.Add(-time.Millisecond)}, false, nil
}

// A refused lease whose answer contradicts itself never spins, and every
// turn of the gate checks the call's limits: the call ends at its deadline
// minus its reserve (before: it asked for the lease in a loop that never
// read the clock, past its deadline).
func TestCoordinatedRefusedLeaseNeverSpins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(fail(502), 0, window{0, time.Hour})
		st := &liarStore{Store: NewMemoryStore()}
		rt, err := NewCoordinated(p, Policy{Reserve: 10 * time.Millisecond}, Coordination{Store: st, ProbeInterval: 200 * time.Millisecond})
		require.NoError(t, err)
		start := time.Now()
		results := callMany(t, rt, p.start, 3, 0, time.Second, nil)
		for _, r := range results {
			require.Error(t, r.err)
		}
		assert.LessOrEqual(t, time.Since(start), time.Second)
		st.mu.Lock()
		defer st.mu.Unlock()
		assert.LessOrEqual(t, st.probes, 3*5*5+3, "asked for the probe lease %d times in 1 s (5 probe intervals)", st.probes)
	})
}

// keyFailStore fails every operation on one key, as a Redis key of the
// wrong type would, or every key with ErrStoreUnreachable.
type keyFailStore struct {
	store.Store
	bad  string
	wide bool
}

func (s *keyFailStore) Report(ctx context.Context, key string, r store.Report) (store.Facts, error) {
	if key == s.bad {
		if s.wide {
			return store.Facts{}, fmt.Errorf("test: %w", store.ErrUnreachable)
		}
		return store.Facts{}, errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")
	}
	return s.Store.Report(ctx, key, r)
}

// A store error on one key sends that key alone to the in-process
// fallback; one that wraps ErrStoreUnreachable sends every key.
func TestCoordinatedKeyFailsAlone(t *testing.T) {
	for _, wide := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			shared := NewMemoryStore()
			req := func(auth string) *http.Request {
				r, _ := http.NewRequest("POST", "https://api.example.com/v1/chat", nil)
				r.Header.Set("Authorization", auth)
				return r
			}
			fs := &keyFailStore{Store: shared, wide: wide}
			co, stop := newCoordinator(Coordination{Store: fs, ProbeInterval: time.Second}.resolved())
			defer stop()
			kx, _ := co.enter(req("x"))
			ky, _ := co.enter(req("y"))
			fs.bad = kx.name
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
	co, stop := newCoordinator(Coordination{ProbeInterval: time.Second}.resolved())
	defer stop()
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
	co, stop := newCoordinator(Coordination{ProbeInterval: time.Second}.resolved())
	defer stop()
	now := time.Now()
	far := now.Add(10 * 365 * 24 * time.Hour)
	wait := DefaultMaxRetryAfter

	f := co.clamp(store.Facts{Burst: 10, Every: 10 * 365 * 24 * time.Hour, Full: far}, now)
	assert.Zero(t, f.Every, "a pace slower than any call honours is none")
	assert.True(t, f.Full.IsZero())
	f = co.clamp(store.Facts{Burst: 10, Every: time.Second, Full: far}, now)
	assert.Equal(t, now.Add(wait+time.Second), f.Full, "full no further than any call reaches")
	co.reaches(time.Hour)
	f = co.clamp(store.Facts{Burst: 10, Every: time.Second, Full: far}, now)
	assert.Equal(t, now.Add(time.Hour+time.Second), f.Full)
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
}

// deafStore hears no notice (its subscription was silently dropped) until
// reconnect, which says, as a store that made its subscription again says,
// that notices may have been lost.
type deafStore struct {
	store.Store
	mu sync.Mutex
	fn func(string, store.Facts)
}

func (d *deafStore) Watch(fn func(string, store.Facts)) func() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fn = fn
	return func() {}
}

func (d *deafStore) reconnect() {
	d.mu.Lock()
	fn := d.fn
	d.mu.Unlock()
	fn("", store.Facts{})
}

// countingStore counts the loads made through it.
type countingStore struct {
	store.Store
	loads atomic.Int64
}

func (c *countingStore) Load(ctx context.Context, key string, now time.Time) (store.Facts, error) {
	c.loads.Add(1)
	return c.Store.Load(ctx, key, now)
}

// A process whose store says it may have lost notices (its subscription
// was made again after a silent drop) reads each key it uses again on the
// key's next call, so another process's server wait still holds its calls
// (before: a quiet key was never read again); a quiet key otherwise makes
// no store call.
func TestCoordinatedDeafProcessRereads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(fail(429, "Retry-After", "5"), 0, window{time.Second, time.Second + time.Nanosecond})
		st := NewMemoryStore()
		policy := Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second}
		a, err := NewCoordinated(p, policy, Coordination{Store: st, ProbeInterval: time.Second})
		require.NoError(t, err)
		counted := &countingStore{Store: st}
		deaf := &deafStore{Store: counted}
		b, err := NewCoordinated(p, policy, Coordination{Store: deaf, ProbeInterval: time.Second})
		require.NoError(t, err)
		require.NoError(t, callMany(t, b, p.start, 1, 0, time.Minute, nil)[0].err) // b knows the key
		time.Sleep(time.Second)
		done := make(chan error, 1)
		go func() { done <- callMany(t, a, p.start, 1, 0, time.Minute, nil)[0].err }() // 429: wait until 6 s
		synctest.Wait()
		quietLoads := counted.loads.Load()
		time.Sleep(500 * time.Millisecond)
		deaf.reconnect() // b's store found its subscription dead and made it again
		time.Sleep(500 * time.Millisecond)
		require.NoError(t, callMany(t, b, p.start, 1, 0, time.Minute, nil)[0].err)
		require.NoError(t, <-done)
		at := p.arrivals()
		require.Len(t, at, 4)
		for _, x := range at[2:] {
			assert.GreaterOrEqual(t, x, 6*time.Second, "nothing before the shared wait ends: %v", at)
		}
		assert.Zero(t, quietLoads, "a quiet key's call made no store call")
		assert.Positive(t, counted.loads.Load(), "after the reconnect the key was read again")
	})
}

// A quiet key's calls read nothing from a shared store, however long the
// process runs: the success path makes no store call.
func TestCoordinatedQuietKeyMakesNoStoreCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(fail(502), 0)
		counted := &countingStore{Store: NewMemoryStore()}
		rt, err := NewCoordinated(p, Policy{}, Coordination{Store: counted, ProbeInterval: time.Second})
		require.NoError(t, err)
		for range 60 {
			require.NoError(t, callMany(t, rt, p.start, 1, 0, time.Minute, nil)[0].err)
			time.Sleep(time.Second) // a probe interval between calls
		}
		assert.Zero(t, counted.loads.Load())
	})
}

// outageStore fails every operation with ErrStoreUnreachable while down,
// as a Redis store does when its calls overrun their Timeout.
type outageStore struct {
	store.Store
	down atomic.Bool
}

func (s *outageStore) fail() error {
	if s.down.Load() {
		return fmt.Errorf("test: %w", store.ErrUnreachable)
	}
	return nil
}

func (s *outageStore) Load(ctx context.Context, key string, now time.Time) (store.Facts, error) {
	if err := s.fail(); err != nil {
		return store.Facts{}, err
	}
	return s.Store.Load(ctx, key, now)
}

func (s *outageStore) Report(ctx context.Context, key string, r store.Report) (store.Facts, error) {
	if err := s.fail(); err != nil {
		return store.Facts{}, err
	}
	return s.Store.Report(ctx, key, r)
}

func (s *outageStore) TakeSend(ctx context.Context, key string, l store.Lease, limit int) (store.Facts, time.Time, bool, error) {
	if err := s.fail(); err != nil {
		return store.Facts{}, time.Time{}, false, err
	}
	return s.Store.TakeSend(ctx, key, l, limit)
}

func (s *outageStore) Release(ctx context.Context, key, holder string, now time.Time) (store.Facts, error) {
	if err := s.fail(); err != nil {
		return store.Facts{}, err
	}
	return s.Store.Release(ctx, key, holder, now)
}

// takeSend asks co's store for a send lease on k under limit, as the gate
// does, and returns its holder ("" if refused).
func takeSend(co *coordinator, k *keyState, limit int) string {
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

// A lease is ended at the store that granted it: one the shared store
// granted, ended while that store fails, is ended there when it answers
// again (not left to hold a slot of the fleet's limit until its end); one
// the in-process fallback granted is ended in the fallback, after the
// shared store is back.
func TestCoordinatedFallbackEndsLeasesWhereGranted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		shared := NewMemoryStore()
		fs := &outageStore{Store: shared}
		co, stop := newCoordinator(Coordination{Store: fs, ProbeInterval: time.Second}.resolved())
		defer stop()
		req, err := http.NewRequest("POST", "https://api.example.com/v1/chat", nil)
		require.NoError(t, err)
		k, _ := co.enter(req)
		inFlight := func(s store.Store) int {
			f, err := s.Load(ctx, k.name, time.Now())
			require.NoError(t, err)
			return f.InFlight
		}

		sharedLease := takeSend(co, k, 4)
		require.NotEmpty(t, sharedLease)
		require.Equal(t, 1, inFlight(shared))

		fs.down.Store(true)
		co.let(ctx, k, sharedLease, time.Now()) // fails over to the fallback
		require.Same(t, co.local, co.store(k, time.Now()))
		fallbackLease := takeSend(co, k, 4)
		require.NotEmpty(t, fallbackLease)
		assert.Equal(t, 1, inFlight(co.local), "the fallback's own lease (the one ended is no longer counted)")
		assert.Equal(t, 1, inFlight(shared), "the shared store still counts the lease ended while it failed")

		fs.down.Store(false)
		time.Sleep(time.Second) // the fallback lasts a probe interval
		require.Same(t, fs, co.store(k, time.Now()))
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
		shared := NewMemoryStore()
		fs := &outageStore{Store: shared}
		co, stop := newCoordinator(Coordination{Store: fs, ProbeInterval: time.Second}.resolved())
		defer stop()
		req, err := http.NewRequest("POST", "https://api.example.com/v1/chat", nil)
		require.NoError(t, err)
		k, _ := co.enter(req)
		now := time.Now()
		// Another process has 3 calls in flight; a 429 cut the limit to 4.
		_, err = shared.Report(ctx, k.name, store.Report{At: now, Owner: "other", Unleased: 3, Seq: 1,
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

		fs.down.Store(true)
		assert.Empty(t, takeSend(co, k, limit), "no room: the fleet's 4 calls are counted in the fallback")
		require.Same(t, co.local, co.store(k, time.Now()))
		assert.NotEmpty(t, takeSend(co, k, limit+2), "room for one more than the fleet's 4")
		assert.Empty(t, takeSend(co, k, limit+2))
		assert.True(t, k.view.Load().fallback)

		fs.down.Store(false)
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
