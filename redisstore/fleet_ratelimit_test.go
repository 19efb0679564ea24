package redisstore_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmretry/llmretry/redisstore/internal/fleet"
	"github.com/llmretry/llmretry/redisstore/internal/redisserver"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A fleet under its rate limit (issue 19, "the same with 3 processes on a
// real redis-server"): 3 processes × 34 calls on one Anthropic API key,
// all arriving at once, each call under a 10-minute deadline, through one
// llmretry.NewCoordinated Transport per process (the host policy: Waits
// 15 s, 45 s, 2 min, 4 min; Reserve 60 s) over a redisstore, against a
// fake provider served here that enforces its limit the way Anthropic
// does (fleet.RateLimiter: interop's rateLimiter over HTTP).

// Issue 19's targets are asserted: at most 2 429s per 100 calls among
// the attempts sent after their own process knew of the limit (a 429
// came back to one of its calls, or a call of it was held), the first
// attempts of calls that arrived before it knew aside (those go out
// blind: on a loaded machine a crowd's first attempts, all arriving at
// once, leave over a few hundred ms, after its own or another process's
// first 429 came back); throughput at least 90 % of the limit while calls
// waited; p95 time to answer within 1.2 × ideal pacing's. The figures
// are logged (go test -v), with the fleet-wide count of 429s sent after
// the first came back anywhere.

const (
	rateProcs        = 3
	rateCallsPerProc = 34
	rateDeadline     = 10 * time.Minute
	// rateLead is how long after the processes start the calls arrive:
	// time for 6 processes (the scenarios run side by side) to start
	// under -race and connect.
	rateLead = 3 * time.Second
	// rateStagger puts off each scenario's arrival after the one before,
	// so that their crowds do not arrive in the same instant: 204 calls
	// asking Redis at once on a loaded 2-core machine under -race made
	// Redis calls overrun their 250-ms Timeout, and processes coordinate
	// in-process for a probe interval.
	rateStagger = 10 * time.Second
	// rateBound is when a scenario gives up on its processes (kills them)
	// and fails: ideal pacing answers the last call of the bucket by 94 s.
	rateBound = 5 * time.Minute
	// rateRedisTimeout bounds each process's Redis calls (Options.Timeout):
	// on a loaded 2-core machine under -race the first crowd's scripts
	// overran the default 250 ms in about half the runs, and each such
	// process coordinates alone for a probe interval (see docs/redis.md),
	// which is Redis failing, not what these runs measure.
	rateRedisTimeout = 2 * time.Second
)

// hostWaits is the seed's host policy's schedule (its Reserve: 60 s).
var hostWaits = []time.Duration{15 * time.Second, 45 * time.Second, 2 * time.Minute, 4 * time.Minute}

// rateScenarios are the providers, Anthropic's request bucket and its
// concurrency limit, and OpenAI's request bucket published per minute
// (each answer takes 2 s, each refusal 100 ms), with the calls arriving at
// once or evenly over 10 s (the fleet's calls interleaved: process p's
// call i is the fleet's (i×3 + p)th).
var rateScenarios = []struct {
	id, name string
	spec     fleet.RateSpec
	spread   time.Duration // the calls arrive evenly over it (0: at once)
}{
	{"bucket", "Anthropic request bucket (10, 1/s; retry-after), calls at once",
		rateBucket, 0},
	{"bucket-over-10s", "Anthropic request bucket (10, 1/s; retry-after), calls over 10 s",
		rateBucket, 10 * time.Second},
	{"bucket-minute", "OpenAI request bucket published per minute (60 stated; 10, 1/s enforced; wait in the message), calls at once",
		rateMinute, 0},
	{"bucket-minute-over-10s", "OpenAI request bucket published per minute (60 stated; 10, 1/s enforced; wait in the message), calls over 10 s",
		rateMinute, 10 * time.Second},
	{"concurrency", "Anthropic concurrency limit (8 in flight; retry-after: 1), calls at once",
		rateConcurrency, 0},
	{"concurrency-over-10s", "Anthropic concurrency limit (8 in flight; retry-after: 1), calls over 10 s",
		rateConcurrency, 10 * time.Second},
}

var (
	rateBucket      = fleet.RateSpec{Capacity: 10, Refill: time.Second, Answer: 2 * time.Second, Refuse: 100 * time.Millisecond}
	rateConcurrency = fleet.RateSpec{MaxInFlight: 8, Answer: 2 * time.Second, Refuse: 100 * time.Millisecond}
	// rateMinute states its per-minute figure (60) while it enforces a
	// bucket of 10 refilled at 1/s, as OpenAI may (issue 31).
	rateMinute = fleet.RateSpec{Capacity: 10, Refill: time.Second, Answer: 2 * time.Second, Refuse: 100 * time.Millisecond,
		OpenAI: true, Published: 60}
)

// The scenarios run side by side (about 125 s in all: the bucket's
// ideal pacing alone takes 94 s for 102 calls, and the four buckets start
// first), their arrivals
// rateStagger apart, each against a redis-server of its own (so that its
// command counts are its own). A process whose Redis calls overrun their
// Timeout (rateRedisTimeout) goes on alone for a probe interval: counted
// in the figures.
func TestFleetRateLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs in real time, about 125 s")
	}
	// Beside TestFleetFallback (80 s, 3 light processes), after the
	// package's other tests: CI's time is tight.
	t.Parallel()
	// The scenarios run side by side in goroutines, not as parallel
	// subtests: go test runs at most GOMAXPROCS (2 here) of those at once,
	// which ran them two by two (215 s).
	type run struct {
		srv   *redisserver.Server
		prov  *fleet.RateLimiter
		start time.Time
		tr    *rateTrace
		ps    []fleet.Process
		err   error
		took  time.Duration
	}
	runs := make([]*run, len(rateScenarios))
	var wg sync.WaitGroup
	for i, sc := range rateScenarios {
		r := &run{srv: startRedis(t), prov: fleet.NewRateLimiter(sc.spec), start: time.Now().Add(rateLead + time.Duration(i)*rateStagger)}
		runs[i] = r
		t.Cleanup(r.prov.Close)
		pfx := prefix(t) + sc.id + ":"
		cfgs := make([]fleet.Config, rateProcs)
		for p := range cfgs {
			cfgs[p] = fleet.Config{Proc: p, Procs: rateProcs, Calls: rateCallsPerProc, Start: r.start,
				Provider: r.prov.URL, Redis: r.srv.Addr, Prefix: pfx, Deadline: rateDeadline,
				Waits: hostWaits, Reserve: time.Minute, Anthropic: !sc.spec.OpenAI, Timeout: rateRedisTimeout, Spread: sc.spread,
				Trace: os.Getenv("LLMRETRY_FLEET_TRACE") != ""}
		}
		r.tr = startTrace(t, sc.id, r.srv.Addr, pfx, r.prov, r.start)
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), rateBound)
			defer cancel()
			r.ps, r.err = fleet.SpawnContext(ctx, os.Args[0], nil, cfgs)
			r.took = time.Since(r.start)
			r.tr.stop(r.ps)
		})
	}
	wg.Wait()
	for i, sc := range rateScenarios {
		r := runs[i]
		t.Run(sc.id, func(t *testing.T) {
			require.NoError(t, r.err, "the fleet did not finish within %v", rateBound)
			var res []fleet.Result
			for _, p := range r.ps {
				res = append(res, p.Results...)
			}
			fig := rateFiguresOf(sc.spec, sc.spread, r.prov.Records(), res)
			for _, p := range r.ps {
				for _, msg := range p.Logs {
					if strings.Contains(msg, "Redis calls fail") {
						fig.fallbacks++
					}
				}
			}
			t.Logf("%s, %d processes × %d calls through Redis: %s; took %v; Redis ran %s; left in Redis after the run: %s",
				sc.name, rateProcs, rateCallsPerProc, fig, r.took.Round(100*time.Millisecond), commandStats(t, r.srv.Addr), r.tr.left)

			for _, l := range fig.late {
				t.Logf("late 429: %s", l)
			}
			require.Len(t, res, rateProcs*rateCallsPerProc, "results")
			assert.Equal(t, len(res), fig.answered, "calls answered")
			for _, r := range res {
				if r.Status != http.StatusOK || r.Err != "" {
					t.Errorf("process %d call %d: status %d, error %q", r.Proc, r.Call, r.Status, r.Err)
				}
			}
			assert.LessOrEqual(t, fig.refusedKnown, 2*len(res)/100, "429s of attempts sent after their process knew of the limit")
			if fig.waited {
				assert.GreaterOrEqual(t, fig.throughput, 0.9, "throughput while calls waited")
			}
			assert.LessOrEqual(t, fig.p95, fig.idealP95*12/10, "p95 time to answer against 1.2 × ideal pacing's")
		})
	}
}

