package interop

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// This file scores a cell as failoverbench's runner.py does: metrics from
// the caller's view (fbResult) and the provider's (the wall's log), every
// check of the scenario evaluated on them, and a verdict.

// fbVerdict is a cell's verdict.
type fbVerdict int8

const (
	fbPass    fbVerdict = iota // rescued, every check clean
	fbPartial                  // rescued, an advisory check failed (or S13 answered around the rejection)
	fbSafe                     // not rescued: a bounded, clean error, every required check clean
	fbFail                     // a hang, a truncated answer presented as success, or a required check failed
)

// String returns the verdict's name.
func (v fbVerdict) String() string {
	return [...]string{"pass", "partial", "safe", "fail"}[v]
}

// fbOutcome is how a call ended for its caller.
type fbOutcome int8

const (
	fbSuccess fbOutcome = iota
	fbError
	fbHang
)

// String returns the outcome's name.
func (o fbOutcome) String() string {
	return [...]string{"success", "error", "hang"}[o]
}

// fbResult is what the caller of a system got from one call.
type fbResult struct {
	outcome fbOutcome
	content string
	model   string   // the reported model: the last chunk's
	usage   *fbUsage // nil without a usage block
	err     string
	elapsed time.Duration
}

// fbNorm collapses whitespace, as runner.py's norm.
func fbNorm(s string) string { return strings.Join(strings.Fields(s), " ") }

// complete reports whether the result carries the canonical answer.
func (r fbResult) complete() bool { return fbNorm(r.content) == fbNorm(fbCanonical) }

// fbSeqItem is one request of a sequence.
type fbSeqItem struct {
	sent time.Duration // since the wall's reset
	res  fbResult
}

// fbMetrics is what the checks read of a cell.
type fbMetrics struct {
	res               fbResult // the call's (a sequence: its summary, see sequenceMetrics)
	fallbackModel     string
	primary, fallback []fbEntry // the wall's log, by model
	log               []fbEntry
	prefillRejections int
	alive             bool
	aliveErr          string
	// A sequence's (S15's) own figures.
	seq                  []fbSeqItem
	seqHangs             int
	seqDuringDown        int // requests sent while the primary was down
	seqServedDuringDown  int
	seqPrimaryDuringDown int            // primary attempts while it was down
	seqRecoveredAfter    *time.Duration // the first primary 200 after the outage, from its end
}

// fbTagKey is the model name a check compares: after the last slash,
// lower case.
func fbTagKey(model string) string {
	return strings.ToLower(strings.TrimSpace(model[strings.LastIndex(model, "/")+1:]))
}

// metricsOf returns the metrics of scenario sc's call r, given the wall's
// log of it.
func metricsOf(sc fbScenario, r fbResult, log []fbEntry) fbMetrics {
	m := fbMetrics{res: r, fallbackModel: sc.fallbackModel(), log: log}
	for _, e := range log {
		switch fbTagKey(e.model) {
		case fbTagKey(sc.model):
			m.primary = append(m.primary, e)
		case fbTagKey(m.fallbackModel):
			m.fallback = append(m.fallback, e)
		}
		if strings.HasPrefix(e.action, "400 prefill") {
			m.prefillRejections++
		}
	}
	return m
}

// sequenceMetrics returns the metrics of a sequence's items, given the
// wall's log of them: the sequence succeeded if every request did, it hung
// if one did.
func sequenceMetrics(sc fbScenario, items []fbSeqItem, log []fbEntry, elapsed time.Duration) fbMetrics {
	sum := items[len(items)-1].res
	sum.outcome, sum.err = fbSuccess, ""
	complete := true
	for _, it := range items {
		if it.res.outcome == fbHang {
			sum.outcome = fbHang
		}
		if it.res.outcome != fbSuccess && sum.err == "" {
			sum.err = it.res.err
		}
		complete = complete && it.res.complete()
	}
	if sum.outcome == fbSuccess && sum.err != "" {
		sum.outcome = fbError
	}
	if !complete {
		sum.content = ""
	} else {
		sum.content = fbCanonical
	}
	sum.elapsed = elapsed
	m := metricsOf(sc, sum, log)
	m.seq = items
	down := fbTiming.flapDown
	for _, it := range items {
		if it.res.outcome == fbHang {
			m.seqHangs++
		}
		if it.sent < down {
			m.seqDuringDown++
			if it.res.outcome == fbSuccess {
				m.seqServedDuringDown++
			}
		}
	}
	for _, e := range m.primary {
		if e.at < down {
			m.seqPrimaryDuringDown++
		}
		if strings.HasPrefix(e.action, "200") && m.seqRecoveredAfter == nil {
			d := e.at - down
			m.seqRecoveredAfter = &d
		}
	}
	return m
}

