package redisstore_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/llmretry/llmretry/redisstore/internal/fleet"
)

// A fleet with a fallback route (issue 21's "Done when"): 3 processes,
// each with a coordinated Transport over its own Store on one
// redis-server, a call every 4 s per process (the fleet's interleaved,
// one every 1.33 s) for 76 s, against a primary down (502) for 60 s from
// 2 s in and a fallback that is up; the default probe interval (5 s).

const (
	fbProcs        = 3
	fbCallsPerProc = 19
	fbEvery        = 4 * time.Second // between a process's calls
	fbOutageFrom   = 2 * time.Second
	fbOutage       = 60 * time.Second
	fbProbe        = 5 * time.Second // a zero coordination.Config's ProbeInterval
	// fbLead is how long after the processes start the calls begin: they
	// start beside TestFleetRateLimit's 12 (both tests are parallel).
	fbLead = 3 * time.Second
	// fbMargin is what the bounds below allow for scheduling and round
	// trips on a loaded 2-core machine under -race.
	fbMargin = time.Second
	// fbBlip is the fleet's first wait: a call whose own failure is the
	// first its process hears of the outage is a blip, retried on the
	// primary after it, then moved (decision 102).
	fbBlip = time.Second
)

// The primary down for a minute: every call is answered at once, from the
// fallback throughout the outage, but each process's first in it, a blip
// answered after its first wait; the primary sees, besides each
// process's first failure at most, one probe per probe interval (less
// 20 %) for the whole fleet, and is probed throughout; within a probe
// interval (and the fleet's next call) of its recovery a probe finds it
// back, and every call after that goes to it.
func TestFleetFallback(t *testing.T) {
	if testing.Short() {
		t.Skip("runs in real time, about 80 s")
	}
	t.Parallel()
	srv := startRedis(t)
	start := time.Now().Add(fbLead)
	outageAt, recovery := start.Add(fbOutageFrom), start.Add(fbOutageFrom+fbOutage)
	primary := fleet.NewProvider(fleet.Outage(outageAt, fbOutage, http.StatusBadGateway))
	defer primary.Close()
	fallback := fleet.NewProvider(fleet.Outage(start, 0, http.StatusBadGateway))
	defer fallback.Close()
	cfgs := make([]fleet.Config, fbProcs)
	for p := range cfgs {
		cfgs[p] = fleet.Config{Proc: p, Procs: fbProcs, Calls: fbCallsPerProc, Start: start, Spread: fbCallsPerProc * fbEvery,
			Provider: primary.URL, Fallback: fallback.URL, Redis: srv.Addr, Prefix: prefix(t),
			Probe: fbProbe, Release: release, Deadline: 30 * time.Second, Timeout: rateRedisTimeout}
	}
	ps := spawn(t, cfgs)
	logs(t, ps) // Redis answered throughout: the fleet coordinated as one

	gap := fbEvery / fbProcs // between the fleet's calls
	var res []fleet.Result
	for _, p := range ps {
		res = append(res, p.Results...)
	}
	if len(res) != fbProcs*fbCallsPerProc {
		t.Fatalf("%d results, want %d", len(res), fbProcs*fbCallsPerProc)
	}
	slowest := time.Duration(0)
	blipped := make([]bool, fbProcs) // the process's first call in the outage has come
	for _, r := range res {
		if r.Status != http.StatusOK || r.Err != "" {
			t.Errorf("process %d call %d: status %d, error %q", r.Proc, r.Call, r.Status, r.Err)
		}
		took := r.End.Sub(r.Start)
		slowest = max(slowest, took)
		bound, what := fbMargin, "a call waits for nothing"
		if !r.Start.Before(outageAt) && !blipped[r.Proc] {
			blipped[r.Proc] = true
			bound, what = fbBlip+fbMargin, "a blip waits its first wait, no more"
		}
		if took > bound {
			t.Errorf("process %d call %d took %v: %s", r.Proc, r.Call, took, what)
		}
		if !r.Start.Before(outageAt) && r.Start.Before(recovery.Add(-fbMargin)) && r.Route != 1 {
			t.Errorf("process %d call %d, %v into the outage, was answered by route %d, not the fallback", r.Proc, r.Call, r.Start.Sub(outageAt).Round(time.Millisecond), r.Route)
		}
	}

	// The primary during the outage: each process's first failure at
	// most, then probes one probe interval (less 20 %) apart at least.
	var during []time.Time
	var back time.Time // the first answer after the recovery
	for _, r := range primary.Requests() {
		switch {
		case r.At.Before(outageAt):
		case r.At.Before(recovery):
			during = append(during, r.At)
		case back.IsZero():
			back = r.At
		}
	}
	if most := fbProcs + int(fbOutage/(fbProbe*4/5)) + 1; len(during) > most {
		t.Errorf("%d requests reached the primary during the %v outage, want at most %d (%d first failures, a probe per %v)", len(during), fbOutage, most, fbProcs, fbProbe*4/5)
	}
	if len(during) == 0 {
		t.Fatal("nothing reached the primary during the outage")
	}
	// Probed throughout: a probe is due a probe interval after the last
	// at most, and the fleet's next call sends it.
	for i, at := range append(during[1:], recovery) {
		if d := at.Sub(during[i]); d > fbProbe+gap+fbMargin {
			t.Errorf("no request reached the primary for %v (from %v into the outage)", d.Round(time.Millisecond), during[i].Sub(outageAt).Round(time.Millisecond))
		}
	}
	if back.IsZero() {
		t.Fatal("no call returned to the primary")
	}
	if lag := back.Sub(recovery); lag > fbProbe+gap+fbMargin {
		t.Errorf("the first call returned to the primary %v after its recovery, want at most %v (a probe interval, the fleet's next call)", lag.Round(time.Millisecond), fbProbe+gap+fbMargin)
	}
	onFallback := 0
	for _, r := range res {
		if r.Route == 1 {
			onFallback++
		}
		if r.Start.After(back.Add(fbMargin)) && r.Route != 0 {
			t.Errorf("process %d call %d, %v after the primary answered again, was answered by route %d", r.Proc, r.Call, r.Start.Sub(back).Round(time.Millisecond), r.Route)
		}
	}
	t.Logf("fleet figures: %d calls (%d answered by the fallback); %d requests reached the primary during the %v outage (%d probes in all); the first back on the primary %v after its recovery; slowest call %v; Redis ran %s",
		len(res), onFallback, len(during), fbOutage, probes(ps), back.Sub(recovery).Round(time.Millisecond), slowest.Round(time.Millisecond), commandStats(t, srv.Addr))
}
