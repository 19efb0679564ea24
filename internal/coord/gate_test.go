package coord

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The budget and the probes use leases named apart per coordinator and
// attempt, so that a fleet's stores never confuse two holders.
func TestHolderNamesAreUnique(t *testing.T) {
	co1, stop1 := New(coordination.Config{}, testCore())
	defer stop1()
	co2, stop2 := New(coordination.Config{}, testCore())
	defer stop2()
	seen := map[string]bool{}
	for range 1000 {
		for _, co := range []*Coordinator{co1, co2} {
			h := co.holder()
			require.False(t, seen[h], h)
			seen[h] = true
			require.False(t, strings.ContainsAny(h, " \n"), h)
		}
	}
	assert.Len(t, seen, 2000, fmt.Sprint(len(seen)))
}

// BenchmarkFailedProbe is what one failed probe costs the process with
// 10,000 calls held on its key: the prober leaves the gate (the next one is
// chosen among the held), and the failure's facts arrive and wake it.
func BenchmarkFailedProbe(b *testing.B) {
	co, stop := New(coordination.Config{}, testCore())
	defer stop()
	req, err := http.NewRequest(http.MethodPost, "https://api.example.com/v1/chat", nil)
	if err != nil {
		b.Fatal(err)
	}
	k, _ := co.enter(req, 0)
	now := time.Now()
	for i := range 10000 {
		k.register(i%7, now.Add(time.Duration(i)))
	}
	f := store.Facts{DownSince: now, DownUntil: now.Add(time.Hour), Reason: "502 Bad Gateway"}
	b.ReportAllocs()
	for b.Loop() {
		k.mu.Lock()
		prober := k.cand
		k.mu.Unlock()
		k.unregister(prober) // sent as the probe
		f.Version++
		f.NextProbe = f.NextProbe.Add(time.Second)
		co.learnt(k, f, now, fromShared)      // its failure, as the store answers
		k.register(prober.left, prober.since) // held again
		k.mu.Lock()
		select {
		case <-k.cand.wake: // the one woken
		default:
		}
		k.mu.Unlock()
	}
}

// A Call stays in the allocation size class it had before the engine left
// the root package (192 bytes): the coordinated success path allocates it
// once per call.
func TestCallSize(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(Call{}), uintptr(192))
}

// A call whose base panicked mid-attempt (Begin, and no End) leaves, on
// Leave, no attempt counted in flight and its key: the key's limit on
// calls in flight is not eaten by it. (The core's part, that it leaves
// after such a panic: the root's TestGatekeeperSeam.)
func TestLeaveEndsAnAttemptLeftInFlight(t *testing.T) {
	co, stop := New(coordination.Config{}, testCore())
	defer stop()
	ctx := context.Background()
	cc := co.join(mustRequest(t, ctx), testPolicy{}, 0)
	_, err := cc.Admit(ctx, Admission{N: 1})
	require.NoError(t, err)
	cc.Begin()
	assert.Equal(t, int32(1), co.Stats(time.Now())["api.example.com"].Unleased)
	cc.Leave()
	st := co.Stats(time.Now())
	require.Len(t, st, 1)
	for _, k := range st {
		assert.Zero(t, k.Unleased)
		assert.Zero(t, k.Calls)
	}
}

// failingCall is one call as the core makes it (Admit, then Begin, End,
// Sent after a retry, and Report) to api.example.com, whose provider
// refuses every attempt at once, with the zero Policy's seven attempts and
// no deadline; it ends when they are spent or ctx ends, and counts its
// attempts in sent.
func failingCall(t *testing.T, ctx context.Context, co *Coordinator, sent *atomic.Int64) {
	const attempts = 7
	cc := co.join(mustRequest(t, ctx), &boundsPolicy{left: attempts}, 0)
	defer cc.Leave()
	for n := 1; n <= attempts; n++ {
		if _, err := cc.Admit(ctx, Admission{N: n, Left: attempts - n + 1}); err != nil {
			return
		}
		cc.Begin()
		sent.Add(1)
		cc.End(ctx, nil)
		if n > 1 {
			cc.Sent()
		}
		cc.Report(ctx, Outcome{Health: HealthDown, Err: syscall.ECONNREFUSED, Own: Pause{D: time.Second, Set: true}})
	}
}

// A failed probe wakes only the call that probes next: with 2,000 calls
// held, each probe costs three wake-ups (the prober's own, when it takes
// the lease; the next prober's, when it leaves the gate and when the
// failure sets the next probe's time), not one per held call.
func TestFailedProbeWakesOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		co, stop := New(coordination.Config{ProbeInterval: time.Second}, testCore())
		defer stop()
		ctx, cancel := context.WithCancel(context.Background())
		var sent atomic.Int64
		var wg sync.WaitGroup
		const held = 2000 // the race detector's goroutine limit is 8,128
		for range held {
			wg.Go(func() { failingCall(t, ctx, co, &sent) })
		}
		time.Sleep(10 * time.Second) // every call held; probes every second
		synctest.Wait()
		k := co.Stats(time.Now())["api.example.com"]
		require.Equal(t, held, k.Waiters, "every call held (the probes fail at once)")
		before, probes := k.Woken, sent.Load()
		time.Sleep(20 * time.Second)
		synctest.Wait()
		failed := sent.Load() - probes
		woken := co.Stats(time.Now())["api.example.com"].Woken - before
		t.Logf("%d failed probes woke %d held calls", failed, woken)
		require.Positive(t, failed)
		assert.LessOrEqual(t, woken, 3*failed, "a failed probe wakes the next prober only")
		cancel()
		wg.Wait()
	})
}

// Report's Verdict.Down says the key was down before the failure it is
// told: a first failure on a key that was up is the call's own news, not
// coordination's verdict; a failure on a key other calls found down is.
func TestVerdictDownIsOthersEvidence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		co, stop := New(coordination.Config{}, testCore())
		defer stop()
		ctx := context.Background()
		report := func() Verdict {
			cc := co.join(mustRequest(t, ctx), testPolicy{}, 0)
			defer cc.Leave()
			_, err := cc.Admit(ctx, Admission{N: 1})
			require.NoError(t, err)
			cc.Begin()
			cc.End(ctx, nil)
			return cc.Report(ctx, Outcome{Health: HealthDown, Err: syscall.ECONNREFUSED, Own: Pause{D: time.Second, Set: true}})
		}
		first := report()
		assert.True(t, first.Held, "the key is down now")
		assert.False(t, first.Down, "but only by this failure")
		assert.True(t, report().Down, "a second call's failure: the key was already down")
	})
}
