package llmretry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Transport made by New, or the zero Transport, gives its calls
// noGatekeeper, which is zero-size: holding it and calling it allocate
// nothing.
func TestNoGatekeeperCostsNothing(t *testing.T) {
	assert.Zero(t, unsafe.Sizeof(noGatekeeper{}))
	req, err := http.NewRequest(http.MethodPost, testURL, nil)
	require.NoError(t, err)
	rt := mustNew(t, newProvider(ok).mock, Policy{})
	assert.Equal(t, noGatekeeper{}, rt.keeperFor(req, &rt.policy))
	var zero Transport
	assert.Equal(t, noGatekeeper{}, zero.keeperFor(req, &rt.policy))

	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		gk := rt.keeperFor(req, &rt.policy)
		if _, err := gk.admit(ctx, admission{n: 1}); err != nil {
			t.Fatal(err)
		}
		gk.begin()
		gk.end(ctx, nil)
		gk.sent()
		gk.report(ctx, outcome{health: healthUp, status: http.StatusOK})
		gk.leave()
	})
	assert.Zero(t, allocs)
}

// seamCall is one call a gatekeeper received.
type seamCall struct {
	what string
	a    admission // admit's
	o    outcome   // report's
}

// fakeKeeper is a gatekeeper (and the Transport's gatekeepers) that
// records what the core tells it, and answers from its fields.
type fakeKeeper struct {
	mu      sync.Mutex
	calls   []seamCall
	refuse  int     // the attempt number admit refuses; 0: none
	probe   int     // the attempt number that goes as the probe; 0: none
	verdict verdict // what report returns
}

func (f *fakeKeeper) join(*http.Request, *Policy, int) gatekeeper { return f }

func (f *fakeKeeper) await(ctx context.Context, a admission, _ []gatekeeper) (int, bool, error) {
	probe, err := f.admit(ctx, a)
	return 0, probe, err
}

func (f *fakeKeeper) add(c seamCall) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
}

func (f *fakeKeeper) admit(_ context.Context, a admission) (bool, error) {
	f.add(seamCall{what: "admit", a: a})
	if a.n == f.refuse {
		return false, errors.New("held too long")
	}
	return a.n == f.probe, nil
}
func (f *fakeKeeper) begin()                              { f.add(seamCall{what: "begin"}) }
func (f *fakeKeeper) end(context.Context, *http.Response) { f.add(seamCall{what: "end"}) }
func (f *fakeKeeper) sent()                               { f.add(seamCall{what: "sent"}) }
func (f *fakeKeeper) leave()                              { f.add(seamCall{what: "leave"}) }
func (f *fakeKeeper) report(_ context.Context, o outcome) verdict {
	f.add(seamCall{what: "report", o: o})
	return f.verdict
}

// sequence returns the names of the calls received, in order.
func (f *fakeKeeper) sequence() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var s []string
	for _, c := range f.calls {
		s = append(s, c.what)
	}
	return strings.Join(s, " ")
}

// of returns the calls received named what.
func (f *fakeKeeper) of(what string) []seamCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []seamCall
	for _, c := range f.calls {
		if c.what == what {
			out = append(out, c)
		}
	}
	return out
}