// rateFigures are a run's figures, as interop's crowd measures them.
type rateFigures struct {
	calls, answered int
	refused         int // 429s in all
	refusedAfter    int // 429s of attempts sent after the first 429 reached its caller
	arrivedAfter    int // 429s that arrived after it (sent before it, some of them)
	refusedKnown    int // 429s of attempts sent after their own process knew (a 429 back, or a call held), but the first attempts of calls that arrived before
	throughput      float64
	waited          bool // some call waited on a refusal (throughput is defined)
	p50, p95, most  time.Duration
	idealP95        time.Duration
	mostAttempts    int
	fallbacks       int      // times a process's Redis calls began to fail (it coordinated alone a while)
	late            []string // each 429 counted in refusedKnown: who sent it, when, and what the provider held then
}

func (f rateFigures) String() string {
	tput := "— (no 429: no call waited on one)"
	if f.waited {
		tput = fmt.Sprintf("%.0f %%", 100*f.throughput)
	}
	return fmt.Sprintf("answered %d/%d · 429s %d (%d sent after the first reached a caller, %d after their process knew, %d arrived after it) · throughput while calls waited %s · "+
		"time to answer p50 %s / p95 %s / max %s, ideal p95 %s (×%.2f) · most attempts by one call %d · "+
		"Redis calls began to fail %d times (a process then coordinates alone for a probe interval)",
		f.answered, f.calls, f.refused, f.refusedAfter, f.refusedKnown, f.arrivedAfter, tput, fmtDur(f.p50), fmtDur(f.p95), fmtDur(f.most),
		fmtDur(f.idealP95), float64(f.p95)/float64(f.idealP95), f.mostAttempts, f.fallbacks)
}

