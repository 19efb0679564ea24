package coord

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/internal/memstore"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// boundsPolicy is a testPolicy whose calls may send left attempts, the
// last at latest (zero: none).
type boundsPolicy struct {
	testPolicy
	left   int
	latest time.Time
}

func (p *boundsPolicy) FirstBounds(context.Context, *http.Request) (int, time.Time) {
	return p.left, p.latest
}

// routeRequest returns a POST to host with a bearer credential.
func routeRequest(t *testing.T, host string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "https://"+host+"/v1/chat", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk-route")
	return req
}

// attempt sends one attempt of a call on req's key on route, from co,
// with the health h, as if the call had been let through; it goes as the
// key's probe if its turn allows (as the core's call would).
func attempt(t *testing.T, co *Coordinator, req *http.Request, route int, h Health) {
	t.Helper()
	cc := co.join(req, testPolicy{}, route)
	defer cc.Leave()
	_, _ = cc.Admit(context.Background(), Admission{N: 1, Elsewhere: true})
	cc.Begin()
	o := Outcome{Health: h, Err: errors.New("connection refused")}
	if h == HealthUp {
		o = Outcome{Health: h, Resp: &http.Response{StatusCode: http.StatusOK, Header: http.Header{}}, Status: http.StatusOK}
	}
	cc.End(context.Background(), o.Resp)
	cc.Report(context.Background(), o)
}

// refusedOf returns err's *coordination.HeldError, failing t if it has
// none.
func refusedOf(t *testing.T, err error) *coordination.HeldError {
	t.Helper()
	var r *coordination.HeldError
	require.ErrorAs(t, err, &r)
	return r
}

// A fallback route is a key of its own, even on the same host with the
// same credential: its name is the primary's and its route after it (the
// same in every process that shares the store), and its facts are apart
// (the primary down, the fallback quiet).
func TestRouteIsItsOwnKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := memstore.New()
		co1, stop1 := New(coordination.Config{Store: shared}, testCore())
		defer stop1()
		co2, stop2 := New(coordination.Config{Store: shared}, testCore())
		defer stop2()
		req := routeRequest(t, "api.example.com")
		var p testPolicy
		primary, fallback := co1.join(req, p, 0), co1.join(req, p, 1)
		defer primary.Leave()
		defer fallback.Leave()
		other := co2.join(req, p, 1)
		defer other.Leave()
		assert.NotSame(t, primary.k, fallback.k)
		assert.Regexp(t, `^api\.example\.com#[0-9a-f]{8}$`, primary.k.name, "route 0 is named as ever")
		assert.Equal(t, primary.k.name+"~route1", fallback.k.name)
		assert.Equal(t, fallback.k.name, other.k.name, "every process names a route's key alike")
		assert.NotContains(t, fallback.k.name, "sk-route")

		attempt(t, co1, req, 0, HealthDown)
		_, err := primary.Admit(context.Background(), Admission{N: 1, Elsewhere: true})
		assert.Equal(t, coordination.HoldDown, refusedOf(t, err).Reason, "the primary is down")
		probe, err := fallback.Admit(context.Background(), Admission{N: 1, Elsewhere: true})
		assert.NoError(t, err, "the fallback is not")
		assert.False(t, probe)
		assert.True(t, fallback.k.quiet(), "nothing is known of the fallback")
		assert.True(t, other.k.facts(time.Now()) == fallback.k.facts(time.Now()))
	})
}

// A route's key costs its first attempt what the primary's does: nothing
// while it is quiet.
func TestRouteQuietKeyAllocatesNothing(t *testing.T) {
	co := newCoordinator(t, coordination.Config{})
	req := routeRequest(t, "api.example.com")
	var p testPolicy
	co.join(req, p, 1).Leave() // the key, made once
	allocs := testing.AllocsPerRun(100, func() {
		cc := co.join(req, p, 1)
		if _, err := cc.Admit(context.Background(), Admission{N: 1, Elsewhere: true}); err != nil {
			t.Fatal(err)
		}
		cc.Leave()
	})
	assert.LessOrEqual(t, allocs, 1.0, "the Call alone")
}

