package interop

// Issue 19's targets for a crowd through one coordinated Transport, and
// TestRateLimitTargets, which asserts them on every run.

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Issue 19's targets for a crowd of crowdCalls calls through one
// coordinated Transport: at most maxLateRefusals 429s reach the provider
// after the first has reached its caller (2 per 100 calls), throughput
// while calls wait is at least minThroughput percent of the limit, and
// the p95 time to answer is at most p95Slack tenths of ideal pacing's.
const (
	maxLateRefusals = 2 * crowdCalls / 100
	minThroughput   = 90
	p95Slack        = 12
)

// rateGoals is which of issue 19's targets one run met.
type rateGoals struct {
	answered bool // every call answered
	few      bool // at most maxLateRefusals 429s after the first reached its caller
	busy     bool // throughput while calls waited at least minThroughput % (or no call waited)
	quick    bool // p95 time to answer within p95Bound
}

// all reports whether g meets every target.
func (g rateGoals) all() bool { return g.answered && g.few && g.busy && g.quick }

// p95Bound returns the bound on the p95 time to answer for calls arriving
// at arrivals under spec: p95Slack tenths of ideal pacing's p95.
func p95Bound(spec rateSpec, arrivals []time.Duration) time.Duration {
	return percentile(idealTimes(spec, arrivals), 95) * p95Slack / 10
}

// goals returns which of issue 19's targets r met.
func (r rateRun) goals() rateGoals {
	f, waited := throughputOf(r.spec, r.recs)
	return rateGoals{
		answered: r.ok() == crowdCalls,
		few:      r.refusalsAfterFirst() <= maxLateRefusals,
		busy:     !waited || pct(f) >= minThroughput,
		quick:    percentile(r.times(), 95) <= p95Bound(r.spec, r.start),
	}
}

// renderRateTargets renders issue 19's targets against the coordinated
// clients' figures: a target is met in a cell when every run met it.
func renderRateTargets(cells []rateCell) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| limit | arrival | client | every call answers | ≤ %d more 429s after the first reached a caller | throughput ≥ %d %% | p95 ≤ %s × ideal |\n|---|---|---|---|---|---|---|\n",
		maxLateRefusals, minThroughput, strconv.FormatFloat(p95Slack/10.0, 'f', -1, 64))
	for _, c := range cells {
		if !c.client.coordinated {
			continue
		}
		okAll, few, busy, quick := true, true, true, true
		for _, r := range c.runs {
			g := r.goals()
			okAll, few, busy, quick = okAll && g.answered, few && g.few, busy && g.busy, quick && g.quick
		}
		met := func(ok bool, today string) string {
			if ok {
				return "met: " + today
			}
			return "**not met**: " + today
		}
		itoa := func(n int) string { return fmt.Sprint(n) }
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", c.spec.name, c.arrival.name, c.client.name,
			met(okAll, rangeOf(c.runs, rateRun.ok, itoa)+"/"+itoa(crowdCalls)),
			met(few, rangeOf(c.runs, rateRun.refusalsAfterFirst, itoa)),
			met(busy, c.throughputPct()),
			met(quick, rangeOf(c.runs, func(r rateRun) time.Duration { return percentile(r.times(), 95) }, fmtTime)+
				" against "+fmtFine(p95Bound(c.spec, c.arrival.arrivals(crowdCalls)))))
	}
	return b.String()
}

// TestRateLimitTargets asserts issue 19's targets on one run of each
// coordinated client against each limit and arrival: every call answers;
// at most maxLateRefusals 429s reach the provider after the first has
// reached its caller; throughput while calls wait is at least
// minThroughput % of the limit; the p95 time to answer is within p95Slack
// tenths of ideal pacing's. Every run must meet them all, so one run a
// cell is enough (TestRateLimitCrowd samples the jittered clients for the
// table).
func TestRateLimitTargets(t *testing.T) {
	for _, s := range rateSpecs {
		for _, a := range rateArrivals {
			for _, c := range crowdClients {
				if !c.coordinated {
					continue
				}
				t.Run(s.id+"/"+a.id+"/"+c.name, func(t *testing.T) {
					r := runRateCrowd(t, s, a, c)
					assertGoals(t, r)
				})
			}
		}
	}
}

// assertGoals asserts that run r met each of issue 19's targets, with its
// figures in the messages.
func assertGoals(t *testing.T, r rateRun) {
	t.Helper()
	g := r.goals()
	assert.True(t, g.answered, "every call answers: %d of %d did, the first error %v", r.ok(), crowdCalls, r.firstErr())
	first, _ := r.firstRefusalBack()
	assert.True(t, g.few, "at most %d 429s after the first reached its caller (at %s): %d (of %d in all)",
		maxLateRefusals, fmtFine(first), r.refusalsAfterFirst(), r.refusals())
	f, _ := throughputOf(r.spec, r.recs)
	assert.True(t, g.busy, "throughput while calls waited at least %d %%: %d %%", minThroughput, pct(f))
	assert.True(t, g.quick, "p95 time to answer at most %s (ideal pacing's %s × %d/10): %s",
		fmtFine(p95Bound(r.spec, r.start)), fmtFine(percentile(idealTimes(r.spec, r.start), 95)), p95Slack, fmtTime(percentile(r.times(), 95)))
	if !g.all() {
		t.Logf("%s/%s/%s: %d/%d answered · 429s %d (%d after the first came back) · most attempts by one call %d · p50/p95/max %s / %s / %s · longest the limit sat unused %s",
			r.spec.id, r.arrival.id, r.client.name, r.ok(), crowdCalls, r.refusals(), r.refusalsAfterFirst(), r.mostAttempts(),
			fmtTime(percentile(r.times(), 50)), fmtTime(percentile(r.times(), 95)), fmtTime(percentile(r.times(), 100)), fmtFine(longestIdle(r.spec, r.recs)))
	}
}
