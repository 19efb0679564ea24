package interop

import (
	"fmt"
	"strings"
	"time"
)

// fbNotes says, for each scenario one of our rows does not pass, why and
// what it means for llmretry.
var fbNotes = map[string]string{
	"S02": "Without a fallback, six attempts on the fixed schedule (0, 0.5, 1.5, 3.5, 7.5, 15.5 s), then the 429 is the caller's, marked for `llmretry.GaveUp`. With the host's fallback, the third 429 (1.5 s, past `FallbackAfter`) moves the call and the fallback answers. The README's set-up has neither `FallbackAfter` nor a fixed schedule: a 429 that states no wait is no blip and says nothing of waiting being hopeless, so the primary keeps the call, each drawn wait taken while it ends before the 40-s deadline less its 8-s reserve; the call moves to the fallback, which answers, when the next wait no longer fits. Since issue 31 a wait after a 429 is drawn from the upper half of its window ([0.5, 1], [1, 2], [2, 4], [4, 8], [8, 16], [16, 32] s): at most three attempts fall in the first 3 s (`no_hammer`, at most 4, holds on every draw), six always fit (the first five waits sum to 15.5–31 s), and a seventh would need all six waits within 0.5 s of their least (about 4 calls in 100 million, `bounded_attempts`). Before issue 31 (full jitter from 0) about 53 % of these calls failed one of the two.",
	"S04": "A provider down for good: without a fallback, six attempts and the caller gets the 503 (the openai-python SDK stops at three, the baseline's). With the host's fallback: three primary attempts, the fallback at 1.5 s; with the README's set-up, two: the first 503 is a blip, retried after its drawn wait (up to 1 s), the second moves the call.",
	"S06": "Without a fallback, three attempts each abandoned at `AttemptTimeout` (30 s); a fourth could start only by the deadline less its reserve (100 s − 20 s = 80 s) and is not sent: a clean error at 91.5 s, inside the budget. With the host's fallback, the first timeout moves the call and the fallback answers at 30.9 s. The README's set-up bounds no attempt: its one attempt waits for headers until the deadline, and the caller gets `context deadline exceeded` at 100.0 s, never the fallback (a silent provider says nothing the call could move on). Safe here because virtual time ends the call at its deadline exactly; on a real clock the error comes a little after it, past `within_budget` (at most 100 s, required), which the benchmark would score a fail. `AttemptTimeout` is what passes S06.",
	"S07": "The README's set-up sets no first-token limit: the call waits for the slow first token and reads the whole answer at 20.9 s, past `ttft_limit` (15 s, advisory, for a system that declares a fallback): partial. The host's row passes with `FirstEventTimeout: 10 * time.Second` (see \"What each choice changes\").",
	"S08": "The stream was handed to the caller at its first token: bytes of it are the caller's, so llmretry never resends it (by design: `RetryStreams` retries a stream only until it is committed). The cut reaches the caller as openai-go's `unexpected EOF`, a clean error, never 40 words presented as the answer. Rescuing it needs a client that buffers or restarts the whole answer (the reference client), which a transport under an SDK's stream cannot do. With `ContinueStreams` (the last three rows) the cut is continued: the request again with the 40 words delivered as a final assistant message, which the wall (as a provider that continues a prefill) answers with the other 20, spliced into the body: the caller reads one whole answer at 0.9 s.",
	"S09": "`StreamIdleTimeout` ends the caller's read 30 s after the last byte (30.3 s) with llmretry's stream-idle error; the stream is committed and not resent, as in S08; the next call is healthy (`alive_after`). The README's set-up sets no `StreamIdleTimeout`: its read waits out the stall until the wall hangs up 30 s later (`unexpected EOF` at 30.3 s), the same clean error by the wall's grace; a stall that never ends would be ended by the deadline alone. With `ContinueStreams` the stall is found at the 10-s stall limit and continued by a prefill; the wall stalls the continuation 20 words in, which is continued again: the whole answer at 20.9 s.",
	"S10": "openai-go fails the stream at the invalid event (`unexpected end of JSON input`). The event comes after content, when the stream is the caller's; a client that skips a bad event recovers in place (Bifrost, Portkey). That is the SDK's choice, not the transport's. With `ContinueStreams` the invalid event never reaches openai-go: it breaks the stream, which is continued by a prefill; the wall puts a bad event before every continuation's tenth word, so the answer comes in six pieces, each continued (0.9 s).",
	"S12": "A 400 says the request is wrong: llmretry does not resend it, and `Policy.Fallback` does not take it (a fallback is for a provider that cannot answer, not a request it refuses). Since issue 30, a 400 that says the prompt is longer than the model's window (`context_length_exceeded` here) moves the call at once to `Policy.LongContext`'s routes: with one (the rows with a long-context route), the primary is asked once and the larger window (`fb-ok`) answers at 0.9 s, as the gateways with a larger-context model configured do. Without one (the other rows), one attempt, and the provider's `context_length_exceeded` is the caller's at once.",
	"S14": "As S08: the primary's stream is committed when it is cut, so nothing is continued or restarted, and the fallback's prefill trap is never sprung (no prefill rejection masks anything): a clean error. With `ContinueStreams` the cut is continued on the primary first (the same route, as any retry), which continues a prefill: the whole answer at 0.9 s, and the fallback that refuses prefill is never asked.",
	"S15": "Without a fallback nothing answers during the outage: each request spends its six attempts (15.5 s), so four are sent in the 60 s, the last answered when the primary comes back within its retries. The outage checks require a fallback and are n/a. With the host's fallback, every request during the outage is served by it (each after three primary attempts: a `New` Transport keeps no circuit; with the README's set-up, after two, the first 503 a blip), and the first request after recovery is answered by the primary.",
	"S16": "Without a fallback, as S04. With one, the caller reads the fallback's own model name (`fb-ok`) and usage, never a blend.",
}