// With Elsewhere, a key that is down refuses at once, with the down hold's
// reason, nothing waited and no hold recorded (the call was not delayed:
// it goes around), unless the attempt may go as the key's probe now: its
// probe due, no call held on the key to send it, no probe in flight.
// Without Elsewhere the same attempt is held, as ever.
func TestElsewhereGoesAroundADownKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log testkit.Log[coordination.Hold]
		co := newCoordinator(t, coordination.Config{OnHold: log.Add})
		req := routeRequest(t, "api.example.com")
		attempt(t, co, req, 0, HealthDown)
		start := time.Now()

		p := &boundsPolicy{left: 3, latest: start.Add(time.Minute)}
		cc := co.join(req, p, 0)
		_, err := cc.Admit(context.Background(), Admission{N: 1, Elsewhere: true})
		r := refusedOf(t, err)
		assert.Equal(t, coordination.HoldDown, r.Reason)
		assert.Zero(t, r.Waited)
		assert.Equal(t, cc.k.name, r.Key)
		assert.EqualError(t, r.Last, "connection failed")
		assert.Equal(t, start, r.Since)
		assert.Empty(t, log.Take(), "not held: no hold")
		assert.Equal(t, start, time.Now(), "at once")
		_, err = cc.Admit(context.Background(), Admission{N: 2, Left: 2, Latest: start.Add(time.Minute), Elsewhere: true})
		refusedOf(t, err)
		cc.Leave()

		// Without Elsewhere, the same call is held (here until its limit).
		bounded := &boundsPolicy{left: 3, latest: start.Add(time.Second)}
		cc = co.join(req, bounded, 0)
		_, err = cc.Admit(context.Background(), Admission{N: 1})
		cc.Leave()
		assert.Equal(t, time.Second, refusedOf(t, err).Waited)
		held := log.Take()
		require.Len(t, held, 2)
		assert.Equal(t, coordination.HoldGaveUp, held[1].Outcome)

		// Its probe due, with a call held on the key: the held call sends
		// it, not the call that has somewhere else to go.
		time.Sleep(co.cfg.ProbeInterval)
		waiter := cc.k.register(3, time.Now())
		cc = co.join(req, p, 0)
		_, err = cc.Admit(context.Background(), Admission{N: 1, Elsewhere: true})
		refusedOf(t, err)
		cc.k.unregister(waiter)
		probe, err := cc.Admit(context.Background(), Admission{N: 1, Elsewhere: true})
		require.NoError(t, err)
		assert.True(t, probe, "no call held: it goes as the probe")
		assert.Empty(t, log.Take())

		// While the probe is out, another call goes around.
		other := co.join(req, p, 0)
		_, err = other.Admit(context.Background(), Admission{N: 1, Elsewhere: true})
		refusedOf(t, err)
		other.Leave()
		cc.Leave()
	})
}

// With Elsewhere, a server wait the call can afford is waited out as ever
// (and recorded); one it cannot afford refuses at once with no hold
// recorded, where a call without Elsewhere records a hold that begins and
// gives up at once, as ever.
func TestElsewhereWaitsAShortServerWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log testkit.Log[coordination.Hold]
		co := newCoordinator(t, coordination.Config{OnHold: log.Add})
		req := routeRequest(t, "api.example.com")
		cc := co.join(req, testPolicy{}, 0)
		cc.Begin()
		resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}
		cc.End(context.Background(), resp)
		cc.Report(context.Background(), Outcome{Health: HealthUp, Resp: resp, Status: resp.StatusCode, Server: Pause{D: 10 * time.Second, Set: true}})
		cc.Leave()
		start := time.Now()

		short := &boundsPolicy{left: 3, latest: start.Add(time.Minute)}
		cc = co.join(req, short, 0)
		_, err := cc.Admit(context.Background(), Admission{N: 1, Elsewhere: true})
		require.NoError(t, err)
		cc.Leave()
		assert.GreaterOrEqual(t, time.Since(start), 10*time.Second)
		held := log.Take()
		require.Len(t, held, 2)
		assert.Equal(t, coordination.HoldServerWait, held[0].Reason)
		assert.Equal(t, coordination.HoldReleased, held[1].Outcome)

		// The key waits again; a call whose limits end sooner.
		cc = co.join(req, testPolicy{}, 0)
		cc.Report(context.Background(), Outcome{Health: HealthUp, Resp: resp, Status: resp.StatusCode, Server: Pause{D: 10 * time.Second, Set: true}})
		cc.Leave()
		start = time.Now()
		for _, elsewhere := range []bool{true, false} {
			tight := &boundsPolicy{left: 3, latest: start.Add(5 * time.Second)}
			cc = co.join(req, tight, 0)
			_, err = cc.Admit(context.Background(), Admission{N: 1, Elsewhere: elsewhere})
			cc.Leave()
			r := refusedOf(t, err)
			assert.Equal(t, coordination.HoldServerWait, r.Reason)
			assert.Equal(t, start.Add(10*time.Second), r.Until)
			assert.Equal(t, start, time.Now(), "at once")
			held := log.Take()
			if elsewhere {
				assert.Empty(t, held, "with elsewhere: no hold")
			} else {
				require.Len(t, held, 2, "without: a hold that gives up at once, as ever")
				assert.Equal(t, coordination.HoldGaveUp, held[1].Outcome)
				assert.Equal(t, held[0].Start, held[1].End)
			}
		}
	})
}