// unanswered stands for a call that got no answer among times to answer.
const unanswered = time.Duration(math.MaxInt64)

// fmtDur renders a time to answer.
func fmtDur(d time.Duration) string {
	if d == unanswered {
		return "—"
	}
	return d.Round(100 * time.Millisecond).String()
}

// rateFiguresOf computes a run's figures from the provider's records and
// the calls' results, the calls having arrived at start.
func rateFiguresOf(spec fleet.RateSpec, spread time.Duration, recs []fleet.RateRecord, res []fleet.Result) rateFigures {
	f := rateFigures{calls: len(res)}
	times := make([]time.Duration, len(res))
	for i, r := range res {
		times[i] = unanswered
		if r.Status == http.StatusOK && r.Err == "" {
			f.answered++
			times[i] = r.End.Sub(r.Start)
		}
		f.mostAttempts = max(f.mostAttempts, r.Attempts)
	}
	if len(times) > 0 {
		f.p50, f.p95, f.most = percentile(times, 50), percentile(times, 95), slices.Max(times)
	}
	f.idealP95 = percentile(idealTimes(spec, len(res), spread), 95)

	var base time.Time // the first call's arrival: the figures' times count from it
	for _, r := range res {
		if base.IsZero() || r.Start.Before(base) {
			base = r.Start
		}
	}
	knew := map[int]time.Time{} // process → when it first knew
	type callID struct{ proc, call int }
	arrived := map[callID]time.Time{} // when each call arrived
	for _, r := range res {
		if !r.Knew.IsZero() {
			knew[r.Proc] = r.Knew
		}
		arrived[callID{r.Proc, r.Call}] = r.Start
	}
	firstSent := map[callID]time.Time{} // each call's first attempt
	for _, r := range recs {
		id := callID{r.Proc, r.Call}
		if t, ok := firstSent[id]; !ok || r.Sent.Before(t) {
			firstSent[id] = r.Sent
		}
	}
	var firstBack time.Time
	for _, r := range recs {
		if !r.Admitted {
			f.refused++
			if !r.Cut && (firstBack.IsZero() || r.Left.Before(firstBack)) {
				firstBack = r.Left
			}
		}
	}
	for _, r := range recs {
		if r.Admitted || firstBack.IsZero() {
			continue
		}
		if r.At.After(firstBack) {
			f.arrivedAfter++
		}
		sent := r.Sent
		if sent.IsZero() {
			sent = r.At
		}
		if sent.After(firstBack) {
			f.refusedAfter++
		}
		// A call's first attempt counts only if the call arrived after
		// its process knew: one that arrived before went out blind,
		// whenever a loaded machine got round to sending it.
		id := callID{r.Proc, r.Call}
		blind := r.Sent.Equal(firstSent[id]) && !arrived[id].After(knew[r.Proc])
		if k, ok := knew[r.Proc]; ok && sent.After(k) && !blind {
			f.refusedKnown++
			f.late = append(f.late, lateOf(r, recs, arrived[id], k, base))
		}
	}
	f.throughput, f.waited = throughputOf(spec, recs)
	return f
}

