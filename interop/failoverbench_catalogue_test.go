package interop

import "time"

// This file is failoverbench's scenario catalogue (methodology v0.1),
// written in Go from the benchmark's public definitions: its
// scenarios/catalogue.yaml (faults, budgets, checks), METHODOLOGY.md (the
// "full" timing profile) and failoverbench/__init__.py (the canonical
// answer). failoverbench_wall_test.go produces the faults,
// failoverbench_score_test.go scores the checks.

// fbCanonical is the answer every healthy completion streams: sixty words,
// so that a stream cut after forty is never mistaken for the whole.
const fbCanonical = "A gateway earns trust only when the provider behind it misbehaves. " +
	"Rate limits arrive without warning, streams die halfway through a sentence, " +
	"servers answer with malformed bytes, and a healthy model returns to service " +
	"while the breaker is still open. This answer contains exactly sixty words so " +
	"that a truncated response can never be mistaken for a complete one again."

// fbPrompt is the catalogue's prompt, sent as the one user message.
const fbPrompt = "Explain in exactly sixty words why a gateway earns trust only when the provider behind it misbehaves."

// fbDefaultFallback is the fallback model of every scenario that names
// none: it always answers.
const fbDefaultFallback = "fb-ok"

// fbAliveLimit bounds the healthy fb-ok call the runner makes through the
// same system after every scenario (alive_after).
const fbAliveLimit = 10 * time.Second

// fbTiming is the published "full" profile: what the wall waits and where
// it breaks a stream.
var fbTiming = struct {
	retryAfter    time.Duration // S01's Retry-After
	slowTTFT      time.Duration // S07's first token
	stall         time.Duration // S09's silence
	noResponse    time.Duration // S06's silence before the wall hangs up
	flapDown      time.Duration // S15's outage, from the wall's reset
	tokenInterval time.Duration // between two tokens of a stream
	cutAfter      int           // S08/S14: tokens before the cut
	stallAfter    int           // S09: tokens before the stall
	malformedAt   int           // S10: the token the bad event precedes
}{
	retryAfter:    2 * time.Second,
	slowTTFT:      20 * time.Second,
	stall:         30 * time.Second,
	noResponse:    120 * time.Second,
	flapDown:      60 * time.Second,
	tokenInterval: 15 * time.Millisecond,
	cutAfter:      40,
	stallAfter:    20,
	malformedAt:   10,
}

// fbCheckKind is a kind of machine check, as the benchmark's runner names
// it.
type fbCheckKind string

// The check kinds the catalogue uses (runner.py's evaluate_check).
const (
	fbNoHang                  fbCheckKind = "no_hang"
	fbComplete                fbCheckKind = "complete"
	fbNoTruncatedSuccess      fbCheckKind = "no_truncated_success"
	fbAttemptsPrimaryMin      fbCheckKind = "attempts_primary_min"
	fbAttemptsPrimaryMax      fbCheckKind = "attempts_primary_max"
	fbAttemptsPrimaryEq       fbCheckKind = "attempts_primary_eq"
	fbContextRetryDiscipline  fbCheckKind = "context_retry_discipline"
	fbFirstGapMin             fbCheckKind = "first_gap_min_s"
	fbMaxAttemptsWithin       fbCheckKind = "max_attempts_within"
	fbWallMax                 fbCheckKind = "wall_max_s"
	fbAliveAfter              fbCheckKind = "alive_after"
	fbFallbackUsed            fbCheckKind = "fallback_used"
	fbReportedModelIsFallback fbCheckKind = "reported_model_is_fallback"
	fbUsagePresent            fbCheckKind = "usage_present"
	fbNoPrefillMasking        fbCheckKind = "no_prefill_masking"
	fbSeqNoHang               fbCheckKind = "seq_no_hang"
	fbSeqServedDuringOutage   fbCheckKind = "seq_served_during_outage"
	fbSeqRecoveredWithin      fbCheckKind = "seq_recovered_within_s"
	fbSeqProbeDiscipline      fbCheckKind = "seq_probe_discipline"
)