// awaitRig is a call held on two routes' keys, both down (on two hosts),
// from one process, with another process of the fleet sharing the store.
type awaitRig struct {
	co, fleet       *Coordinator
	primary, backup *http.Request
	p               *boundsPolicy
	log             testkit.Log[coordination.Hold] // co's holds
	cc, fb          *Call
	start           time.Time
	swapped         bool // AdmitAny is asked of the fallback's Call, with the primary's as the other
}

// newAwaitRig takes both routes' keys down at once and joins a call on
// each, with limits latest after now.
func newAwaitRig(t *testing.T, latest time.Duration) *awaitRig {
	t.Helper()
	shared := memstore.New()
	r := &awaitRig{primary: routeRequest(t, "primary.example.com"), backup: routeRequest(t, "backup.example.com")}
	co, stop := New(coordination.Config{Store: shared, OnHold: r.log.Add}, testCore())
	t.Cleanup(stop)
	fleet, stopFleet := New(coordination.Config{Store: shared}, testCore())
	t.Cleanup(stopFleet)
	r.co, r.fleet = co, fleet
	attempt(t, fleet, r.primary, 0, HealthDown)
	attempt(t, fleet, r.backup, 1, HealthDown)
	r.start = time.Now()
	r.p = &boundsPolicy{left: 4, latest: r.start.Add(latest)}
	r.cc, r.fb = co.join(r.primary, r.p, 0), co.join(r.backup, r.p, 1)
	t.Cleanup(func() { r.cc.Leave(); r.fb.Leave() })
	return r
}

// result is what AdmitAny returned, and when.
type result struct {
	which int
	probe bool
	err   error
	at    time.Time
}

// await runs AdmitAny for the rig's call in a goroutine of the bubble,
// asked of the primary's Call (the result's which is the route), or, if
// the rig is swapped, of the fallback's (which is then 1 for the primary).
func (r *awaitRig) await(ctx context.Context, a Admission) <-chan result {
	done := make(chan result, 1)
	go func() {
		var (
			which int
			probe bool
			err   error
		)
		if r.swapped {
			which, probe, err = r.fb.AdmitAny(ctx, a, []Gatekeeper{r.cc})
			which = 1 - which
		} else {
			which, probe, err = r.cc.AdmitAny(ctx, a, []Gatekeeper{r.fb})
		}
		done <- result{which, probe, err, time.Now()}
	}()
	return done
}

// waiters returns how many calls are held on each route's key.
func (r *awaitRig) waiters() (int, int) {
	st := r.co.Stats(time.Now())
	return st[r.cc.k.name].Waiters, st[r.fb.k.name].Waiters
}

// A call held on two down keys goes on whichever comes back first, within
// the release spread, and leaves the other key's list: the fallback's
// first, then (another call) the primary's first.
func TestAdmitAnyGoesWhereTheFirstKeyComesBack(t *testing.T) {
	for _, c := range []struct {
		back    int
		swapped bool
	}{{1, false}, {0, false}, {1, true}, {0, true}} {
		back := c.back
		synctest.Test(t, func(t *testing.T) {
			r := newAwaitRig(t, time.Minute)
			r.swapped = c.swapped
			done := r.await(context.Background(), Admission{N: 2, Left: 4, Latest: r.start.Add(time.Minute)})
			synctest.Wait()
			w0, w1 := r.waiters()
			assert.Equal(t, [2]int{1, 1}, [2]int{w0, w1}, "held on both keys")

			time.Sleep(2 * time.Second) // before either key's probe is due
			recovered := time.Now()
			reqs := []*http.Request{r.primary, r.backup}
			attempt(t, r.fleet, reqs[back], back, HealthUp) // a call in flight elsewhere answers
			res := <-done
			require.NoError(t, res.err)
			assert.Equal(t, back, res.which)
			assert.False(t, res.probe)
			assert.LessOrEqual(t, res.at.Sub(recovered), r.co.cfg.ReleaseSpread, "within the release spread")
			w0, w1 = r.waiters()
			assert.Equal(t, [2]int{0, 0}, [2]int{w0, w1}, "gone from both lists")
			held := r.log.Take()
			require.Len(t, held, 2, "one hold")
			assert.Equal(t, r.cc.k.name, held[0].Key, "on the primary's key")
			assert.Equal(t, coordination.HoldReleased, held[1].Outcome)
			f := r.co.Stats(time.Now())[r.reqName(1-back)].Facts
			assert.Empty(t, f.Prober, "no lease taken on the other key")
		})
	}
}

// reqName returns the store's name of route's key.
func (r *awaitRig) reqName(route int) string {
	if route == 0 {
		return r.cc.k.name
	}
	return r.fb.k.name
}