// fbDifferences are where this run differs from the benchmark's own.
var fbDifferences = []string{
	"The wall is in memory, not a socket: its faults are produced as net/http reports them to a client — the reset before headers is a `*net.OpError` wrapping `syscall.ECONNRESET` (`read: connection reset by peer`), a chunked body cut by a closed connection is `io.ErrUnexpectedEOF`, and S06's silence ends when the request's context does (after 120 s the wall hangs up: `io.EOF`).",
	"Virtual time: figures are exact multiples of the profile (a whole answer is 60 × 15 ms = 0.9 s); the published ones add real network and process time (about 0.1 s a call).",
	"A fresh system per cell, each in its own bubble; the benchmark keeps one adapter for the run. A `New` Transport keeps nothing between calls, so nothing is lost; the alive probe still runs through the same system after each scenario.",
	"S06's deadline is the 100-s budget the scenario states, not its 130-s cut-off (see Configuration).",
	"The published Bifrost column is its released image, v2.1.1 (9 / 3 / 3 / 1). A later revision of the scorecard file prints a source build of Bifrost's dev branch instead (10 / 3 / 3 / 0: S06 passes with its PR #7104), which the benchmark's methodology says is measured but not scored until released.",
	"No `NewCoordinated` row: its probes go at a random 0–20 % before each probe interval, so its figures vary from run to run, and this file is checked byte for byte. The shared circuit (one probe per interval for a fleet) is the fleet test's subject.",
}

// This file renders docs/failoverbench.md from a run of TestFailoverBench:
// our rows beside the published ones, the totals, what each cell that is
// not a pass means for llmretry, the configuration, and every check of
// our cells with the wall's log.

// fbLogShown is how many entries of a jittered cell's wall log the
// check-level detail shows.
const fbLogShown = 4

// fbMergeRuns merges what line says of each run of jittered cell c (see
// fbMerge).
func fbMergeRuns(c fbCell, line func(fbCell) string) string {
	lines := make([]string, len(c.runs))
	for i, r := range c.runs {
		lines[i] = line(r)
	}
	return fbMerge(lines)
}

// fbDur formats d for prose: "15 ms", "0.5 s", "120 s".
func fbDur(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return fmt.Sprintf("%g s", d.Seconds())
}

// fbMark is the scorecard's mark of a verdict.
func fbMark(v fbVerdict) string {
	return [...]string{"✅ pass", "◐ partial", "○ safe", "❌ fail"}[v]
}

