package interop

// The ride-through picture, docs/ride-through.svg: one row per client
// through the outage table's 502 outage of 3 minutes under the 8-minute
// turn deadline, each attempt a mark at the time it reached the provider
// and the call's end (the answer, or giving up) marked after it.
// TestOutageTable builds it from the runs it has just made and writes it
// with the table (LLMRETRY_WRITE_TABLE=1). The drawing is plain SVG made
// with fmt: no font, script or stylesheet is loaded.

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rideMark is one mark of a row: one attempt, or several that reached the
// provider together (at one instant, or within a span too short to draw
// apart).
type rideMark struct {
	from, to time.Duration // when the attempts reached the provider (from == to: one instant)
	n        int           // how many attempts the mark stands for
	probe    bool          // a coordinated Transport's probe, sent for all the calls
}

// rideRow is one client's row.
type rideRow struct {
	label    string // the client, left of the row
	detail   string // how it is set up, under the label
	marks    []rideMark
	ok       bool          // the call answered (a crowd: every call did)
	answered time.Duration // ok: the first answer (one call: the answer)
	end      time.Duration // the answer (a crowd: the last one) or giving up
	note     string        // written after the end mark
}

// attempts returns how many attempts the row's marks stand for.
func (r rideRow) attempts() int {
	n := 0
	for _, m := range r.marks {
		n += m.n
	}
	return n
}

// ridePicture is the whole picture.
type ridePicture struct {
	title    string
	caption  string        // one line under the rows
	fault    string        // what the provider answers while down, over the shading
	outage   time.Duration // the provider is down from 0 to outage
	deadline time.Duration // the turn's deadline: the axis ends there
	rows     []rideRow
}

// The picture's geometry, in SVG user units (pixels at 900 px wide).
const (
	svgWidth   = 900
	plotLeft   = 232 // the axis's 0
	plotRight  = 862 // the axis's deadline
	rowsTop    = 104 // the first row's top
	rowHeight  = 42
	tickHeight = 14 // an attempt's mark
)

// Colours.
const (
	colInk    = "#222"
	colFaint  = "#767676"
	colGrid   = "#e3e3e3"
	colOutage = "#fbe1df"
	colDown   = "#c0392b"
	colProbe  = "#7b3fc4"
	colAnswer = "#1e8a3c"
	colGiveUp = "#d0281f"
	colRowAlt = "#f6f7f9"
)

// xAt returns the x of time d on the axis of p.
func (p ridePicture) xAt(d time.Duration) float64 {
	return axisX(d, p.deadline, plotLeft, plotRight)
}

// axisX returns the x of time d on a time axis drawn from left (0) to
// right (end); pacing.svg's axis too.
func axisX(d, end time.Duration, left, right float64) float64 {
	return left + (right-left)*d.Seconds()/end.Seconds()
}

// svgHeight returns the picture's height.
func (p ridePicture) svgHeight() int { return rowsTop + len(p.rows)*rowHeight + 58 }