// The seam's contract, as the core keeps it: the order of its calls, what
// each admission and outcome carries, and what the core does with a
// refusal, a probe and a verdict.
func TestGatekeeperSeam(t *testing.T) {
	transport := func(t *testing.T, base http.RoundTripper, p Policy, fk *fakeKeeper) *Transport {
		rt := mustNew(t, base, p)
		rt.keepers = fk
		return rt
	}
	waits := Policy{Waits: []time.Duration{time.Second, 2 * time.Second}}

	t.Run("a first-try answer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fk := &fakeKeeper{}
			resp, err := post(t, transport(t, newProvider(ok).mock, waits, fk), context.Background())
			require.NoError(t, err)
			assert.Equal(t, 200, resp.StatusCode)
			assert.Equal(t, "admit begin end report leave", fk.sequence())
			assert.Equal(t, admission{n: 1}, fk.of("admit")[0].a, "a first admission carries its number only")
			o := fk.of("report")[0].o
			assert.Equal(t, healthUp, o.health)
			assert.Equal(t, 200, o.status)
			assert.Same(t, resp, o.resp)
			assert.False(t, o.own.set, "no retry of its own follows an answer")
		})
	})

	t.Run("a retry", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fk := &fakeKeeper{}
			prov := newProvider(fail(503, "Retry-After", "3"), ok)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			start := time.Now()
			p := waits
			p.MaxRetries = 2
			_, err := post(t, transport(t, prov.mock, p, fk), ctx)
			require.NoError(t, err)
			assert.Equal(t, "admit begin end report admit begin end sent report leave", fk.sequence())
			down := fk.of("report")[0].o
			assert.Equal(t, healthDown, down.health)
			assert.Equal(t, 503, down.status)
			assert.Equal(t, pause{d: 3 * time.Second, set: true}, down.server)
			assert.Equal(t, pause{d: time.Second, set: true}, down.own)
			assert.Equal(t, "error 503", string(down.body), "the body read for the server's signals")
			a := fk.of("admit")[1].a
			assert.Equal(t, 2, a.n)
			assert.Equal(t, 2, a.left, "this retry and the one the schedule allows after it")
			assert.Equal(t, start.Add(3*time.Second), a.notBefore, "the server's wait")
			deadline, _ := ctx.Deadline()
			assert.Equal(t, deadline.Add(-time.Minute), a.latest, "the deadline less the reserve")
			assert.Equal(t, healthUp, fk.of("report")[1].o.health)
		})
	})

	t.Run("a refused first attempt", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fk := &fakeKeeper{refuse: 1}
			prov := newProvider(ok)
			resp, err := post(t, transport(t, prov.mock, waits, fk), context.Background())
			assert.Nil(t, resp)
			var ex *Exhausted
			require.ErrorAs(t, err, &ex)
			assert.Equal(t, ErrNoTimeLeft, ex.Reason)
			assert.EqualError(t, ex.Err, "held too long")
			assert.Zero(t, prov.attempts(), "nothing sent")
			assert.Equal(t, "admit leave", fk.sequence())
		})
	})

	t.Run("a refused retry", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fk := &fakeKeeper{refuse: 2}
			prov := newProvider(fail(503))
			var rec recorder
			p := waits
			p.OnAttempt = rec.on
			resp, err := post(t, transport(t, prov.mock, p, fk), context.Background())
			assert.Nil(t, resp)
			var ex *Exhausted
			require.ErrorAs(t, err, &ex)
			assert.Equal(t, ErrNoTimeLeft, ex.Reason)
			assert.Equal(t, 1, ex.Attempts)
			assert.Equal(t, 1, prov.attempts())
			assert.Equal(t, "admit begin end report admit leave", fk.sequence(), "no report of an attempt never sent")
			assert.Equal(t, 1, rec.count(), "the refused attempt was never made: no record")
		})
	})

	t.Run("a probe and a hold", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fk := &fakeKeeper{probe: 2, verdict: verdict{held: true}}
			var probes []bool
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				probes = append(probes, ProbeFromContext(r.Context()))
				return newProvider(fail(503, "Retry-After", "1")).respond(r)
			})
			var rec recorder
			p := Policy{Waits: []time.Duration{time.Minute}, OnAttempt: rec.on}
			start := time.Now()
			resp, err := post(t, transport(t, base, p, fk), context.Background())
			require.NoError(t, err)
			assert.Equal(t, 503, resp.StatusCode)
			assert.Equal(t, []bool{false, true}, probes, "the probe is marked in its attempt's context")
			require.Equal(t, 2, rec.count())
			first := rec.attempts[0]
			assert.True(t, first.Held)
			assert.Equal(t, time.Second, first.RetryIn, "held: the server's wait only, not the schedule's minute")
			assert.Zero(t, time.Since(start), "the core does not sleep a held call's wait: its gatekeeper holds it")
			assert.Equal(t, start.Add(time.Second), fk.of("admit")[1].a.notBefore)
			assert.True(t, rec.attempts[1].Probe)
		})
	})

	t.Run("a paced key and a reset-only wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			for _, paced := range []bool{false, true} {
				fk := &fakeKeeper{verdict: verdict{held: true, paced: paced}}
				prov := newProvider(fail(429, "X-Ratelimit-Reset-Requests", "20s"), ok)
				_, err := post(t, transport(t, prov.mock, waits, fk), context.Background())
				require.NoError(t, err)
				a := fk.of("admit")[1].a
				if paced {
					assert.Zero(t, a.notBefore, "a paced call goes at its turn, not at the reset")
				} else {
					assert.False(t, a.notBefore.IsZero(), fmt.Sprintf("the reset binds a call that is not paced: %v", a.notBefore))
				}
			}
		})
	})
}