// A call held on two down keys, neither back, sends the probe of the
// first whose turn comes (the primary's when both are due), once; on the
// other key the next held call probes in its place.
func TestAdmitAnyProbesOneKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newAwaitRig(t, time.Minute)
		other := r.co.join(r.backup, &boundsPolicy{left: 1}, 1)
		defer other.Leave()
		done := r.await(context.Background(), Admission{N: 2, Left: 4, Latest: r.start.Add(time.Minute)})
		synctest.Wait()
		otherDone := make(chan bool, 1)
		go func() {
			probe, err := other.Admit(context.Background(), Admission{N: 2, Left: 1, Latest: r.start.Add(time.Minute)})
			assert.NoError(t, err)
			otherDone <- probe
		}()
		res := <-done
		require.NoError(t, res.err)
		assert.True(t, res.probe)
		due := later(r.cc.k.facts(r.start).NextProbe, r.fb.k.facts(r.start).NextProbe)
		assert.False(t, res.at.After(due), "at the first key's turn")
		f0 := r.co.Stats(time.Now())[r.cc.k.name].Facts
		f1 := r.co.Stats(time.Now())[r.fb.k.name].Facts
		probed := []*Call{r.cc, r.fb}[res.which]
		assert.Equal(t, probed.probe, []string{f0.Prober, f1.Prober}[res.which], "its lease, on the key it goes on")
		assert.Empty(t, []string{f0.Prober, f1.Prober}[1-res.which], "none on the other")
		if res.which == 1 {
			return // the other call was the fallback's next candidate: it probes the primary's
		}
		assert.True(t, <-otherDone, "the fallback's next candidate probes it")
	})
}

// A call held on two keys that stay down past its limits is refused at
// its last instant, naming the primary's key (whichever Call it is asked
// of), with its one hold, on that key, given up; its context ending ends
// it too. Neither leaves a waiter behind.
func TestAdmitAnyRefusesPastItsLimits(t *testing.T) {
	for _, swapped := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			testAdmitAnyRefusesPastItsLimits(t, swapped)
		})
	}
}

func testAdmitAnyRefusesPastItsLimits(t *testing.T, swapped bool) {
	r := newAwaitRig(t, 3*time.Second)
	r.swapped = swapped
	res := <-r.await(context.Background(), Admission{N: 2, Left: 4, Latest: r.start.Add(3 * time.Second)})
	refused := refusedOf(t, res.err)
	assert.Equal(t, r.cc.k.name, refused.Key)
	assert.Equal(t, coordination.HoldDown, refused.Reason)
	assert.Equal(t, 3*time.Second, refused.Waited)
	assert.Equal(t, r.start.Add(3*time.Second), res.at)
	held := r.log.Take()
	require.Len(t, held, 2)
	assert.Equal(t, r.cc.k.name, held[0].Key)
	assert.Equal(t, coordination.HoldGaveUp, held[1].Outcome)
	w0, w1 := r.waiters()
	assert.Equal(t, [2]int{0, 0}, [2]int{w0, w1})

	ctx, cancel := context.WithCancel(context.Background())
	done := r.await(ctx, Admission{N: 2, Left: 4})
	synctest.Wait()
	cancel()
	assert.ErrorIs(t, (<-done).err, context.Canceled)
	w0, w1 = r.waiters()
	assert.Equal(t, [2]int{0, 0}, [2]int{w0, w1})
}

// A first attempt (N 1) held on every route reads its bounds from its
// policy, as Admit's does; a route already quiet lets it go at once, the
// first such in route order; with no other route AdmitAny is Admit.
func TestAdmitAnyFirstAttemptAndQuietRoutes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newAwaitRig(t, 2*time.Second)
		res := <-r.await(context.Background(), Admission{N: 1, Elsewhere: true})
		assert.Equal(t, 2*time.Second, refusedOf(t, res.err).Waited, "the policy's limits")

		quiet := r.co.join(routeRequest(t, "quiet.example.com"), r.p, 2)
		defer quiet.Leave()
		which, probe, err := r.cc.AdmitAny(context.Background(), Admission{N: 2, Left: 3}, []Gatekeeper{r.fb, quiet})
		require.NoError(t, err)
		assert.Equal(t, 2, which)
		assert.False(t, probe)

		_, err = r.cc.Admit(context.Background(), Admission{N: 1, Elsewhere: true})
		refusedOf(t, err)
		start := time.Now()
		_, _, err = r.cc.AdmitAny(context.Background(), Admission{N: 2, Left: 3, Latest: start.Add(time.Second), Elsewhere: true}, nil)
		assert.Equal(t, time.Second, refusedOf(t, err).Waited, "alone, without elsewhere: held as Admit holds")
	})
}