// esc escapes s for XML text and attribute values.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// px renders coordinate v rounded to a tenth, for a short file.
func px(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

// checkPath and crossPath draw the answer and the give-up centred on x, y.
func checkPath(x, y float64) string {
	return fmt.Sprintf("M%s %sL%s %sL%s %s", px(x-6), px(y), px(x-1.5), px(y+5), px(x+7), px(y-7))
}

func crossPath(x, y float64) string {
	return fmt.Sprintf("M%s %sL%s %sM%s %sL%s %s", px(x-5.5), px(y-5.5), px(x+5.5), px(y+5.5), px(x-5.5), px(y+5.5), px(x+5.5), px(y-5.5))
}

// renderRideThrough draws p as a standalone SVG document.
func renderRideThrough(p ridePicture) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	h := p.svgHeight()
	rowsBottom := float64(rowsTop + len(p.rows)*rowHeight)
	x0, xOut, xEnd := p.xAt(0), p.xAt(p.outage), p.xAt(p.deadline)

	w(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="Helvetica, Arial, sans-serif" font-size="13" fill="%s">`+"\n",
		svgWidth, h, svgWidth, h, colInk)
	w("<title>%s</title>\n<desc>%s</desc>\n", esc(p.title), esc(p.caption))
	w(`<rect width="%d" height="%d" fill="#fff"/>`+"\n", svgWidth, h)
	w(`<text x="16" y="28" font-size="17" font-weight="bold">%s</text>`+"\n", esc(p.title))

	// The legend.
	lx, ly := 16.0, 54.0
	item := func(mark string, textAt float64, text string, width float64) {
		w(`<g class="legend">%s<text x="%s" y="%s">%s</text></g>`+"\n", mark, px(lx+textAt), px(ly+4.5), esc(text))
		lx += width
	}
	tick := func(col string) string {
		return fmt.Sprintf(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2"/>`, px(lx+4), px(ly-7), px(lx+4), px(ly+7), col)
	}
	item(tick(colInk), 14, "attempt", 82)
	item(tick(colProbe), 14, "probe (one for all the calls)", 206)
	item(fmt.Sprintf(`<rect x="%s" y="%s" width="3" height="14" fill="%s"/><text x="%s" y="%s" font-size="10">×n</text>`,
		px(lx+2), px(ly-7), colInk, px(lx+7), px(ly-2)), 26, "n attempts together", 182)
	item(fmt.Sprintf(`<path d="%s" fill="none" stroke="%s" stroke-width="3" stroke-linecap="round" stroke-linejoin="round"/>`, checkPath(lx+4, ly), colAnswer), 16, "answer", 80)
	item(fmt.Sprintf(`<path d="%s" fill="none" stroke="%s" stroke-width="3" stroke-linecap="round"/>`, crossPath(lx+4, ly), colGiveUp), 16, "gave up", 86)
	item(fmt.Sprintf(`<rect x="%s" y="%s" width="12" height="14" fill="%s"/>`, px(lx-2), px(ly-7), colOutage), 16, "provider down", 0)

	// The rows' backgrounds, the outage, the minutes and the deadline.
	for i := range p.rows {
		if i%2 == 1 {
			w(`<rect x="0" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", rowsTop+i*rowHeight, svgWidth, rowHeight, colRowAlt)
		}
	}
	w(`<rect class="outage" x="%s" y="%d" width="%s" height="%s" fill="%s" fill-opacity="0.85"/>`+"\n",
		px(x0), rowsTop-14, px(xOut-x0), px(rowsBottom-rowsTop+14), colOutage)
	for m := time.Duration(0); m <= p.deadline; m += time.Minute {
		x := px(p.xAt(m))
		w(`<line x1="%s" y1="%d" x2="%s" y2="%s" stroke="%s"/>`+"\n", x, rowsTop-14, x, px(rowsBottom), colGrid)
		label := strconv.Itoa(int(m / time.Minute))
		if m+time.Minute > p.deadline {
			label += " min"
		}
		w(`<text x="%s" y="%s" text-anchor="middle" fill="%s">%s</text>`+"\n", x, px(rowsBottom+17), colFaint, label)
	}
	w(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s"/>`+"\n", px(x0), px(rowsBottom), px(xEnd), px(rowsBottom), colFaint)
	w(`<text x="%s" y="%d" text-anchor="middle" font-size="12" fill="%s">%s</text>`+"\n", px((x0+xOut)/2), rowsTop-18, colDown, esc(p.fault))
	w(`<line x1="%s" y1="%d" x2="%s" y2="%s" stroke="%s" stroke-width="1.5" stroke-dasharray="5 3"/>`+"\n", px(xOut), rowsTop-14, px(xOut), px(rowsBottom), colDown)
	w(`<text x="%s" y="%d" font-size="12" fill="%s">back at %s</text>`+"\n", px(xOut+5), rowsTop-18, colDown, esc(fmtClock(p.outage)))
	w(`<line x1="%s" y1="%d" x2="%s" y2="%s" stroke="%s" stroke-width="1.5" stroke-dasharray="5 3"/>`+"\n", px(xEnd), rowsTop-14, px(xEnd), px(rowsBottom), colInk)
	w(`<text x="%s" y="%d" text-anchor="end" font-size="12">turn deadline %s</text>`+"\n", px(xEnd), rowsTop-18, esc(fmtClock(p.deadline)))

	// The rows.
	for i, r := range p.rows {
		top := float64(rowsTop + i*rowHeight)
		y := top + rowHeight/2
		w(`<g class="row">` + "\n")
		w(`<text x="16" y="%s" font-weight="bold">%s</text>`+"\n", px(y-2), esc(r.label))
		w(`<text x="16" y="%s" font-size="11" fill="%s">%s</text>`+"\n", px(y+12), colFaint, esc(r.detail))
		if r.ok && r.answered < r.end {
			w(`<rect class="answered" x="%s" y="%s" width="%s" height="%d" fill="%s" fill-opacity="0.3"><title>answers from %s to %s</title></rect>`+"\n",
				px(p.xAt(r.answered)), px(y-tickHeight/2), px(max(p.xAt(r.end)-p.xAt(r.answered), 1)), tickHeight, colAnswer, fmtFine(r.answered), fmtFine(r.end))
		}
		for _, m := range r.marks {
			class, col, what := "attempt", colInk, "attempt"
			if m.probe {
				class, col, what = "probe", colProbe, "probe"
			}
			if m.n > 1 {
				what += "s"
			}
			title := fmt.Sprintf("%s at %s", what, fmtFine(m.from))
			if m.n > 1 {
				title = fmt.Sprintf("%d %s", m.n, title)
			}
			if m.to > m.from {
				title = fmt.Sprintf("%d %s from %s to %s", m.n, what, fmtFine(m.from), fmtFine(m.to))
			}
			x1, x2 := p.xAt(m.from), max(p.xAt(m.to), p.xAt(m.from)+2)
			if m.n == 1 {
				w(`<line class="%s" x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="1.5"><title>%s</title></line>`+"\n",
					class, px(x1), px(y-tickHeight/2), px(x1), px(y+tickHeight/2), col, esc(title))
				continue
			}
			w(`<rect class="%s" x="%s" y="%s" width="%s" height="%d" fill="%s"><title>%s</title></rect>`+"\n",
				class, px(x1-1), px(y-tickHeight/2), px(x2-x1+1), tickHeight, col, esc(title))
			w(`<text x="%s" y="%s" font-size="10" fill="%s">×%d</text>`+"\n", px(x1+3), px(y-tickHeight/2-2), col, m.n)
		}
		xe := p.xAt(r.end)
		if r.ok {
			w(`<path class="answer" d="%s" fill="none" stroke="%s" stroke-width="3" stroke-linecap="round" stroke-linejoin="round"><title>answered at %s</title></path>`+"\n",
				checkPath(xe+9, y), colAnswer, fmtFine(r.end))
		} else {
			w(`<path class="give-up" d="%s" fill="none" stroke="%s" stroke-width="3" stroke-linecap="round"><title>gave up at %s</title></path>`+"\n",
				crossPath(xe+8, y), colGiveUp, fmtFine(r.end))
		}
		noteCol := colGiveUp
		if r.ok {
			noteCol = colAnswer
		}
		w(`<text x="%s" y="%s" font-size="12.5" fill="%s">%s</text>`+"\n", px(xe+22), px(y+4.5), noteCol, esc(r.note))
		w("</g>\n")
	}
	w(`<text x="16" y="%d" font-size="11.5" fill="%s">%s</text>`+"\n", h-12, colFaint, esc(p.caption))
	w("</svg>\n")
	return b.String()
}

// fmtClock renders d as minutes:seconds, for the axis's labels.
func fmtClock(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%d:%02d", d/time.Minute, (d%time.Minute)/time.Second)
}

// --- The picture from the runs ---

// rideClients names the outage table's clients in the picture, in order:
// the table's name, the row's label and detail, and how many attempts the
// detail says the client makes before it gives up (1 + its retries).
var rideClients = []struct {
	client, label, detail string
	tries                 int
}{
	{"bare client", "bare client", "http.Client, no retry", 1},
	{"openai-go defaults", "openai-go's own retry †", "as shipped: 2 retries, 0.5 s·2ⁿ", 3},
	{"retryablehttp default", "go-retryablehttp", "NewClient(): 4 retries, 1–30 s", 5},
	{"failsafehttp 1–30 s", "failsafe-go", "2 retries, backoff 1–30 s", 3},
	{"llmretry zero Policy", "llmretry, zero Policy †", "Policy{}: 6 retries, jittered", 7},
	{"llmretry host policy", "llmretry, host policy", "Waits 15s, 45s, 2m, 4m; Reserve 1m", 0},
}

// rideCrowd is the crowd of the picture's last row: outage (a), 100 calls
// through one coordinated Transport with the host policy.
const (
	rideCrowdScenario = "a"
	rideCrowdClient   = "llmretry host policy, coordinated"
)

// callNote is the note after a single call's end mark. A give-up's note
// is its time only: the row's detail says how many attempts the client
// makes, and a longer note would run into the recovery line.
func callNote(r outageRun, recovery time.Duration) string {
	if !r.ok {
		return "gave up at " + fmtDur(r.elapsed)
	}
	n := fmt.Sprintf("%d attempts", len(r.at))
	if len(r.at) == 1 {
		n = "1 attempt"
	}
	return fmt.Sprintf("answered at %s, %s after recovery · %s", fmtDur(r.elapsed), fmtDur(r.lag(recovery)), n)
}

// ridePictureOf builds the picture from the outage table's runs (the 502
// row, the 3-minute column; the first run of a jittered client) and the
// crowd runs (outage (a)). It fails if a run it needs is missing, or if the
// crowd sent attempts that the picture has no mark for.
func ridePictureOf(cells map[string]map[time.Duration]map[string]outageCell, crowds []crowdRun) (ridePicture, error) {
	fault, outage := outageFaults[0], 3*time.Minute
	p := ridePicture{
		title: fmt.Sprintf("502 for %d minutes, turn deadline %d minutes: who answers, and when?",
			outage/time.Minute, turnDeadline/time.Minute),
		fault:    "provider answers 502 Bad Gateway",
		outage:   outage,
		deadline: turnDeadline,
	}
	if fault.reply.Status != http.StatusBadGateway {
		return p, fmt.Errorf("the table's first fault is %s, not a 502", fault.name)
	}
	byLength, ok := cells[fault.name]
	if !ok || !slices.Contains(outageLengths, outage) {
		return p, fmt.Errorf("no %s / down %s cells", fault.name, fmtDur(outage))
	}
	for _, c := range rideClients {
		cell, ok := byLength[outage][c.client]
		if !ok || len(cell.runs) == 0 {
			return p, fmt.Errorf("no run of %s", c.client)
		}
		r := cell.runs[0]
		row := rideRow{label: c.label, detail: c.detail, ok: r.ok, answered: r.elapsed, end: r.elapsed, note: callNote(r, outage)}
		for _, at := range r.at {
			row.marks = append(row.marks, rideMark{from: at, to: at, n: 1})
		}
		p.rows = append(p.rows, row)
	}

	i := slices.IndexFunc(crowds, func(r crowdRun) bool {
		return r.scenario.id == rideCrowdScenario && r.client.name == rideCrowdClient
	})
	if i < 0 {
		return p, fmt.Errorf("no crowd run (%s) %s", rideCrowdScenario, rideCrowdClient)
	}
	cr := crowds[i]
	if cr.scenario.recovery != outage || cr.scenario.fault.Status != http.StatusBadGateway {
		return p, fmt.Errorf("crowd (%s) is %s, not a 502 for %s", cr.scenario.id, cr.scenario.name, fmtDur(outage))
	}
	p.caption = "Simulated in testing/synctest (exact times) by interop's TestOutageTable; " +
		"† jittered: its first sampled run. The crowd's 502s take " + fmtDur(cr.scenario.faultTime) + " each."
	row, err := crowdRow(cr)
	if err != nil {
		return p, err
	}
	p.rows = append(p.rows, row)
	return p, nil
}

// crowdRow is the row of a coordinated crowd: the calls' first attempts
// together at 0, each probe, the calls' attempts once released (together:
// a second's spread is under two pixels), and the span of the answers.
func crowdRow(cr crowdRun) (rideRow, error) {
	s := cr.scenario
	row := rideRow{
		label:  fmt.Sprintf("llmretry, %d calls †", s.calls),
		detail: "shared NewCoordinated, host policy",
		ok:     cr.ok() == s.calls,
	}
	if len(cr.probesAt) == 0 {
		return row, errors.New("the crowd sent no probe")
	}
	lastProbe := cr.probesAt[len(cr.probesAt)-1]
	var first, released []time.Duration
	probes := 0
	for _, at := range cr.at {
		switch {
		case at == 0:
			first = append(first, at)
		case at > lastProbe:
			released = append(released, at)
		default:
			probes++
		}
	}
	if probes != len(cr.probesAt) {
		return row, fmt.Errorf("the crowd sent %d attempts between its first ones and its last probe, %d of them probes", probes, len(cr.probesAt))
	}
	if len(first) > 0 {
		row.marks = append(row.marks, rideMark{n: len(first)})
	}
	for _, at := range cr.probesAt {
		row.marks = append(row.marks, rideMark{from: at, to: at, n: 1, probe: true})
	}
	if len(released) > 0 {
		row.marks = append(row.marks, rideMark{from: slices.Min(released), to: slices.Max(released), n: len(released)})
	}
	var answers []time.Duration
	for i, err := range cr.errs {
		if err == nil {
			answers = append(answers, cr.done[i])
		}
	}
	if len(answers) == 0 {
		row.end = slices.Max(cr.done)
		row.note = fmt.Sprintf("0/%d answered · %d probes", s.calls, len(cr.probesAt))
		return row, nil
	}
	row.answered, row.end = slices.Min(answers), slices.Max(answers)
	row.note = fmt.Sprintf("%d/%d answered, %s–%s · %d probes", len(answers), s.calls, fmtDur(row.answered), fmtDur(row.end), len(cr.probesAt))
	return row, nil
}

// maxSVGSize is the most docs/ride-through.svg may weigh.
const maxSVGSize = 40 << 10

// rideThroughAsserts asserts what picture p is drawn to show, and that svg
// draws it: the peers' rows, and the zero Policy's, end in a give-up
// before the provider is back (the peers' within half a minute); the host
// policy's row and the crowd's end in answers within 10 s of the recovery,
// the host policy's at the time its own schedule predicts; the give-ups
// come after the attempts that the rows' details say; the crowd's
// probes all go during the outage but the last; and svg has one row per
// client, a mark per attempt and one end mark per row.
func rideThroughAsserts(t *testing.T, p ridePicture, svg string) {
	t.Helper()
	require.Len(t, p.rows, len(rideClients)+1, "a row per client and the crowd's")
	peers := len(rideClients) - 2 // the rows before llmretry's
	for i, r := range p.rows[:len(rideClients)-1] {
		assert.False(t, r.ok, "%s: ends in a give-up", r.label)
		assert.Less(t, r.end, p.outage, "%s: gives up before the provider is back", r.label)
		assert.Equal(t, rideClients[i].tries, r.attempts(), "%s: the attempts its detail (%s) says", r.label, r.detail)
		if i < peers {
			assert.Less(t, r.end, 30*time.Second, "%s: gives up within seconds", r.label)
		}
	}
	for _, r := range p.rows[len(rideClients)-1:] {
		assert.True(t, r.ok, "%s: ends in an answer", r.label)
		assert.GreaterOrEqual(t, r.answered, p.outage+genTime, "%s: no answer before the provider can give one", r.label)
		assert.LessOrEqual(t, r.end, p.outage+10*time.Second, "%s: answers within 10 s of the recovery", r.label)
	}
	host := p.rows[len(rideClients)-1]
	want := predict(hostPolicy(), 0, p.outage)
	assert.Equal(t, want.elapsed, host.end, "host policy: answers when its schedule says")
	assert.Equal(t, len(want.at), host.attempts(), "host policy: attempts")
	var probes []time.Duration
	for _, m := range p.rows[len(p.rows)-1].marks {
		if m.probe {
			probes = append(probes, m.from)
		}
	}
	if assert.NotEmpty(t, probes, "the crowd's probes") {
		last := probes[len(probes)-1]
		assert.GreaterOrEqual(t, last, p.outage, "the crowd's last probe finds the provider back")
		for _, at := range probes[:len(probes)-1] {
			assert.Less(t, at, p.outage, "a probe that failed went during the outage")
		}
	}

	assert.Less(t, len(svg), maxSVGSize, "the SVG's size")
	shape, err := parseRideThrough(svg)
	require.NoError(t, err, "the SVG parses as XML")
	assert.NotEmpty(t, shape.viewBox, "the SVG has a viewBox")
	require.Len(t, shape.rows, len(p.rows), "one row per client")
	for i, r := range p.rows {
		got := shape.rows[i]
		assert.Equal(t, len(r.marks), got.classes["attempt"]+got.classes["probe"], "%s: a mark per attempt (or group of them)", r.label)
		if r.ok {
			assert.Equal(t, 1, got.classes["answer"], "%s: an answer mark", r.label)
			assert.Zero(t, got.classes["give-up"], "%s: no give-up mark", r.label)
		} else {
			assert.Equal(t, 1, got.classes["give-up"], "%s: a give-up mark", r.label)
			assert.Zero(t, got.classes["answer"], "%s: no answer mark", r.label)
		}
		assert.Contains(t, got.texts, r.label, "row %d's label", i)
	}
}

// --- Reading the SVG back ---

// svgShape is what the tests read back from a rendered picture.
type svgShape struct {
	viewBox string
	rows    []svgRow
}

// svgRow is one <g class="row">: its texts and its marks by class.
type svgRow struct {
	texts   []string
	classes map[string]int // marks by class: attempt, probe, answer, give-up, answered
	xs      []float64      // x of each attempt or probe mark, in order
	titles  []string       // the marks' titles, in order
}

// parseRideThrough parses svg with encoding/xml and returns its shape: an
// error if it is not well-formed XML, or not an svg document.
func parseRideThrough(svg string) (svgShape, error) {
	var shape svgShape
	var row *svgRow
	rowDepth := 0
	var inText, inTitle bool
	var mark bool // the open <title> belongs to a mark
	err := walkSVG(svg, func(tok xml.Token, depth int) error {
		switch tok := tok.(type) {
		case xml.StartElement:
			attr := func(name string) string {
				for _, a := range tok.Attr {
					if a.Name.Local == name {
						return a.Value
					}
				}
				return ""
			}
			if depth == 1 {
				shape.viewBox = attr("viewBox")
			}
			switch class := attr("class"); {
			case tok.Name.Local == "g" && class == "row":
				if row != nil {
					return errors.New("a row inside a row")
				}
				shape.rows = append(shape.rows, svgRow{classes: map[string]int{}})
				row, rowDepth = &shape.rows[len(shape.rows)-1], depth
			case row != nil && class != "":
				row.classes[class]++
				if class == "attempt" || class == "probe" {
					x := attr("x1")
					if x == "" {
						x = attr("x")
					}
					v, err := strconv.ParseFloat(x, 64)
					if err != nil {
						return fmt.Errorf("a %s mark at x %q: %v", class, x, err)
					}
					row.xs = append(row.xs, v)
					mark = true
				}
			case row != nil && tok.Name.Local == "text":
				inText = true
			case row != nil && tok.Name.Local == "title" && mark:
				inTitle = true
			}
		case xml.EndElement:
			if row != nil && depth == rowDepth {
				row = nil
			}
			if tok.Name.Local == "title" {
				inTitle, mark = false, false
			}
			inText = false
		case xml.CharData:
			switch {
			case inText:
				row.texts = append(row.texts, string(tok))
			case inTitle:
				row.titles = append(row.titles, string(tok))
			}
		}
		return nil
	})
	return shape, err
}

// walkSVG decodes svg with encoding/xml and calls each with every token
// and the depth of the element it is in or closes (the root at 1): an
// error if svg is not well-formed XML or not an svg document, or each's.
func walkSVG(svg string, each func(tok xml.Token, depth int) error) error {
	d := xml.NewDecoder(strings.NewReader(svg))
	depth := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if start, ok := tok.(xml.StartElement); ok {
			depth++
			if depth == 1 && (start.Name.Local != "svg" || start.Name.Space != "http://www.w3.org/2000/svg") {
				return fmt.Errorf("root element %s %s, not svg", start.Name.Space, start.Name.Local)
			}
		}
		if err := each(tok, depth); err != nil {
			return err
		}
		if _, ok := tok.(xml.EndElement); ok {
			depth--
		}
	}
}