// lateOf describes a 429 counted among those sent after its process knew
// (r, of the call that arrived at arrived, its process knowing from knew),
// with the provider's records recs, times from base: which attempt of
// which call it was, when it was sent, and how many requests the provider
// held when it arrived (admitted, not yet answered).
func lateOf(r fleet.RateRecord, recs []fleet.RateRecord, arrived, knew, base time.Time) string {
	n, held := 0, 0
	for _, o := range recs {
		if o.Proc == r.Proc && o.Call == r.Call && !o.Sent.After(r.Sent) {
			n++
		}
		if o.Admitted && !o.At.After(r.At) && (o.Left.IsZero() || o.Left.After(r.At)) {
			held++
		}
	}
	at := func(t time.Time) string { return fmt.Sprintf("%+.3fs", t.Sub(base).Seconds()) }
	return fmt.Sprintf("process %d call %d (arrived %s) attempt %d sent %s, arrived %s, its process knew from %s; the provider held %d",
		r.Proc, r.Call, at(arrived), n, at(r.Sent), at(r.At), at(knew), held)
}

// percentile returns the p-th percentile of times by nearest rank.
func percentile(times []time.Duration, p int) time.Duration {
	s := slices.Sorted(slices.Values(times))
	rank := (p*len(s) + 99) / 100
	return s[max(rank, 1)-1]
}

// idealTimes returns each of n calls' time to answer under ideal pacing,
// the calls arriving evenly over spread (the ith at i×spread/n; all at
// once if spread is 0): admitted in arrival order as soon as spec allows
// (a request back in the bucket, full at the start; a slot free), answered
// spec.Answer later.
func idealTimes(spec fleet.RateSpec, n int, spread time.Duration) []time.Duration {
	arr, adm := make([]time.Duration, n), make([]time.Duration, n)
	var full time.Duration // the instant the bucket is full again
	for i := range adm {
		arr[i] = time.Duration(i) * spread / time.Duration(n)
		if spec.MaxInFlight > 0 {
			adm[i] = arr[i]
			if j := i - spec.MaxInFlight; j >= 0 {
				adm[i] = max(arr[i], adm[j]+spec.Answer)
			}
			continue
		}
		adm[i] = max(arr[i], full-time.Duration(spec.Capacity-1)*spec.Refill)
		full = max(full, adm[i]) + spec.Refill
	}
	for i := range adm {
		adm[i] += spec.Answer - arr[i]
	}
	return adm
}

