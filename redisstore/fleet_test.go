package redisstore_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmretry/llmretry/redisstore/internal/fleet"
)

// The fleet: 3 processes (this test binary, started again), each with its
// own coordinated Transport over its own Store, one redis-server, one fake
// provider served here; probe interval 1 s, release spread 200 ms.
const (
	procs        = 3
	callsPerProc = 20
	probe        = time.Second
	release      = 200 * time.Millisecond
	// startLead is how long after starting the processes the scenario's
	// clock begins: time for them to start and connect.
	startLead = 1500 * time.Millisecond
	// lagMargin is what the bound on the answers' lag allows beyond a
	// probe interval and the release spread: the probe's and the released
	// calls' own round trips, and scheduling on a loaded machine.
	lagMargin = time.Second
	// fleetTimeout is each process's Options.Timeout: on a loaded 2-core
	// machine under -race a script overran the default 250 ms, and its
	// process logged a fall back these scenarios do not expect (in
	// TestFleetRedisDies, one before Redis was killed).
	fleetTimeout = time.Second
)

// fleetConfigs returns the processes' configurations for a scenario.
func fleetConfigs(t *testing.T, base fleet.Config) []fleet.Config {
	cfgs := make([]fleet.Config, procs)
	for p := range cfgs {
		c := base
		c.Proc, c.Procs, c.Calls = p, procs, callsPerProc
		c.Prefix = prefix(t)
		c.Probe, c.Release, c.Deadline, c.Timeout = probe, release, 30*time.Second, fleetTimeout
		cfgs[p] = c
	}
	return cfgs
}