// fbSeverity is how a failing check counts: a required one fails the
// cell, an advisory one makes it partial.
type fbSeverity int8

const (
	fbRequired fbSeverity = iota
	fbAdvisory
)

// fbCheck is one of a scenario's checks.
type fbCheck struct {
	id       string
	kind     fbCheckKind
	value    float64       // the bound, where the kind has one (seconds for times)
	window   time.Duration // max_attempts_within's window
	severity fbSeverity
	// needsFallback marks `requires: fallback`: n/a for a system that
	// declares no fallback.
	needsFallback bool
	// informational checks never affect the verdict.
	informational bool
}

// fbSequence is S15's sequence mode: count requests, one every interval,
// each under its own budget.
type fbSequence struct {
	count     int
	interval  time.Duration
	perMaxRun time.Duration // per_request_max_wall_s
}

// fbScenario is one scenario of the catalogue.
type fbScenario struct {
	id, title string
	model     string // the primary model; its name selects the fault
	fallback  string // the fallback model; empty means fbDefaultFallback
	// idealError marks `ideal: error` (S13): the caller should get a clean
	// error, not an answer.
	idealError bool
	maxWall    time.Duration // max_wall_s: a call not over by then hangs
	// budget is the call's deadline when it is not maxWall: the budget the
	// scenario states in words (S06: "the configured budget … 100 s").
	budget time.Duration
	seq    *fbSequence
	checks []fbCheck
}

// fallbackModel returns the scenario's fallback model.
func (s fbScenario) fallbackModel() string {
	if s.fallback != "" {
		return s.fallback
	}
	return fbDefaultFallback
}