// throughputOf returns the share of the limit used while calls waited on
// it (interop's throughputOf): from the first refusal's arrival to the
// last admission, the admissions after the first refusal against what the
// rate allows in that time (a bucket), or the time-averaged requests in
// flight against the slots (a concurrency limit). It reports false when
// no request was refused or none admitted after the first refusal.
func throughputOf(spec fleet.RateSpec, recs []fleet.RateRecord) (float64, bool) {
	var t0, t1 time.Time
	refused := false
	for _, r := range recs {
		switch {
		case !r.Admitted && !refused:
			t0, refused = r.At, true
		case r.Admitted:
			t1 = r.At
		}
	}
	if !refused || !t1.After(t0) {
		return 0, false
	}
	window := t1.Sub(t0)
	if spec.MaxInFlight > 0 {
		var busy time.Duration
		for _, r := range recs {
			if r.Admitted {
				from, to := r.At, r.Left
				if from.Before(t0) {
					from = t0
				}
				if to.After(t1) {
					to = t1
				}
				busy += max(0, to.Sub(from))
			}
		}
		return busy.Seconds() / (float64(spec.MaxInFlight) * window.Seconds()), true
	}
	n := 0
	for _, r := range recs {
		if r.Admitted && r.At.After(t0) {
			n++
		}
	}
	return float64(n) / (window.Seconds() * spec.Rate()), true
}

// The figures, on records made up by hand: interop's throughputOf and
// ideal pacing, over time.Time.
func TestRateFigures(t *testing.T) {
	s := time.Second
	base := time.Now()
	rec := func(at, left time.Duration, admitted bool) fleet.RateRecord {
		return fleet.RateRecord{At: base.Add(at), Left: base.Add(left), Admitted: admitted}
	}
	bucket, conc := rateBucket, rateConcurrency
	for _, tc := range []struct {
		name   string
		spec   fleet.RateSpec
		recs   []fleet.RateRecord
		want   float64
		waited bool
	}{
		{"a bucket: 2 admitted in the 10 s after the refusal at 0, of a 1/s limit", bucket,
			[]fleet.RateRecord{rec(0, 2*s, true), rec(0, s/10, false), rec(2*s, 4*s, true), rec(10*s, 12*s, true)}, 0.2, true},
		{"nothing refused: no call waited", bucket, []fleet.RateRecord{rec(0, 2*s, true)}, 0, false},
		{"a concurrency limit: busy 2 s + 1 s of 8 slots × 4 s", conc,
			[]fleet.RateRecord{rec(0, 2*s, true), rec(0, s/10, false), rec(3*s, 5*s, true), rec(4*s, 6*s, true)}, 3.0 / 32, true},
	} {
		got, waited := throughputOf(tc.spec, tc.recs)
		assert.Equal(t, tc.waited, waited, tc.name)
		assert.InDelta(t, tc.want, got, 1e-9, tc.name)
	}
	// A 429 counts against its process once that process knew, unless it
	// is the first attempt of a call that arrived before: process 0 knew
	// at 1 s; its call 0 (arrived at 0) was refused at 0.5 s and at 3 s (a
	// retry: late), its call 1 (arrived at 0) first sent at 1.5 s (blind,
	// sent late), its call 2 (arrived at 2 s) at 2.5 s (late); process 1
	// never knew (its 429 at 2 s is the first crowd's).
	refused := func(proc, call int, sent time.Duration) fleet.RateRecord {
		return fleet.RateRecord{Proc: proc, Call: call, At: base.Add(sent), Sent: base.Add(sent), Left: base.Add(sent + s/10)}
	}
	fig := rateFiguresOf(bucket, 0, []fleet.RateRecord{refused(0, 0, s/2), refused(0, 0, 3*s), refused(0, 1, 3*s/2), refused(0, 2, 5*s/2), refused(1, 0, 2*s)},
		[]fleet.Result{{Proc: 0, Call: 0, Start: base, Knew: base.Add(s)}, {Proc: 0, Call: 1, Start: base, Knew: base.Add(s)},
			{Proc: 0, Call: 2, Start: base.Add(2 * s), Knew: base.Add(s)}, {Proc: 1, Call: 0, Start: base}})
	assert.Equal(t, 2, fig.refusedKnown, "sent after its own process knew, but for a blind first attempt")
	assert.Equal(t, 4, fig.refusedAfter, "sent after the first came back anywhere (0.6 s)")

	// Ideal pacing of 102 calls at once: the bucket's 10 at once, then one
	// a second (the last admitted at 92 s); the concurrency limit's 8 each
	// 2 s (the last at 24 s). The 95th percentile is the 97th call's.
	ib, ic := idealTimes(bucket, 102, 0), idealTimes(conc, 102, 0)
	assert.Equal(t, []time.Duration{2 * s, 2 * s, 94 * s}, []time.Duration{ib[0], ib[9], ib[101]})
	assert.Equal(t, 3*s, ib[10])
	assert.Equal(t, []time.Duration{2 * s, 4 * s, 26 * s}, []time.Duration{ic[7], ic[8], ic[101]})
	assert.Equal(t, 89*s, percentile(ib, 95))
	assert.Equal(t, 26*s, percentile(ic, 95))
	// Over 10 s (one call each 98 ms): the bucket's first 10 go as they
	// arrive; the 11th (at 0.98 s) finds a request back in the bucket at
	// 1 s; the 102nd (at 9.9 s) is admitted at 92 s. Eight slots free
	// every 2 s take 8 calls in each 2 s from 0.78 s on: the 9th waits for
	// the 1st's slot.
	ib, ic = idealTimes(bucket, 102, 10*s), idealTimes(conc, 102, 10*s)
	assert.Equal(t, 2*s, ib[0])
	assert.Equal(t, 3*s-time.Duration(10)*10*s/102, ib[10])
	assert.Equal(t, 94*s-time.Duration(101)*10*s/102, ib[101])
	assert.Equal(t, 2*s, ic[7])
	assert.Equal(t, 4*s-time.Duration(8)*10*s/102, ic[8])
}