// fbCheckStatus is a check's result.
type fbCheckStatus int8

const (
	fbCheckPass fbCheckStatus = iota
	fbCheckFail
	fbCheckNA   // requires a capability the system does not declare
	fbCheckInfo // an informational check that did not hold
)

// fbCheckResult is one check evaluated.
type fbCheckResult struct {
	check  fbCheck
	status fbCheckStatus
	detail string
}

// String returns the check as the scorecard prints it.
func (c fbCheckResult) String() string {
	status := [...]string{"pass", "FAIL", "n/a", "info"}[c.status]
	if c.status == fbCheckFail && c.check.severity == fbAdvisory {
		status += " (advisory)"
	}
	return fmt.Sprintf("`%s` %s: %s", c.check.id, status, c.detail)
}

// fbSecs formats a duration as the scorecard does: seconds, one decimal.
func fbSecs(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

// evaluate scores check c on m for a system that has a fallback or not.
func evaluate(c fbCheck, m fbMetrics, hasFallback bool) fbCheckResult {
	out := func(ok bool, detail string) fbCheckResult {
		switch {
		case ok:
			return fbCheckResult{c, fbCheckPass, detail}
		case c.informational:
			return fbCheckResult{c, fbCheckInfo, detail}
		}
		return fbCheckResult{c, fbCheckFail, detail}
	}
	if c.needsFallback && !hasFallback {
		return fbCheckResult{c, fbCheckNA, "n/a — system declares no fallback"}
	}
	r := m.res
	np, nf := len(m.primary), len(m.fallback)
	attempts := fmt.Sprintf("%d primary attempt(s)", np)
	switch c.kind {
	case fbNoHang:
		if r.outcome == fbHang {
			return out(false, "HANG: "+r.err)
		}
		return out(true, fmt.Sprintf("ended in %s (%s)", fbSecs(r.elapsed), r.outcome))
	case fbComplete:
		ok := r.outcome == fbSuccess && r.complete()
		detail := r.outcome.String()
		switch {
		case ok:
			detail = "complete answer"
		case r.outcome == fbSuccess:
			detail = "truncated/altered answer"
		}
		return out(ok, detail)
	case fbNoTruncatedSuccess:
		if r.outcome == fbSuccess && !r.complete() {
			return out(false, fmt.Sprintf("success with %d/60 words", len(strings.Fields(r.content))))
		}
		if r.outcome == fbSuccess {
			return out(true, "complete answer")
		}
		return out(true, fmt.Sprintf("no success claimed (%s)", r.outcome))
	case fbAttemptsPrimaryMin:
		return out(float64(np) >= c.value, attempts)
	case fbAttemptsPrimaryMax:
		return out(float64(np) <= c.value, attempts)
	case fbAttemptsPrimaryEq:
		return out(float64(np) == c.value, attempts)
	case fbContextRetryDiscipline:
		if np <= 1 {
			return out(true, attempts)
		}
		sizes := make([]int, np)
		shrinking := true
		for i, e := range m.primary {
			sizes[i] = e.promptTokens
			if i > 0 && sizes[i] >= sizes[i-1] {
				shrinking = false
			}
		}
		how := "resent at the same or larger size"
		if shrinking {
			how = "each retry smaller (compacted)"
		}
		return out(shrinking, fmt.Sprintf("%d primary attempts, prompt sizes %v — %s", np, sizes, how))
	case fbFirstGapMin:
		if np < 2 {
			return out(false, "no second attempt")
		}
		gap := m.primary[1].at - m.primary[0].at
		return out(gap.Seconds() >= c.value, fmt.Sprintf("gap %.2fs", gap.Seconds()))
	case fbMaxAttemptsWithin:
		n := 0
		for _, e := range m.primary {
			if e.at-m.primary[0].at < c.window {
				n++
			}
		}
		return out(float64(n) <= c.value, fmt.Sprintf("%d attempt(s) in first %gs", n, c.window.Seconds()))
	case fbWallMax:
		return out(r.outcome != fbHang && r.elapsed.Seconds() <= c.value, fbSecs(r.elapsed))
	case fbAliveAfter:
		if m.alive {
			return out(true, "healthy call succeeded afterwards")
		}
		return out(false, "healthy call failed afterwards: "+m.aliveErr)
	case fbFallbackUsed:
		return out(nf >= 1, fmt.Sprintf("%d fallback attempt(s)", nf))
	case fbReportedModelIsFallback:
		if nf == 0 {
			return fbCheckResult{c, fbCheckNA, "n/a — the fallback was never used"}
		}
		rm, fb := fbTagKey(r.model), fbTagKey(m.fallbackModel)
		return out(rm != "" && strings.Contains(rm, fb), fmt.Sprintf("response.model = %q", r.model))
	case fbUsagePresent:
		if r.usage == nil {
			return out(false, "no usage block")
		}
		return out(true, fmt.Sprintf("usage = %+v", *r.usage))
	case fbNoPrefillMasking:
		masked := r.outcome == fbError && m.prefillRejections > 0
		return out(!masked, fmt.Sprintf("%d prefill rejection(s) at the fallback; final outcome %s", m.prefillRejections, r.outcome))
	case fbSeqNoHang:
		return out(m.seqHangs == 0, fmt.Sprintf("%d hung request(s) of %d", m.seqHangs, len(m.seq)))
	case fbSeqServedDuringOutage:
		return out(m.seqDuringDown > 0 && m.seqServedDuringDown == m.seqDuringDown,
			fmt.Sprintf("%d/%d requests answered while primary was down", m.seqServedDuringDown, m.seqDuringDown))
	case fbSeqRecoveredWithin:
		if m.seqRecoveredAfter == nil {
			return out(false, "primary never used again after recovery")
		}
		return out(m.seqRecoveredAfter.Seconds() <= c.value, fmt.Sprintf("primary answered again %+.1fs after recovery", m.seqRecoveredAfter.Seconds()))
	case fbSeqProbeDiscipline:
		return out(m.seqPrimaryDuringDown <= m.seqDuringDown,
			fmt.Sprintf("%d primary attempt(s) for %d request(s) during the outage", m.seqPrimaryDuringDown, m.seqDuringDown))
	}
	return out(false, "unknown check kind "+string(c.kind))
}

// verdictOf returns the verdict of scenario sc's cell and why, from its
// metrics and its checks evaluated (runner.py's verdict_for).
func verdictOf(sc fbScenario, m fbMetrics, checks []fbCheckResult) (fbVerdict, string) {
	r := m.res
	if r.outcome == fbHang {
		return fbFail, "hang"
	}
	if r.outcome == fbSuccess && !r.complete() && !sc.idealError {
		return fbFail, "truncated answer presented as success"
	}
	var required, advisory []string
	for _, c := range checks {
		if c.status != fbCheckFail {
			continue
		}
		if c.check.severity == fbAdvisory {
			advisory = append(advisory, c.check.id)
		} else {
			required = append(required, c.check.id)
		}
	}
	if len(required) > 0 {
		return fbFail, "failed: " + strings.Join(required, ", ")
	}
	rescued := r.outcome == fbSuccess && r.complete()
	if sc.idealError {
		if r.outcome == fbSuccess {
			return fbPartial, "answered by routing around the rejection"
		}
		rescued = r.outcome == fbError
	}
	switch {
	case rescued && len(advisory) > 0:
		return fbPartial, "rescued; advisory: " + strings.Join(advisory, ", ")
	case rescued:
		return fbPass, "rescued"
	}
	return fbSafe, "not rescued — clean error: " + fbShorten(r.err, 80)
}

// fbShorten returns s cut to n bytes.
func fbShorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// cellDetail is the line the scorecard prints under a cell's verdict.
func cellDetail(sc fbScenario, m fbMetrics) string {
	if sc.seq != nil {
		back := "never"
		if m.seqRecoveredAfter != nil {
			back = fmt.Sprintf("%+.0fs", m.seqRecoveredAfter.Seconds())
		}
		return fmt.Sprintf("%d/%d served in outage · back on primary %s", m.seqServedDuringDown, m.seqDuringDown, back)
	}
	parts := []string{fmt.Sprintf("%dp/%df", len(m.primary), len(m.fallback))}
	if len(m.primary) >= 2 {
		parts = append(parts, "gap "+fbSecs(m.primary[1].at-m.primary[0].at))
	}
	parts = append(parts, fbSecs(m.res.elapsed))
	if m.res.outcome == fbSuccess && !m.res.complete() {
		parts = append(parts, "TRUNCATED")
	}
	return strings.Join(parts, " · ")
}

// TestFailoverBenchScoring checks the verdict rules against runner.py's
// on hand-made cells: a truncated success fails whatever the checks say;
// a failed advisory check makes a rescue partial and leaves a clean error
// safe; a required one fails; S13 answered is partial, refused is a pass;
// a check that requires a fallback is n/a for a system without one.
func TestFailoverBenchScoring(t *testing.T) {
	byID := func(id string) fbScenario {
		for _, sc := range fbCatalogue {
			if sc.id == id {
				return sc
			}
		}
		t.Fatalf("no scenario %s", id)
		return fbScenario{}
	}
	primary := func(sc fbScenario, at ...time.Duration) []fbEntry {
		var log []fbEntry
		for i, a := range at {
			log = append(log, fbEntry{at: a, model: sc.model, attempt: i + 1, action: "503"})
		}
		return log
	}
	answer := fbResult{outcome: fbSuccess, content: fbCanonical, model: "fb-ok", usage: &fbUsage{21, 60, 81}, elapsed: time.Second}
	for _, tt := range []struct {
		name        string
		sc          string
		res         fbResult
		log         []time.Duration // primary attempts
		hasFallback bool
		want        fbVerdict
	}{
		{"truncated success fails", "S08", fbResult{outcome: fbSuccess, content: "A gateway earns trust"}, []time.Duration{0}, true, fbFail},
		{"a clean error is safe", "S08", fbResult{outcome: fbError, err: "unexpected EOF"}, []time.Duration{0}, true, fbSafe},
		{"rescued, advisory failed: partial", "S03", answer, []time.Duration{0}, true, fbPartial},
		{"rescued, checks clean: pass", "S03", answer, []time.Duration{0, 500 * time.Millisecond}, true, fbPass},
		{"required check failed: fail", "S02", answer, []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond}, true, fbFail},
		{"hang fails", "S05", fbResult{outcome: fbHang, elapsed: 21 * time.Second}, []time.Duration{0}, true, fbFail},
		{"S13 refused is a pass", "S13", fbResult{outcome: fbError, err: "400"}, []time.Duration{0}, true, fbPass},
		{"S13 answered is partial", "S13", answer, []time.Duration{0}, true, fbPartial},
		{"ttft_limit n/a without a fallback", "S07", fbResult{outcome: fbSuccess, content: fbCanonical, elapsed: 21 * time.Second}, []time.Duration{0}, false, fbPass},
		{"ttft_limit counts with one", "S07", fbResult{outcome: fbSuccess, content: fbCanonical, elapsed: 21 * time.Second}, []time.Duration{0}, true, fbPartial},
		{"S06 over budget fails", "S06", fbResult{outcome: fbError, err: "timeout", elapsed: 104 * time.Second}, []time.Duration{0, 30 * time.Second, 61 * time.Second, 93 * time.Second}, false, fbFail},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sc := byID(tt.sc)
			m := metricsOf(sc, tt.res, primary(sc, tt.log...))
			var checks []fbCheckResult
			for _, c := range sc.checks {
				checks = append(checks, evaluate(c, m, tt.hasFallback))
			}
			got, why := verdictOf(sc, m, checks)
			assert.Equal(t, tt.want.String(), got.String(), "%s; %v", why, checks)
		})
	}
}
