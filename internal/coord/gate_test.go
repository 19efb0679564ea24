package coord

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
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
	co := newCoordinator(b, coordination.Config{})
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
	co := newCoordinator(t, coordination.Config{})
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
		co := newCoordinator(t, coordination.Config{ProbeInterval: time.Second})
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
		co := newCoordinator(t, coordination.Config{})
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

// limitKey limits k's calls in flight to n, as a 429 told by another
// process with n in flight would (growing each 30 s, for a minute), none
// of them in flight now.
func limitKey(t *testing.T, co *Coordinator, k *keyState, n int) {
	t.Helper()
	now := time.Now()
	until := now.Add(time.Minute)
	for _, r := range []store.Report{
		{At: now, Evidence: store.ProviderUp, Owner: "other", Unleased: n, Seq: 1, TallyUntil: until, Cut: true, Grow: 30 * time.Second, CapUntil: until},
		{At: now, Evidence: store.ProviderUp, Owner: "other", Seq: 2, TallyUntil: until},
	} {
		co.use(context.Background(), k, now, func(ctx context.Context, s store.Store) (store.Facts, bool, error) {
			f, err := s.Report(ctx, k.name, r)
			return f, true, err
		})
	}
	require.Equal(t, n, k.facts(now).Cap(now))
}

// reply returns a response of status with headers from kv (name, value, …).
func reply(code int, kv ...string) *http.Response {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return &http.Response{StatusCode: code, Header: h, Body: http.NoBody}
}

// A refused attempt's room under its key's limit on calls in flight is not
// given again before its 429 is told: a call held for room stays held
// when the refused attempt ends, the 429 cuts the limit to the others in
// flight (not counting the refused one), and only an answer's end makes
// room. (Before, the end woke the held call into the limit the 429 had
// just met, and the cut counted it.)
func TestRefusedSendKeepsItsRoomUntilTold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		co := newCoordinator(t, coordination.Config{})
		ctx := context.Background()
		join := func() *Call { return co.join(mustRequest(t, ctx), testPolicy{}, 0) }
		calls := []*Call{join(), join(), join()}
		k := calls[0].k
		limitKey(t, co, k, 3)
		for _, cc := range calls {
			_, err := cc.Admit(ctx, Admission{N: 1})
			require.NoError(t, err)
			require.NotEmpty(t, cc.send, "sent under a send lease")
			cc.Begin()
		}
		fourth := join()
		var admitted atomic.Bool
		var wg sync.WaitGroup
		wg.Go(func() {
			_, err := fourth.Admit(ctx, Admission{N: 1})
			admitted.Store(err == nil)
		})
		synctest.Wait()
		require.False(t, admitted.Load(), "held: 3 in flight under a limit of 3")

		refusal := reply(http.StatusTooManyRequests, "Retry-After", "1")
		calls[0].End(ctx, refusal)
		synctest.Wait()
		assert.False(t, admitted.Load(), "the refused attempt's room is not given before its 429 is told")
		v := calls[0].Report(ctx, Outcome{Health: HealthUp, Resp: refusal, Status: http.StatusTooManyRequests, Server: Pause{D: time.Second, Set: true}})
		now := time.Now()
		f := k.facts(now)
		assert.Equal(t, 2, f.MaxInFlight, "cut to the 2 others in flight")
		assert.Equal(t, 2, f.InFlight, "the refused attempt's lease ended with its report")
		assert.False(t, v.Mispaced, "a cut: the number in flight was wrong, not a pace")
		synctest.Wait()
		assert.False(t, admitted.Load(), "the cut leaves no room")

		answer := reply(http.StatusOK)
		calls[1].End(ctx, answer)
		calls[1].Report(ctx, Outcome{Health: HealthUp, Resp: answer, Status: http.StatusOK})
		wg.Wait()
		assert.True(t, admitted.Load(), "an answer's end makes room")
		fourth.Begin()
		for _, cc := range []*Call{fourth, calls[2]} {
			cc.End(ctx, answer)
			cc.Report(ctx, Outcome{Health: HealthUp, Resp: answer, Status: http.StatusOK})
		}
		for _, cc := range append(calls, fourth) {
			cc.Leave()
		}
		assert.Zero(t, k.facts(time.Now()).InFlight, "every lease ended")
	})
}

// A key whose calls in flight are limited takes the pace of the bucket
// its answers publish while requests are left: 4 of 60 left, full again
// in 56 s, the fifth send after it goes a second later, before any answer
// says the bucket is spent. A 429 then sent at the turn that pace gave,
// whose headers say requests are left, cuts the calls in flight and
// teaches no rate. A quiet key's answer with 4 left is no news: no fact,
// no store call.
func TestLimitedKeyTakesTheStatedPace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		co := newCoordinator(t, coordination.Config{})
		ctx := context.Background()
		stated := func(left int) *http.Response {
			return reply(http.StatusOK, "X-Ratelimit-Limit-Requests", "60",
				"X-Ratelimit-Remaining-Requests", strconv.Itoa(left), "X-Ratelimit-Reset-Requests", strconv.Itoa(60-left)+"s")
		}

		quiet := co.join(mustRequest(t, ctx), testPolicy{}, 0)
		_, err := quiet.Admit(ctx, Admission{N: 1})
		require.NoError(t, err)
		quiet.Begin()
		quiet.End(ctx, stated(4))
		assert.Equal(t, Verdict{}, quiet.Report(ctx, Outcome{Health: HealthUp, Resp: stated(4), Status: http.StatusOK}))
		assert.True(t, quiet.k.quiet(), "a quiet key's answer with requests left")
		quiet.Leave()

		k := co.join(mustRequest(t, ctx), testPolicy{}, 0).k
		limitKey(t, co, k, 5)
		send := func() *Call {
			cc := co.join(mustRequest(t, ctx), testPolicy{}, 0)
			_, err := cc.Admit(ctx, Admission{N: 1})
			require.NoError(t, err)
			cc.Begin()
			return cc
		}
		first := send()
		start := time.Now()
		first.End(ctx, stated(4))
		v := first.Report(ctx, Outcome{Health: HealthUp, Resp: stated(4), Status: http.StatusOK})
		first.Leave()
		assert.True(t, v.Paced)
		f := k.facts(start)
		assert.Equal(t, []any{60, time.Second, start.Add(56 * time.Second)}, []any{f.Burst, f.Every, f.Full}, "the stated bucket")

		var calls []*Call
		for range 4 {
			calls = append(calls, send())
		}
		assert.Equal(t, start, time.Now(), "4 left: 4 sends at once")
		calls = append(calls, send())
		assert.Equal(t, start.Add(time.Second), time.Now(), "the fifth when the bucket has a request again")

		refusal := reply(http.StatusTooManyRequests, "Retry-After", "1", "X-Ratelimit-Limit-Requests", "60",
			"X-Ratelimit-Remaining-Requests", "3", "X-Ratelimit-Reset-Requests", "57s")
		calls[0].End(ctx, refusal)
		v = calls[0].Report(ctx, Outcome{Health: HealthUp, Resp: refusal, Status: http.StatusTooManyRequests, Server: Pause{D: time.Second, Set: true}})
		f = k.facts(time.Now())
		assert.False(t, v.Mispaced, "sent at its turn, but a cut")
		assert.Equal(t, 4, f.MaxInFlight, "cut to the 4 others in flight")
		assert.Zero(t, f.Spacing, "no rate taught")
		for _, cc := range calls {
			cc.Leave()
		}
	})
}