// rateTrace follows what Redis holds of the scenario's provider key while
// its fleet runs: the limit on calls in flight, the send leases and tallies
// counted, and the provider's own count of requests in flight, a line per
// change (every 100 ms at most). Written to $LLMRETRY_FLEET_TRACE/NAME.txt
// if that variable names a folder, with each process's log records (a fall
// back to in-process coordination, and back; each of its attempts' results
// and holds, fleet.Config.Trace), each request the provider took or
// refused and when each process first knew of the limit among the lines
// (to the millisecond); what the key still holds after the run (send
// leases and tallies live then: none, if every lease was released where it
// was taken) is logged either way.
type rateTrace struct {
	t     *testing.T
	name  string // the scenario's
	c     *redis.Client
	pfx   string
	prov  *fleet.RateLimiter
	start time.Time
	done  chan struct{}
	ended chan struct{}
	lines []traceLine
	left  string
}

// traceLine is one line of a trace, at its time.
type traceLine struct {
	at   time.Time
	text string
}

// startTrace starts following the key of the fleet under prefix pfx.
func startTrace(t *testing.T, name, addr, pfx string, prov *fleet.RateLimiter, start time.Time) *rateTrace {
	tr := &rateTrace{t: t, name: name, c: newClient(t, addr), pfx: pfx, prov: prov, start: start, done: make(chan struct{}), ended: make(chan struct{})}
	go tr.run()
	return tr
}

