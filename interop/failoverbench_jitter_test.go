package interop

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// This file is how a row whose schedule draws its waits (the README's
// set-up: no Waits, the default full jitter) is scored and rendered, so
// that docs/failoverbench.md stays the same from run to run: each of its
// cells runs twice, and when the draws changed its times, fbJitterRuns
// times in all; the cell shows every verdict its runs got, and each
// figure as it is when every run has it, a count that differs as its
// range, a time that differs as "~".

// fbJitterRuns is how many times a jittered row's cell runs when the
// draws change its times. The only verdict they decide, S02's under the
// README's set-up, comes out pass or fail about evenly (fail in 53 % of
// calls): with 32 runs, a run of the test sees only one of them for a
// README row less than once in 10^8. A time the draws decide (a gap, a
// call's time) differs between two runs almost surely.
const fbJitterRuns = 32

// fbJitterSeqRuns is fbJitterRuns for a sequence (S15), each run of which
// is 20 calls: their verdict is the same in every run, and their times
// differ in every run.
const fbJitterSeqRuns = 8

// fbRunJittered runs scenario sc through jittered row: twice, and when
// the two runs' times differ (the draws decided them), fbJitterRuns
// times in all (fbJitterSeqRuns for a sequence). A cell the draws do not
// reach (S01's wait is the server's; S06 to S14 never wait) costs two
// runs, and reads as a host row's.
func fbRunJittered(t *testing.T, row fbRow, sc fbScenario) fbCell {
	runs := []fbCell{runFBCell(t, row, sc), runFBCell(t, row, sc)}
	n := fbJitterRuns
	if sc.seq != nil {
		n = fbJitterSeqRuns
	}
	for !fbSameTimes(runs[0], runs[1]) && len(runs) < n {
		runs = append(runs, runFBCell(t, row, sc))
	}
	return fbSpreadOf(runs)
}

// fbSameTimes reports whether two runs of a cell happened at the same
// times: every attempt the wall saw, and every call's end.
func fbSameTimes(a, b fbCell) bool {
	if a.m.res.elapsed != b.m.res.elapsed || len(a.m.log) != len(b.m.log) || len(a.m.seq) != len(b.m.seq) {
		return false
	}
	for i := range a.m.log {
		if a.m.log[i].at != b.m.log[i].at {
			return false
		}
	}
	for i := range a.m.seq {
		if a.m.seq[i].res.elapsed != b.m.seq[i].res.elapsed {
			return false
		}
	}
	return true
}

// fbSpreadOf returns the cell of a jittered row made of its runs: their
// worst verdict, and their details merged (see fbMerge).
func fbSpreadOf(runs []fbCell) fbCell {
	c := runs[0]
	c.runs = runs
	details := make([]string, len(runs))
	for i, r := range runs {
		details[i] = r.detail
		c.verdict = max(c.verdict, r.verdict)
	}
	c.detail = fbMerge(details)
	return c
}

// all returns the runs of the cell: its own, or a jittered cell's.
func (c fbCell) all() []fbCell {
	if len(c.runs) > 0 {
		return c.runs
	}
	return []fbCell{c}
}

// verdicts returns the distinct verdicts of the cell's runs, best first.
func (c fbCell) verdicts() []fbVerdict {
	var vs []fbVerdict
	for _, r := range c.all() {
		if !slices.Contains(vs, r.verdict) {
			vs = append(vs, r.verdict)
		}
	}
	slices.Sort(vs)
	return vs
}

// verdictText names the cell's verdicts: "pass", or "pass|fail" for a
// jittered cell whose runs differ.
func (c fbCell) verdictText() string {
	var names []string
	for _, v := range c.verdicts() {
		names = append(names, v.String())
	}
	return strings.Join(names, "|")
}

// marks is the scorecard's mark of the cell: "✅ pass", or "✅ pass or
// ❌ fail".
func (c fbCell) marks() string {
	var ms []string
	for _, v := range c.verdicts() {
		ms = append(ms, fbMark(v))
	}
	return strings.Join(ms, " or ")
}

// passedOnly reports whether every run of the cell passed.
func (c fbCell) passedOnly() bool {
	return slices.Equal(c.verdicts(), []fbVerdict{fbPass})
}

// fbTotalsText counts a row's verdicts as the totals table prints them:
// the count for each verdict, or its range ("9–10") where a jittered cell
// got more than one.
func fbTotalsText(cells []fbCell) [4]string {
	var lo, hi [4]int
	for _, c := range cells {
		vs := c.verdicts()
		for _, v := range vs {
			hi[v]++
		}
		if len(vs) == 1 {
			lo[vs[0]]++
		}
	}
	var out [4]string
	for v := range out {
		out[v] = strconv.Itoa(lo[v])
		if hi[v] != lo[v] {
			out[v] += "–" + strconv.Itoa(hi[v])
		}
	}
	return out
}