// --- The drawing, tested ---

func TestRenderRideThrough(t *testing.T) {
	p := ridePicture{
		title:    "A <test> & its picture",
		caption:  "caption",
		fault:    "down",
		outage:   3 * time.Minute,
		deadline: 8 * time.Minute,
		rows: []rideRow{
			{label: "gives up", detail: "three tries", end: 3 * time.Second, note: "gave up at 3s",
				marks: []rideMark{{n: 1}, {from: time.Second, to: time.Second, n: 1}, {from: 3 * time.Second, to: 3 * time.Second, n: 1}}},
			{label: "rides through & answers", detail: "<two tries>", ok: true, answered: 182 * time.Second, end: 182 * time.Second, note: "answered",
				marks: []rideMark{{n: 1}, {from: 3 * time.Minute, to: 3 * time.Minute, n: 1}}},
			{label: "crowd", detail: "", ok: true, answered: 182 * time.Second, end: 185 * time.Second, note: "100/100",
				marks: []rideMark{{n: 100}, {from: time.Minute, to: time.Minute, n: 1, probe: true}, {from: 3 * time.Minute, to: 3 * time.Minute, n: 1, probe: true},
					{from: 182 * time.Second, to: 183 * time.Second, n: 99}}},
		},
	}
	svg := renderRideThrough(p)
	shape, err := parseRideThrough(svg)
	require.NoError(t, err, "the SVG parses as XML")
	assert.Equal(t, fmt.Sprintf("0 0 %d %d", svgWidth, p.svgHeight()), shape.viewBox)
	require.Len(t, shape.rows, 3, "one row per client")

	assert.Equal(t, map[string]int{"attempt": 3, "give-up": 1}, shape.rows[0].classes)
	assert.Equal(t, map[string]int{"attempt": 2, "answer": 1}, shape.rows[1].classes)
	assert.Equal(t, map[string]int{"attempt": 2, "probe": 2, "answer": 1, "answered": 1}, shape.rows[2].classes)
	assert.Equal(t, []string{"attempt at 0.0s", "attempt at 1.0s", "attempt at 3.0s"}, shape.rows[0].titles)
	assert.Equal(t, []string{"100 attempts at 0.0s", "probe at 1m00s", "probe at 3m00s", "99 attempts from 3m02s to 3m03s"}, shape.rows[2].titles)

	assert.Equal(t, []string{"gives up", "three tries", "gave up at 3s"}, shape.rows[0].texts)
	assert.Equal(t, []string{"rides through & answers", "<two tries>", "answered"}, shape.rows[1].texts, "text is escaped")
	assert.Contains(t, shape.rows[2].texts, "×100")

	// A single attempt's mark sits at its time on the axis; a group's
	// rectangle starts a pixel before it.
	assert.Equal(t, roundTenths([]float64{plotLeft, plotLeft + (plotRight-plotLeft)/480.0, plotLeft + 3*(plotRight-plotLeft)/480.0}),
		shape.rows[0].xs)
	assert.Equal(t, roundTenths([]float64{plotLeft - 1, plotLeft + (plotRight-plotLeft)/8.0, plotLeft + 3*(plotRight-plotLeft)/8.0, plotLeft + 182*(plotRight-plotLeft)/480.0 - 1}),
		shape.rows[2].xs)
	assert.Equal(t, float64(plotRight), p.xAt(p.deadline), "the axis ends at the deadline")

	_, err = parseRideThrough(strings.Replace(svg, "</svg>", "", 1))
	assert.Error(t, err, "a truncated SVG does not parse")
}

// roundTenths rounds each of vs to a tenth, as the SVG's coordinates are.
func roundTenths(vs []float64) []float64 {
	out := make([]float64, len(vs))
	for i, v := range vs {
		out[i] = math.Round(v*10) / 10
	}
	return out
}