// fbCatalogue is the sixteen scenarios, in the catalogue's order.
var fbCatalogue = []fbScenario{
	{id: "S01", title: "429 with Retry-After", model: "fb-s01-429-retry-after", maxWall: 20 * time.Second, checks: []fbCheck{
		{id: "retried", kind: fbAttemptsPrimaryMin, value: 2, severity: fbAdvisory},
		{id: "retry_after_honoured", kind: fbFirstGapMin, value: 1.8, severity: fbAdvisory},
		{id: "no_hammer", kind: fbMaxAttemptsWithin, window: 1500 * time.Millisecond, value: 2},
	}},
	{id: "S02", title: "429 without Retry-After, persistent", model: "fb-s02-429-persistent", maxWall: 40 * time.Second, checks: []fbCheck{
		{id: "no_hammer", kind: fbMaxAttemptsWithin, window: 3 * time.Second, value: 4},
		{id: "bounded_attempts", kind: fbAttemptsPrimaryMax, value: 6},
		{id: "no_hang", kind: fbNoHang},
	}},
	{id: "S03", title: "500 once, then healthy", model: "fb-s03-500-then-200", maxWall: 20 * time.Second, checks: []fbCheck{
		{id: "no_hang", kind: fbNoHang},
		{id: "same_provider_retry", kind: fbAttemptsPrimaryMin, value: 2, severity: fbAdvisory},
	}},
	{id: "S04", title: "503 persistent", model: "fb-s04-503-persistent", maxWall: 40 * time.Second, checks: []fbCheck{
		{id: "bounded_attempts", kind: fbAttemptsPrimaryMax, value: 6},
		{id: "no_hang", kind: fbNoHang},
	}},
	{id: "S05", title: "TCP reset before headers", model: "fb-s05-reset", maxWall: 20 * time.Second, checks: []fbCheck{
		{id: "no_hang", kind: fbNoHang},
	}},
	{id: "S06", title: "No response at all", model: "fb-s06-no-response", maxWall: 130 * time.Second, budget: 100 * time.Second, checks: []fbCheck{
		{id: "within_budget", kind: fbWallMax, value: 100},
		{id: "no_hang", kind: fbNoHang},
		{id: "silent_route_not_retried", kind: fbAttemptsPrimaryMax, value: 1, severity: fbAdvisory},
	}},
	{id: "S07", title: "Slow first token", model: "fb-s07-slow-ttft", maxWall: 60 * time.Second, checks: []fbCheck{
		{id: "no_hang", kind: fbNoHang},
		{id: "ttft_limit", kind: fbWallMax, value: 15, severity: fbAdvisory, needsFallback: true},
	}},
	{id: "S08", title: "Stream cut mid-answer", model: "fb-s08-stream-cut", maxWall: 40 * time.Second, checks: []fbCheck{
		{id: "no_truncated_success", kind: fbNoTruncatedSuccess},
		{id: "no_hang", kind: fbNoHang},
	}},
	{id: "S09", title: "Stream stalls", model: "fb-s09-stream-stall", maxWall: 70 * time.Second, checks: []fbCheck{
		{id: "bounded", kind: fbWallMax, value: 45},
		{id: "no_truncated_success", kind: fbNoTruncatedSuccess},
		{id: "alive_after", kind: fbAliveAfter},
		{id: "no_hang", kind: fbNoHang},
	}},
	{id: "S10", title: "Malformed chunk in the stream", model: "fb-s10-malformed-chunk", maxWall: 30 * time.Second, checks: []fbCheck{
		{id: "alive_after", kind: fbAliveAfter},
		{id: "no_garbage", kind: fbNoTruncatedSuccess},
		{id: "no_hang", kind: fbNoHang},
		{id: "recovered_in_place", kind: fbComplete, severity: fbAdvisory},
	}},
	{id: "S11", title: "Stream ends without [DONE]", model: "fb-s11-no-done", maxWall: 30 * time.Second, checks: []fbCheck{
		{id: "prompt_finalise", kind: fbWallMax, value: 8},
		{id: "usage_reported", kind: fbUsagePresent, severity: fbAdvisory},
	}},
	{id: "S12", title: "Context length exceeded", model: "fb-s12-context-length", maxWall: 20 * time.Second, checks: []fbCheck{
		{id: "no_blind_retry", kind: fbContextRetryDiscipline},
		{id: "bounded_attempts", kind: fbAttemptsPrimaryMax, value: 2},
		{id: "no_hang", kind: fbNoHang},
	}},
	{id: "S13", title: "Content-filter rejection", model: "fb-s13-content-filter", idealError: true, maxWall: 20 * time.Second, checks: []fbCheck{
		{id: "no_same_model_retry", kind: fbAttemptsPrimaryEq, value: 1},
		{id: "no_hang", kind: fbNoHang},
		{id: "fallback_attempted", kind: fbFallbackUsed, severity: fbAdvisory, informational: true},
	}},
	{id: "S14", title: "Fallback target rejects prefill", model: "fb-s14-stream-cut", fallback: "fb-ok-noprefill", maxWall: 40 * time.Second, checks: []fbCheck{
		{id: "no_prefill_masking", kind: fbNoPrefillMasking},
		{id: "no_truncated_success", kind: fbNoTruncatedSuccess},
	}},
	{id: "S15", title: "Primary flaps: down, then healthy", model: "fb-s15-flap", maxWall: 200 * time.Second,
		seq: &fbSequence{count: 20, interval: 4 * time.Second, perMaxRun: 30 * time.Second}, checks: []fbCheck{
			{id: "no_hang", kind: fbSeqNoHang},
			{id: "served_during_outage", kind: fbSeqServedDuringOutage, needsFallback: true},
			{id: "recovered", kind: fbSeqRecoveredWithin, value: 30, needsFallback: true},
			{id: "probe_discipline", kind: fbSeqProbeDiscipline, severity: fbAdvisory, informational: true},
		}},
	{id: "S16", title: "Fail-over accounting", model: "fb-s16-503-persistent", maxWall: 40 * time.Second, checks: []fbCheck{
		{id: "reports_fallback_model", kind: fbReportedModelIsFallback, needsFallback: true},
		{id: "usage_present", kind: fbUsagePresent, needsFallback: true, severity: fbAdvisory},
		{id: "bounded_attempts", kind: fbAttemptsPrimaryMax, value: 6},
	}},
}