// renderFailoverBench renders the doc; rows are fbRows' cells, undone
// fbChoices' cells.
func renderFailoverBench(rows [][]fbCell, undone []fbCell) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	w("# failoverbench, re-run in Go: llmretry beside the gateways\n\n")
	w("<!-- Generated by interop/failoverbench_test.go (TestFailoverBench); do not edit. Regenerate with:\n")
	w("     cd interop && LLMRETRY_WRITE_TABLE=1 go test -run TestFailoverBench -count=1 . -->\n\n")
	w("[failoverbench](https://github.com/failoverbench/failoverbench) pushes a system through sixteen streaming fault scenarios ")
	w("against a fake OpenAI-compatible provider (\"the wall\") and scores what the caller got and what the provider saw. ")
	w("This is that benchmark written in Go from its public definitions — the faults, timings and checks of its ")
	w("`scenarios/catalogue.yaml`, the scoring of its `METHODOLOGY.md` and `failoverbench/runner.py`, the wall's ")
	w("answers as `failoverbench/wall.py` sends them — with openai-go through llmretry as the system under test. ")
	w("The published columns are the benchmark's own scorecard (`results/full/SCORECARD.md`, 2026-09-12, profile full, methodology v0.1), copied as printed.\n\n")

	w("## How it is run\n\n")
	w("    cd interop && go test -race -run Failover -count=1 .\n\n")
	w("`TestFailoverBench` (interop/failoverbench_test.go) runs every cell — 16 scenarios × our %d rows, plus the cells of ", len(fbRows))
	w("\"What each choice changes\" — each in its own `testing/synctest` bubble against `fbWall` (interop/failoverbench_wall_test.go), ")
	w("an in-memory `http.RoundTripper` that plays the wall: the fault chosen by the `model` in the JSON body, the canonical sixty-word answer ")
	w("streamed as `chat.completion.chunk` events %s apart, the finish chunk, a usage chunk, `data: [DONE]`. ", fbDur(fbTiming.tokenInterval))
	w("The full published profile runs in virtual time (%s first token in S07, %s stall in S09, %s silence in S06, %s outage in S15), ",
		fbDur(fbTiming.slowTTFT), fbDur(fbTiming.stall), fbDur(fbTiming.noResponse), fbDur(fbTiming.flapDown))
	w("so the whole benchmark costs a few seconds and every figure is exact. ")
	w("The rows with the README's set-up draw their waits (the default full jitter): each of their cells runs twice, and %d times in all when the draws changed its times (S15, 20 calls a run: %d), ", fbJitterRuns, fbJitterSeqRuns)
	w("and shows every verdict its runs got, and each figure as it is when every run has it, a count that differs as its range (`6–7p`), a time that differs as `~`, ")
	w("so that this file is the same on every run. ")
	w("It scores each cell as the benchmark's runner does (a call still running at `max_wall_s` + 1 s is a hang; after every scenario a healthy ")
	w("`fb-ok` call, not streamed, with a 10-s limit, is `alive_after`), asserts the verdicts it expects of every cell, that no cell of the host's rows fails, ")
	w("that the host's row with a fallback passes at least 11, issue 30's cells of the README rows in every run (S03 and S12 pass with the long-context route; without it, S12's 400 is the caller's at once after one attempt), ")
	w("issue 29's with `ContinueStreams` (without a route S08, S09 and S10 pass; with one fallback S14 passes and nothing fails; with the long-context route too, at least 15 of 16 pass), ")
	w("that no byte of the primary's API key reaches the fallback's host, and that this file is what the run renders: ")
	w("regenerate it with `LLMRETRY_WRITE_TABLE=1`.\n\n")

	w("## Configuration\n\n")
	w("llmretry is configured as a host would, the way failoverbench configures every system it scores ")
	w("(its baseline: up to two retries, a 30-s request or stream-idle timeout, one fallback model; its catalogue bounds a call at 6 attempts). ")
	w("openai-go sends to the primary's base URL with the primary's key, its own retries off (`option.WithMaxRetries(0)`), over ")
	w("`&http.Client{Transport: t}` where `t` is `llmretry.New(wall, policy)`. Every call carries a context deadline: the scenario's budget. ")
	w("The library's defaults are untouched; every field below is the host's.\n\n")
	with, _ := fbWithFallback(fbDefaultFallback)
	alone := fbHost()
	waits := make([]string, len(alone.Waits))
	for i, d := range alone.Waits {
		waits[i] = fbDur(d)
	}
	w("| setting | value | why |\n|---|---|---|\n")
	w("| deadline (`context.WithTimeout`) | the scenario's `max_wall_s`; S06: 100 s; S15: 30 s per request | The budget the benchmark gives each call (its runner hands the adapter `max_wall_s`). S06 states its own: \"end the call inside the configured budget: two retries of 30 s each plus slack, 100 s\"; its `max_wall_s` of 130 s is the cut-off that tells a call over budget from a hang. With 130 s as its deadline the row without a fallback sends a fourth 30-s attempt and ends at 123.5 s (see below). |\n")
	w("| `RetryStreams` | `%t` | Every scenario streams; by default llmretry sends a stream once. |\n", alone.RetryStreams)
	w("| `MaxRetries` | %d | The catalogue's bound of 6 attempts (S02, S04, S16), as the issue sets it; the default is %d. |\n", alone.MaxRetries, zeroPolicyMaxRetries)
	w("| `Waits` | %s | A fixed schedule (the reference client's 0.5 s doubling, without its jitter): S02's `no_hammer` (at most 4 attempts in 3 s, required) becomes a guarantee — 3 attempts in 3 s. The default full jitter draws the first four waits from [0, 1 s], [0, 2 s], [0, 4 s], [0, 8 s]; they sum to under 3 s, a fifth attempt inside the window, in 1 call in 24 (the volume of that corner of the box: (3⁴ − 2⁴ − 1⁴) / (4! × 1 × 2 × 4 × 8)). |\n", strings.Join(waits, ", "))
	w("| `AttemptTimeout` | %s | The baseline's 30-s request timeout: the wait for response headers (a stream's come at once). |\n", fbDur(alone.AttemptTimeout))
	w("| `StreamIdleTimeout` | %s | The baseline's 30-s stream-idle timeout, on the stream the caller reads. |\n", fbDur(alone.StreamIdleTimeout))
	w("| `FirstEventTimeout` | %s with the fallback, %s without | With somewhere to go, a host sets a time-to-first-token limit (the reference client's 10 s; the catalogue calls failing over on one \"the mature behaviour\"). Without, a limit only throws a slow answer away and asks again: the baseline's 30-s stream-idle timeout bounds the first token too. |\n", fbDur(with.FirstEventTimeout), fbDur(alone.FirstEventTimeout))
	w("| `Fallback` | `RouteTo(%q, %q, Authorization: the fallback's key)`, wrapped by a Route that sets the JSON body's `model` to the fallback model | A fallback to another model on another host with another key, the realistic case: `fb-ok` (S14: `fb-ok-noprefill`, the scenario's `fallback_model`). |\n", fbPrimaryBase, fbFallbackBase)
	w("| `FallbackAfter` | %s | The primary keeps a call for its first second; a provider still failing after it is left (S02, S04, S16: the third failure, at 1.5 s, moves the call). Since issue 30 a blip stays home without it too (S03's 500 and S05's reset are retried on the primary 0.5 s later either way): what it still changes is a persistent 429 (S02), which leaves at 1.5 s rather than after the schedule's six attempts, at the price of a third attempt on a primary that answers 503 (S04, S16: without it, the second moves the call). |\n", fbDur(with.FallbackAfter))
	w("| `Reserve` | the default: a fifth of the deadline | Left as it is. |\n\n")
	w("The row without a fallback is the same host with no `Fallback`, `FallbackAfter` or first-token limit; it declares no fallback, so the checks marked `requires: fallback` are n/a for it, as the methodology says.\n\n")
	w("**The README's set-up** (issue 30): the two rows so named take the README's fallback snippet as a host copies it, ")
	w("`llmretry.Policy{Fallback: routes, RetryStreams: true}`, every other field zero — the schedule's jittered waits (up to 1 s, 2 s, 4 s, … capped at 60 s), %d retries, ", zeroPolicyMaxRetries)
	w("no `AttemptTimeout`, `FirstEventTimeout` or `StreamIdleTimeout`, no `FallbackAfter` — with the host's fallback route and the same deadline, the scenario's budget. ")
	w("\"+ long context\" adds `LongContext`: a route to the fallback's host and key that sets the body's `model` to `%s`, ", fbLongModel)
	w("the wall's model that answers where S12's refuses (a model with a larger window), rewriting the body as the docs' `withModel` does, `ContentLength` and `GetBody` with it.\n\n")

	w("**ContinueStreams** (issue 29): the last three rows are the host's rows (without a fallback, with one, with one and the long-context route) with `ContinueStreams: true` ")
	w("and `StreamIdleTimeout` %s, the reference client's stall limit (its `stall_limit_s`): a stream cut after content reached the caller is continued — here prefilled, ", fbDur(fbStallLimit))
	w("the primary being no OpenAI host — and the rest spliced into the body openai-go reads. A stall is continued rather than ended, and the wall stalls a continuation too (20 words into it): ")
	w("with the baseline's 30 s, the two stalls alone pass S09's 45-s bound (see \"What each choice changes\").\n\n")
	w("## Scorecard\n\n")
	w("**pass** = the caller got the complete answer and the system behaved; **partial** = rescued, with an advisory conduct issue; ")
	w("**safe** = not rescued, but a bounded, clean error; **fail** = a hang, a truncated answer presented as success, or a conduct check failed. ")
	w("`Np/Mf` = attempts the provider saw on the primary / fallback model; `gap` = seconds between the first two primary attempts; then the call's time.\n\n")
	w("| Scenario |")
	for _, r := range fbRows {
		w(" **%s** |", r.name)
	}
	for _, p := range fbPublished {
		w(" %s |", p.name)
	}
	w("\n|---|%s\n", strings.Repeat("---|", len(fbRows)+len(fbPublished)))
	for j, sc := range fbCatalogue {
		w("| **%s** %s |", sc.id, sc.title)
		for i := range fbRows {
			c := rows[i][j]
			w(" %s<br><sub>%s</sub> |", c.marks(), c.detail)
		}
		for _, p := range fbPublished {
			w(" %s<br><sub>%s</sub> |", fbMark(p.cells[j].verdict), p.cells[j].detail)
		}
		w("\n")
	}
	w("\n| System | pass | partial | safe | fail |\n|---|---:|---:|---:|---:|\n")
	for i, r := range fbRows {
		n := fbTotalsText(rows[i])
		w("| **%s** | %s | %s | %s | %s |\n", r.name, n[fbPass], n[fbPartial], n[fbSafe], n[fbFail])
	}
	for _, p := range fbPublished {
		w("| %s | %d | %d | %d | %d |\n", p.name, p.totals[fbPass], p.totals[fbPartial], p.totals[fbSafe], p.totals[fbFail])
	}

	w("\n## What our cells that are not a pass mean\n\n")
	for j, sc := range fbCatalogue {
		var marks []string
		for i, r := range fbRows {
			if c := rows[i][j]; !c.passedOnly() {
				marks = append(marks, fmt.Sprintf("%s %s", r.name, c.marks()))
			}
		}
		if len(marks) > 0 {
			w("- **%s %s** (%s): %s\n", sc.id, sc.title, strings.Join(marks, "; "), fbNotes[sc.id])
		}
	}

	w("\n## What each choice changes\n\nEach choice of the host's that changes a cell, undone on the cell it changes (its verdict, or, where that stays, how the cell gets there):\n\n| choice | cell | with it | without it |\n|---|---|---|---|\n")
	for i, c := range fbChoices {
		with := rows[c.row][c.index()]
		w("| %s | %s, %s | %s<br><sub>%s</sub> | %s<br><sub>%s</sub><br>%s |\n", c.choice, c.scenario, fbRows[c.row].name,
			fbMark(with.verdict), with.detail, fbMark(undone[i].verdict), undone[i].detail, c.without)
	}

	w("\n## Where this run differs from the benchmark's\n\n")
	for _, d := range fbDifferences {
		w("- %s\n", d)
	}

	w("\n## Check-level detail\n")
	for i, r := range fbRows {
		w("\n### %s\n", r.name)
		if r.jittered() {
			w("\nEach cell ran twice, and %d times (S15: %d) when the draws changed its times; each line below is what holds in every run, its figures as in the scorecard, ", fbJitterRuns, fbJitterSeqRuns)
			w("and the wall's log is shortened to its first %d attempts. A cell whose runs got different verdicts lists no checks: which of them fail depends on the draws (see above).\n", fbLogShown)
			for _, c := range rows[i] {
				if len(c.verdicts()) > 1 {
					w("\n**%s %s** — %s\n", c.sc.id, c.sc.title, c.marks())
				} else {
					w("\n**%s %s** — %s — %s\n", c.sc.id, c.sc.title, c.marks(), fbMergeRuns(c, func(r fbCell) string { return r.reason }))
					for k := range c.checks {
						w("- %s\n", fbMergeRuns(c, func(r fbCell) string { return r.checks[k].String() }))
					}
				}
				w("- wall log: %s\n", fbMergeRuns(c, func(r fbCell) string { return r.wallLog(fbLogShown) }))
			}
			continue
		}
		for _, c := range rows[i] {
			w("\n**%s %s** — %s — %s\n", c.sc.id, c.sc.title, fbMark(c.verdict), c.reason)
			for _, ch := range c.checks {
				w("- %s\n", ch)
			}
			w("- wall log: %s\n", c.wallLog(12))
		}
	}
	return b.String()
}