// fbFigure is a figure in a cell's line: a count or a time.
var fbFigure = regexp.MustCompile(`\d+(?:\.\d+)?`)

// fbMerge renders texts, one line as each run of a jittered cell printed
// it, as one: each figure as it is when every run has it, a count that
// differs as its range ("6–7"), a time that differs as "~". Lines that
// differ in more than their figures are merged each with its like, and
// joined in order with " / ".
func fbMerge(texts []string) string {
	groups := map[string][]string{}
	var shapes []string
	for _, t := range texts {
		shape := fbFigure.ReplaceAllString(t, "#")
		if _, seen := groups[shape]; !seen {
			shapes = append(shapes, shape)
		}
		groups[shape] = append(groups[shape], t)
	}
	slices.Sort(shapes)
	merged := make([]string, len(shapes))
	for i, shape := range shapes {
		merged[i] = fbMergeLike(groups[shape])
	}
	return strings.Join(merged, " / ")
}

// fbMergeLike merges lines that differ only in their figures.
func fbMergeLike(texts []string) string {
	figures := make([][]string, len(texts))
	for i, t := range texts {
		figures[i] = fbFigure.FindAllString(t, -1)
	}
	n := 0
	return fbFigure.ReplaceAllStringFunc(texts[0], func(first string) string {
		k := n
		n++
		lo, hi, same, counts := first, first, true, !strings.Contains(first, ".")
		for _, fs := range figures[1:] {
			f := fs[k]
			same = same && f == first
			counts = counts && !strings.Contains(f, ".")
			if counts {
				a, _ := strconv.Atoi(f)
				l, _ := strconv.Atoi(lo)
				h, _ := strconv.Atoi(hi)
				if a < l {
					lo = f
				}
				if a > h {
					hi = f
				}
			}
		}
		switch {
		case same:
			return first
		case counts:
			return lo + "–" + hi
		}
		return "~"
	})
}

// TestFailoverBenchJitter checks how a jittered row's cells are merged:
// a figure the same in every run stays, a count that differs becomes its
// range, a time that differs "~"; the verdicts are every run's, best
// first, and the totals count a cell with two verdicts as a range.
func TestFailoverBenchJitter(t *testing.T) {
	assert.Equal(t, "2p/0f · gap 2.0s · 2.9s", fbMerge([]string{"2p/0f · gap 2.0s · 2.9s", "2p/0f · gap 2.0s · 2.9s"}))
	assert.Equal(t, "6–7p/1f · gap ~s · ~s", fbMerge([]string{"7p/1f · gap 0.3s · 15.3s", "6p/1f · gap 0.6s · 22.9s", "7p/1f · gap 0.9s · 31.0s"}))
	assert.Equal(t, "1p/0f · 0.6s / 1p/0f · 0.6s · TRUNCATED", fbMerge([]string{"1p/0f · 0.6s · TRUNCATED", "1p/0f · 0.6s"}))

	cell := func(v fbVerdict, detail string) fbCell { return fbCell{verdict: v, detail: detail} }
	c := fbSpreadOf([]fbCell{cell(fbFail, "7p/1f"), cell(fbPass, "6p/1f"), cell(fbFail, "7p/1f")})
	assert.Equal(t, "pass|fail", c.verdictText())
	assert.Equal(t, "✅ pass or ❌ fail", c.marks())
	assert.Equal(t, fbFail, c.verdict, "the worst")
	assert.Equal(t, "6–7p/1f", c.detail)
	assert.False(t, c.passedOnly())
	assert.Equal(t, [4]string{"1–2", "0", "0", "0–1"}, fbTotalsText([]fbCell{c, cell(fbPass, "")}))
	assert.Equal(t, fmt.Sprint([]fbCell{cell(fbSafe, "x")}), fmt.Sprint(cell(fbSafe, "x").all()))

	at := func(ds ...time.Duration) fbCell {
		var c fbCell
		for _, d := range ds {
			c.m.log = append(c.m.log, fbEntry{at: d})
		}
		return c
	}
	assert.True(t, fbSameTimes(at(0, 2*time.Second), at(0, 2*time.Second)))
	assert.False(t, fbSameTimes(at(0, 500*time.Millisecond), at(0, 500*time.Millisecond+1)), "a nanosecond apart: drawn")
	assert.False(t, fbSameTimes(at(0), at(0, 0)))
}