// snapshot describes what Redis holds of the key at now, and the
// provider's requests in flight.
func (tr *rateTrace) snapshot(ctx context.Context, now time.Time) string {
	keys, _ := tr.c.Keys(ctx, tr.pfx+"{*}:f").Result()
	provIn, refused := 0, 0
	for _, r := range tr.prov.Records() {
		if r.Admitted && r.Left.IsZero() {
			provIn++
		}
		if !r.Admitted {
			refused++
		}
	}
	if len(keys) == 0 {
		return fmt.Sprintf("no key · provider %d in flight, %d refused", provIn, refused)
	}
	base := strings.TrimSuffix(keys[0], ":f")
	h, _ := tr.c.HMGet(ctx, base+":f", "mi", "gr", "ca", "cu").Result()
	num := func(x any) int64 {
		s, _ := x.(string)
		n, _ := strconv.ParseInt(s, 10, 64)
		return n
	}
	mi, gr, ca, cu := num(h[0]), num(h[1]), num(h[2]), num(h[3])
	limit := "none"
	if mi > 0 && now.UnixMilli() < cu {
		c := mi
		if gr > 0 && now.UnixMicro() > ca {
			c += (now.UnixMicro() - ca) / gr
		}
		limit = fmt.Sprintf("%d (cap %d)", mi, c)
	}
	leases, _ := tr.c.ZCount(ctx, base+":sends", "("+strconv.FormatInt(now.UnixMilli(), 10), "+inf").Result()
	tallies, _ := tr.c.HGetAll(ctx, base+":tallies").Result()
	var ts []string
	sum := 0
	for o, v := range tallies {
		f := strings.Split(v, ":")
		if len(f) != 3 {
			continue
		}
		n, _ := strconv.Atoi(f[0])
		until, _ := strconv.ParseInt(f[2], 10, 64)
		if n > 0 && now.UnixMicro() < until {
			sum += n
			ts = append(ts, fmt.Sprintf("%.4s:%d", o, n))
		}
	}
	slices.Sort(ts)
	return fmt.Sprintf("limit %s · Redis counts %d in flight (%d leases + %d tallied %v) · provider %d in flight, %d refused",
		limit, int(leases)+sum, leases, sum, ts, provIn, refused)
}

func (tr *rateTrace) run() {
	defer close(tr.ended)
	ctx := context.Background()
	if os.Getenv("LLMRETRY_FLEET_TRACE") == "" {
		// Untraced: only what is left after the run, so that the polls
		// do not count among the scenario's Redis commands.
		<-tr.done
		tr.left = tr.snapshot(ctx, time.Now())
		return
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		select {
		case <-tr.done:
			now := time.Now()
			tr.left = tr.snapshot(ctx, now)
			return
		case <-tick.C:
		}
		now := time.Now()
		if s := tr.snapshot(ctx, now); s != last {
			last = s
			tr.lines = append(tr.lines, traceLine{now, s})
		}
	}
}

// stop ends the trace and writes it, with the processes' log records.
func (tr *rateTrace) stop(ps []fleet.Process) {
	close(tr.done)
	<-tr.ended
	dir := os.Getenv("LLMRETRY_FLEET_TRACE")
	if dir == "" {
		return
	}
	lines := tr.lines
	for i, p := range ps {
		for j, msg := range p.Logs {
			if j < len(p.LogTimes) {
				lines = append(lines, traceLine{p.LogTimes[j], fmt.Sprintf("process %d: %s", i, msg)})
			}
		}
	}
	for _, r := range tr.prov.Records() {
		what := "admitted"
		if !r.Admitted {
			what = "refused"
		}
		lines = append(lines, traceLine{r.At, fmt.Sprintf("provider: process %d call %d %s (sent %+.3fs, arrived %+.3fs, left %+.3fs)",
			r.Proc, r.Call, what, r.Sent.Sub(tr.start).Seconds(), r.At.Sub(tr.start).Seconds(), r.Left.Sub(tr.start).Seconds())})
	}
	for i, p := range ps {
		var knew time.Time
		for _, r := range p.Results {
			knew = r.Knew
		}
		if !knew.IsZero() {
			lines = append(lines, traceLine{knew, fmt.Sprintf("process %d knew of the limit", i)})
		}
	}
	slices.SortStableFunc(lines, func(a, b traceLine) int { return a.at.Compare(b.at) })
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%+8.3fs %s\n", l.at.Sub(tr.start).Seconds(), l.text)
	}
	name := strings.NewReplacer("/", "-", " ", "_").Replace(tr.t.Name() + "/" + tr.name)
	if err := os.WriteFile(dir+"/"+name+".txt", []byte(b.String()), 0o644); err != nil {
		tr.t.Errorf("the trace: %v", err)
	}
}