// spawn runs the fleet and fails t if a process failed.
func spawn(t *testing.T, cfgs []fleet.Config) []fleet.Process {
	t.Helper()
	ps, err := fleet.Spawn(os.Args[0], nil, cfgs)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// results checks that every call of every process answered 200 by the
// latest time, and returns the slowest answer's end.
func results(t *testing.T, ps []fleet.Process, latest time.Time) time.Time {
	t.Helper()
	var last time.Time
	n := 0
	for _, p := range ps {
		for _, r := range p.Results {
			n++
			if r.Status != http.StatusOK || r.Err != "" {
				t.Errorf("process %d call %d: status %d, error %q", r.Proc, r.Call, r.Status, r.Err)
			}
			if strings.Contains(strings.ToLower(r.Err), "redis") {
				t.Errorf("process %d call %d failed with a Redis error: %s", r.Proc, r.Call, r.Err)
			}
			if r.End.After(latest) {
				t.Errorf("process %d call %d answered at %v, after %v", r.Proc, r.Call, r.End.Format("15:04:05.000"), latest.Format("15:04:05.000"))
			}
			if r.End.After(last) {
				last = r.End
			}
		}
	}
	if n != procs*callsPerProc {
		t.Errorf("%d results, want %d", n, procs*callsPerProc)
	}
	return last
}

// probes counts the calls' probes.
func probes(ps []fleet.Process) int {
	n := 0
	for _, p := range ps {
		for _, r := range p.Results {
			n += r.Probes
		}
	}
	return n
}

// logs checks that each process logged want, and nothing else.
func logs(t *testing.T, ps []fleet.Process, want ...string) {
	t.Helper()
	for i, p := range ps {
		if len(p.Logs) != len(want) {
			t.Errorf("process %d logged %q, want %d records", i, p.Logs, len(want))
			continue
		}
		for j, msg := range p.Logs {
			if !strings.Contains(msg, want[j]) {
				t.Errorf("process %d record %d: %q, want %q", i, j, msg, want[j])
			}
		}
	}
}

// 3 × 20 calls arriving over the first 6 s of a 12-s 502 outage: one probe
// per interval for the whole fleet, every call answered soon after the
// recovery.
func TestFleetOutage(t *testing.T) {
	srv := startRedis(t)
	const outage = 12 * time.Second
	start := time.Now().Add(startLead)
	ps, last, during := rideOutage(t, srv.Addr, start, outage)
	recovery := start.Add(outage)
	// One probe per interval for the fleet (12), plus the first failures
	// (one per process, a few more while the news travels).
	if max := int(outage/probe) + 6; during > max {
		t.Errorf("%d requests reached the provider during the outage, want at most %d", during, max)
	}
	logs(t, ps)
	t.Logf("fleet figures: %d requests during the %v outage (%d probes in all), slowest answer %v after the recovery; Redis ran %s",
		during, outage, probes(ps), last.Sub(recovery).Round(time.Millisecond), commandStats(t, srv.Addr))
}

// One process receives 429 Retry-After: 5; the calls that arrive after it,
// in every process, send nothing until the 5 s are over, though the other
// processes never used the provider key before (a process keeps the
// notices of keys it does not use yet while their facts are live).
func TestFleetServerWait(t *testing.T) {
	srv := startRedis(t)
	const wait = 5 * time.Second
	start := time.Now().Add(startLead)
	prov := fleet.NewProvider(func(at time.Time, seen []fleet.Request) fleet.Answer {
		seen = since(seen, start)
		if len(seen) == 0 || at.Before(seen[0].At.Add(wait)) {
			return fleet.Answer{Status: http.StatusTooManyRequests, RetryAfter: "5"}
		}
		return fleet.Answer{Status: http.StatusOK}
	})
	defer prov.Close()
	ps := spawn(t, fleetConfigs(t, fleet.Config{Start: start, From: time.Second, Spread: 3 * time.Second, Lead: true,
		Provider: prov.URL, Redis: srv.Addr}))

	reqs := since(prov.Requests(), start)
	if len(reqs) == 0 || reqs[0].Proc != 0 || reqs[0].Status != http.StatusTooManyRequests {
		t.Fatalf("the first request: %+v", reqs)
	}
	end := reqs[0].At.Add(wait)
	early := 0
	for _, r := range reqs[1:] {
		if r.At.Before(end) {
			early++
			t.Errorf("process %d sent a request %v after the 429, before its Retry-After ended", r.Proc, r.At.Sub(reqs[0].At).Round(time.Millisecond))
		}
	}
	last := results(t, ps, end.Add(release+lagMargin))
	logs(t, ps)
	t.Logf("fleet figures: %d requests during the 5-s wait after the 429, %d in all for %d calls; slowest answer %v after the wait ended; Redis ran %s",
		early, len(reqs), procs*callsPerProc, last.Sub(end).Round(time.Millisecond), commandStats(t, srv.Addr))
}

// Redis killed 4 s into a 10-s outage: every call still answers, none with
// a Redis error, and the provider sees no more than each process
// coordinating alone would send.
func TestFleetRedisDies(t *testing.T) {
	srv := startRedis(t)
	const outage = 10 * time.Second
	start := time.Now().Add(startLead)
	kill := time.AfterFunc(time.Until(start.Add(4*time.Second)), srv.Kill)
	defer kill.Stop()
	ps, last, during := rideOutage(t, srv.Addr, start, outage)
	recovery := start.Add(outage)
	// Alone, a process sends its first failure and a probe at most every
	// 0.8 s (a probe interval less 20 %).
	alone := 1 + int(outage/(probe*8/10))
	if during > procs*alone {
		t.Errorf("%d requests reached the provider during the outage, want at most %d (%d processes × %d)", during, procs*alone, procs, alone)
	}
	logs(t, ps, "Redis calls fail")
	t.Logf("fleet figures: %d requests during the %v outage with Redis killed at 4 s (%d probes in all; alone at most %d); slowest answer %v after the recovery",
		during, outage, probes(ps), procs*alone, last.Sub(recovery).Round(time.Millisecond))
}

// rideOutage runs the fleet, sharing the Redis at addr, through a 502
// outage of d from start, the calls arriving over its first 6 s. It checks
// that every call answered within a probe interval and the release spread
// of the recovery (results), and returns the processes, the slowest
// answer's end, and how many requests reached the provider during the
// outage.
func rideOutage(t *testing.T, addr string, start time.Time, d time.Duration) (ps []fleet.Process, last time.Time, during int) {
	t.Helper()
	prov := fleet.NewProvider(fleet.Outage(start, d, http.StatusBadGateway))
	defer prov.Close()
	ps = spawn(t, fleetConfigs(t, fleet.Config{Start: start, Spread: 6 * time.Second, Provider: prov.URL, Redis: addr}))
	recovery := start.Add(d)
	last = results(t, ps, recovery.Add(probe+release+lagMargin))
	return ps, last, arrivedBefore(prov.Requests(), recovery)
}

// arrivedBefore counts the requests that arrived before end.
func arrivedBefore(reqs []fleet.Request, end time.Time) int {
	n := 0
	for _, r := range reqs {
		if r.At.Before(end) {
			n++
		}
	}
	return n
}

// since returns the requests that arrived from start on.
func since(reqs []fleet.Request, start time.Time) []fleet.Request {
	for i, r := range reqs {
		if !r.At.Before(start) {
			return reqs[i:]
		}
	}
	return nil
}

// commandStats says how many scripts (EVALSHA and EVAL) and PUBLISHes the
// server at addr ran, and how many commands in all.
func commandStats(t *testing.T, addr string) string {
	c := newClient(t, addr)
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return "(no commandstats: " + err.Error() + ")"
	}
	calls := map[string]int{}
	total := 0
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
		calls[strings.TrimPrefix(name, "cmdstat_")] = n
		total += n
	}
	return fmt.Sprintf("%d scripts (%d EVALSHA, %d EVAL), %d PUBLISH, %d commands in all (those in scripts included)",
		calls["evalsha"]+calls["eval"], calls["evalsha"], calls["eval"], calls["publish"], total)
}
