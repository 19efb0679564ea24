package interop

// The pacing picture, docs/pacing.svg: one crowd of 100 calls arriving
// together against the OpenAI request bucket (ratelimit_test.go), drawn as
// the calls admitted over time: ideal pacing, one coordinated Transport
// with the host policy (whatever the library does when it is drawn) and
// one llmretry.New Transport per call, under the line of what the limit
// allows; beneath, the 429s each client met, per second. TestRateLimitCrowd
// builds it from the runs it has just made and writes it with the table
// (LLMRETRY_WRITE_TABLE=1). Plain SVG made with fmt, as ride-through.svg.

import (
	"encoding/xml"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pacingSeries is one client's line: when each of its calls' requests
// was admitted, and when each 429 reached the provider.
type pacingSeries struct {
	class    string          // "ideal", "coordinated", "independent": the line's class
	label    string          // the legend's name
	colour   string          // the line's colour
	admitted []time.Duration // admissions, ascending
	refused  []time.Duration // 429s, ascending (none for ideal pacing)
	answered int             // calls answered
	last     time.Duration   // the last answer (answered > 0)
}

// pacingPicture is the whole picture.
type pacingPicture struct {
	title   string
	caption string
	limit   string        // the limit line's legend
	calls   int           // the y axis's top
	burst   int           // the limit: requests at once …
	every   time.Duration // … then one back every every
	end     time.Duration // the x axis's end
	series  []pacingSeries
}

// The picture's geometry, in SVG user units (svgWidth wide, as
// ride-through.svg).
const (
	pacingLeft     = 64  // the x axis's 0
	pacingRight    = 862 // the x axis's end
	pacingTop      = 84  // y of calls admitted = calls
	pacingBottom   = 344 // y of none admitted
	pacingLaneGap  = 64  // from the plot's bottom to the first 429 lane's base
	pacingLaneStep = 46  // between 429 lanes
	pacingLaneH    = 22  // the tallest 429 bar
	pacingLegendW  = 400 // the legend's width
)

// Colours: ride-through.svg's, and two of its own for the clients.
const (
	colIdeal       = colAnswer
	colCoordinated = "#2f6fd0"
	colIndependent = "#d9822b"
	colLimit       = colFaint
	colRefused     = colDown
)

// xAt returns the x of time d.
func (p pacingPicture) xAt(d time.Duration) float64 {
	return axisX(d, p.end, pacingLeft, pacingRight)
}

// yAt returns the y of n calls admitted.
func (p pacingPicture) yAt(n int) float64 {
	return pacingBottom - (pacingBottom-pacingTop)*float64(n)/float64(p.calls)
}

// lanes returns the series that have 429 lanes: all but ideal pacing.
func (p pacingPicture) lanes() []pacingSeries {
	var l []pacingSeries
	for _, s := range p.series {
		if s.class != "ideal" {
			l = append(l, s)
		}
	}
	return l
}

// svgHeight returns the picture's height.
func (p pacingPicture) svgHeight() int {
	return pacingBottom + pacingLaneGap + (len(p.lanes())-1)*pacingLaneStep + 70
}

// pacingBin is the 429s of one second: count of them from at to at + 1 s.
type pacingBin struct {
	at    time.Duration
	count int
}

// bins counts times by whole second, in order.
func bins(times []time.Duration) []pacingBin {
	var out []pacingBin
	for _, t := range times {
		at := t.Truncate(time.Second)
		if n := len(out); n > 0 && out[n-1].at == at {
			out[n-1].count++
			continue
		}
		out = append(out, pacingBin{at: at, count: 1})
	}
	return out
}

// stepPath returns the path of the calls admitted over time: flat, then
// up by the admissions at each instant, from 0 to the axis's end.
func (p pacingPicture) stepPath(admitted []time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "M%s %s", px(p.xAt(0)), px(p.yAt(0)))
	for i := 0; i < len(admitted); {
		j := i
		for j < len(admitted) && admitted[j] == admitted[i] {
			j++
		}
		fmt.Fprintf(&b, "H%sV%s", px(p.xAt(admitted[i])), px(p.yAt(j)))
		i = j
	}
	fmt.Fprintf(&b, "H%s", px(p.xAt(p.end)))
	return b.String()
}

// renderPacing draws p as a standalone SVG document.
func renderPacing(p pacingPicture) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	h := p.svgHeight()
	w(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="Helvetica, Arial, sans-serif" font-size="13" fill="%s">`+"\n",
		svgWidth, h, svgWidth, h, colInk)
	w("<title>%s</title>\n<desc>%s</desc>\n", esc(p.title), esc(p.caption))
	w(`<rect width="%d" height="%d" fill="#fff"/>`+"\n", svgWidth, h)
	w(`<text x="16" y="28" font-size="17" font-weight="bold">%s</text>`+"\n", esc(p.title))
	w(`<text x="16" y="52" font-size="12" fill="%s">calls admitted (the provider took the request), of %d arriving together at 0</text>`+"\n", colFaint, p.calls)

	// The grid: calls every 20, time every 30 s (labelled each minute).
	for n := 20; n <= p.calls; n += 20 {
		y := px(p.yAt(n))
		w(`<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="%s"/>`+"\n", pacingLeft, y, pacingRight, y, colGrid)
		w(`<text x="%d" y="%s" text-anchor="end" fill="%s">%d</text>`+"\n", pacingLeft-6, px(p.yAt(n)+4.5), colFaint, n)
	}
	for d := time.Duration(0); d <= p.end; d += 30 * time.Second {
		x := px(p.xAt(d))
		w(`<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="%s"/>`+"\n", x, pacingTop, x, pacingBottom, colGrid)
		if d%time.Minute == 0 {
			w(`<text x="%s" y="%d" text-anchor="middle" fill="%s">%d</text>`+"\n", x, pacingBottom+17, colFaint, int(d/time.Second))
		}
	}
	w(`<text x="%d" y="%d" text-anchor="end" font-size="12" fill="%s">time since the calls arrived (s)</text>`+"\n", pacingRight, pacingBottom+34, colFaint)
	w(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`+"\n", pacingLeft, pacingBottom, pacingRight, pacingBottom, colFaint)

	// What the limit allows: burst at 0, then one every every, up to calls.
	full := time.Duration(p.calls-p.burst) * p.every
	w(`<path class="limit" d="M%s %sL%s %sL%s %s" fill="none" stroke="%s" stroke-width="1.5" stroke-dasharray="6 4"><title>%s</title></path>`+"\n",
		px(p.xAt(0)), px(p.yAt(p.burst)), px(p.xAt(full)), px(p.yAt(p.calls)), px(p.xAt(p.end)), px(p.yAt(p.calls)), colLimit, esc(p.limit))

	// The lines, ideal pacing first (beneath).
	for _, s := range p.series {
		width := "2.5"
		if s.class == "ideal" {
			width = "5"
		}
		w(`<path class="admitted %s" d="%s" fill="none" stroke="%s" stroke-width="%s" stroke-linejoin="round" stroke-opacity="0.9"><title>%s: %d admitted</title></path>`+"\n",
			s.class, p.stepPath(s.admitted), s.colour, width, esc(s.label), len(s.admitted))
	}

	// The legend, in the plot's upper right (no line passes there: the
	// crowd is all admitted along its top, or far below it).
	lx, ly := p.xAt(p.end)-pacingLegendW, p.yAt(p.calls)+16
	w(`<rect x="%s" y="%s" width="%d" height="%d" fill="#fff" fill-opacity="0.92" stroke="%s"/>`+"\n", px(lx-8), px(ly-4), pacingLegendW, 22*(len(p.series)+1)+8, colGrid)
	item := func(i int, swatch, text string) {
		y := ly + 14 + float64(22*i)
		w(`<g class="legend">%s<text x="%s" y="%s" font-size="12">%s</text></g>`+"\n",
			fmt.Sprintf(swatch, px(lx), px(y-4), px(lx+22), px(y-4)), px(lx+30), px(y), esc(text))
	}
	item(0, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="`+colLimit+`" stroke-width="1.5" stroke-dasharray="6 4"/>`, p.limit)
	for i, s := range p.series {
		text := fmt.Sprintf("%s: %d/%d answered", s.label, s.answered, p.calls)
		if s.answered > 0 {
			text += " by " + fmtDur(s.last)
		}
		item(i+1, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="`+s.colour+`" stroke-width="3"/>`, text)
	}

	// The 429 lanes: a bar per second that had any, its height by the log
	// of its count (one scale for all lanes: the crowd's first 429s, all
	// at once, would flatten the rest on a linear one).
	most := 1
	for _, s := range p.lanes() {
		for _, bin := range bins(s.refused) {
			most = max(most, bin.count)
		}
	}
	barW := max(p.xAt(time.Second)-p.xAt(0), 1.2)
	for i, s := range p.lanes() {
		base := float64(pacingBottom + pacingLaneGap + i*pacingLaneStep)
		w(`<g class="lane %s">`+"\n", s.class)
		w(`<text x="%d" y="%s" font-size="12"><tspan fill="%s" font-weight="bold">%d 429s</tspan> met by %s (429s a second, log scale, the most %d)</text>`+"\n",
			pacingLeft, px(base-pacingLaneH-6), colRefused, len(s.refused), esc(s.label), most)
		w(`<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="%s"/>`+"\n", pacingLeft, px(base), pacingRight, px(base), colGrid)
		for _, bin := range bins(s.refused) {
			bh := max(pacingLaneH*math.Log1p(float64(bin.count))/math.Log1p(float64(most)), 1.5)
			w(`<rect class="refused" x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%d at %d s</title></rect>`+"\n",
				px(p.xAt(bin.at)), px(base-bh), px(barW), px(bh), colRefused, bin.count, int(bin.at/time.Second))
		}
		w("</g>\n")
	}
	for i, line := range strings.Split(p.caption, "\n") {
		w(`<text x="16" y="%d" font-size="11.5" fill="%s">%s</text>`+"\n", h-42+15*i, colFaint, esc(line))
	}
	w("</svg>\n")
	return b.String()
}

// --- The picture from the runs ---

// The picture's runs: the OpenAI request bucket, all calls at once.
const (
	pacingSpec        = "openai"
	pacingArrival     = "together"
	pacingCoordinated = "llmretry host policy, coordinated"
	pacingIndependent = "llmretry host policy, independent"
)

// pacingPictureOf builds the picture from TestRateLimitCrowd's cells: the
// first run of the coordinated and of the independent host policy against
// pacingSpec, arriving together, beside ideal pacing. It fails if a run
// it needs is missing.
func pacingPictureOf(cells []rateCell) (pacingPicture, error) {
	spec := rateSpecByID(pacingSpec)
	p := pacingPicture{
		title: fmt.Sprintf("%d calls at once against a bucket of %d requests, one back %s", crowdCalls, spec.burst(), perEvery(spec.every())),
		limit: fmt.Sprintf("what the limit allows: %d at once, then one %s", spec.burst(), perEvery(spec.every())),
		calls: crowdCalls,
		burst: spec.burst(),
		every: spec.every(),
	}
	arrivals := rateArrivals[slices.IndexFunc(rateArrivals, func(a rateArrival) bool { return a.id == pacingArrival })].arrivals(crowdCalls)
	ideal := idealAdmissions(spec, arrivals)
	p.series = append(p.series, pacingSeries{class: "ideal", label: "ideal pacing", colour: colIdeal,
		admitted: ideal, answered: crowdCalls, last: slices.Max(ideal) + genTime})
	for _, c := range []struct{ client, class, label, colour string }{
		{pacingCoordinated, "coordinated", "NewCoordinated, host policy", colCoordinated},
		{pacingIndependent, "independent", "New per call, host policy", colIndependent},
	} {
		i := slices.IndexFunc(cells, func(cell rateCell) bool {
			return cell.spec.id == pacingSpec && cell.arrival.id == pacingArrival && cell.client.name == c.client && len(cell.runs) > 0
		})
		if i < 0 {
			return p, fmt.Errorf("no run of %s against %s, %s", c.client, pacingSpec, pacingArrival)
		}
		r := cells[i].runs[0]
		s := pacingSeries{class: c.class, label: c.label, colour: c.colour, answered: r.ok()}
		for _, rec := range r.recs {
			if rec.admitted {
				s.admitted = append(s.admitted, rec.at)
			} else {
				s.refused = append(s.refused, rec.at)
			}
		}
		for i, err := range r.errs {
			if err == nil {
				s.last = max(s.last, r.done[i])
			}
		}
		p.series = append(p.series, s)
	}
	var last time.Duration
	for _, s := range p.series {
		last = max(last, s.last)
		if len(s.refused) > 0 {
			last = max(last, s.refused[len(s.refused)-1])
		}
	}
	p.end = (last/(30*time.Second) + 1) * 30 * time.Second
	p.caption = "Simulated in testing/synctest (exact times) by interop's TestRateLimitCrowd. Each call under a " + fmtDur(rateDeadline) + " deadline;\n" +
		"an answer takes " + fmtDur(genTime) + ", a 429 " + fmtDur(refuseTime) + " (OpenAI's, the wait in its words). Host policy: Waits 15s, 45s, 2m, 4m; Reserve 1m.\n" +
		"NewCoordinated: one Transport for all the calls; its waits are random, so this is its first sampled run."
	return p, nil
}

// perEvery renders a bucket's refill interval: "a second", or "every 3s".
func perEvery(d time.Duration) string {
	if d == time.Second {
		return "a second"
	}
	return "every " + fmtDur(d)
}

// pacingAsserts asserts what picture p is drawn to show, and that svg
// draws it: ideal pacing admits every call, the last when the limit first
// allows it; no client is admitted sooner than the limit allows (the k-th
// admission no sooner than ideal pacing's); the 429 bars count every 429;
// and svg has a line per series, the limit's, and a bar per second with
// 429s.
func pacingAsserts(t *testing.T, p pacingPicture, svg string) {
	t.Helper()
	require.Len(t, p.series, 3, "ideal pacing, coordinated, a Transport per call")
	ideal := p.series[0]
	require.Len(t, ideal.admitted, p.calls, "ideal pacing admits every call")
	assert.Equal(t, time.Duration(p.calls-p.burst)*p.every, ideal.admitted[p.calls-1], "ideal pacing: the last admission when the limit allows it")
	for _, s := range p.series[1:] {
		for k, at := range s.admitted {
			if k < len(ideal.admitted) && !assert.GreaterOrEqual(t, at, ideal.admitted[k], "%s: admission %d no sooner than the limit allows", s.label, k) {
				break
			}
		}
		assert.Less(t, p.xAt(s.last), float64(pacingRight), "%s: the last answer within the axis", s.label)
	}

	assert.Less(t, len(svg), maxSVGSize, "the SVG's size")
	shape, err := parsePacing(svg)
	require.NoError(t, err, "the SVG parses as XML")
	assert.Equal(t, fmt.Sprintf("0 0 %d %d", svgWidth, p.svgHeight()), shape.viewBox)
	assert.Equal(t, 1, shape.classes["limit"], "the limit's line")
	for _, s := range p.series {
		assert.Equal(t, 1, shape.classes["admitted "+s.class], "%s: one line", s.label)
	}
	for _, s := range p.lanes() {
		lane := shape.lanes[s.class]
		require.NotNil(t, lane, "%s: a 429 lane", s.label)
		assert.Len(t, lane.bars, len(bins(s.refused)), "%s: a bar per second with 429s", s.label)
		n := 0
		for _, bar := range lane.bars {
			n += bar
		}
		assert.Equal(t, len(s.refused), n, "%s: the bars count every 429", s.label)
	}
}

// --- Reading the SVG back ---

// pacingShape is what the tests read back from a rendered pacing picture.
type pacingShape struct {
	viewBox string
	classes map[string]int        // elements by class attribute
	lanes   map[string]*laneShape // the 429 lanes by series class
	texts   []string              // all text, in order
}

// laneShape is one 429 lane: each bar's count, read from its title.
type laneShape struct {
	bars []int
}

// parsePacing parses svg with encoding/xml and returns its shape: an
// error if it is not well-formed XML, not an svg document, or a bar's
// title does not read "n at s s".
func parsePacing(svg string) (pacingShape, error) {
	shape := pacingShape{classes: map[string]int{}, lanes: map[string]*laneShape{}}
	var lane *laneShape
	laneDepth := 0
	bar, inTitle := false, false
	err := walkSVG(svg, func(tok xml.Token, depth int) error {
		switch tok := tok.(type) {
		case xml.StartElement:
			class := ""
			for _, a := range tok.Attr {
				switch {
				case a.Name.Local == "class":
					class = a.Value
				case depth == 1 && a.Name.Local == "viewBox":
					shape.viewBox = a.Value
				}
			}
			if class != "" {
				shape.classes[class]++
			}
			switch {
			case tok.Name.Local == "g" && strings.HasPrefix(class, "lane "):
				lane, laneDepth = &laneShape{}, depth
				shape.lanes[strings.TrimPrefix(class, "lane ")] = lane
			case class == "refused":
				if lane == nil {
					return errors.New("a 429 bar outside a lane")
				}
				bar = true
			case tok.Name.Local == "title" && bar:
				inTitle = true
			}
		case xml.EndElement:
			if lane != nil && depth == laneDepth {
				lane = nil
			}
			if tok.Name.Local == "title" {
				inTitle = false
			}
			if tok.Name.Local == "rect" {
				bar = false
			}
		case xml.CharData:
			if inTitle {
				var n, s int
				if _, err := fmt.Sscanf(string(tok), "%d at %d s", &n, &s); err != nil {
					return fmt.Errorf("a 429 bar titled %q: %v", tok, err)
				}
				lane.bars = append(lane.bars, n)
				return nil
			}
			if t := strings.TrimSpace(string(tok)); t != "" {
				shape.texts = append(shape.texts, t)
			}
		}
		return nil
	})
	return shape, err
}

// --- The drawing, tested ---

func TestRenderPacing(t *testing.T) {
	s := time.Second
	p := pacingPicture{
		title: "A <test> & its picture", caption: "caption", limit: "2 at once, then 1/s",
		calls: 4, burst: 2, every: s, end: 30 * s,
		series: []pacingSeries{
			{class: "ideal", label: "ideal", colour: colIdeal, admitted: []time.Duration{0, 0, s, 2 * s}, answered: 4, last: 4 * s},
			{class: "coordinated", label: "one <Transport>", colour: colCoordinated, admitted: []time.Duration{0, 0, 3 * s},
				refused: []time.Duration{0, 0, 1500 * time.Millisecond, 1700 * time.Millisecond, 20 * s}, answered: 3, last: 5 * s},
		},
	}
	svg := renderPacing(p)
	shape, err := parsePacing(svg)
	require.NoError(t, err, "the SVG parses as XML")
	assert.Equal(t, fmt.Sprintf("0 0 %d %d", svgWidth, p.svgHeight()), shape.viewBox)
	assert.Equal(t, 1, shape.classes["limit"])
	assert.Equal(t, 1, shape.classes["admitted ideal"])
	assert.Equal(t, 1, shape.classes["admitted coordinated"])
	assert.Equal(t, 3, shape.classes["legend"], "the limit and each series")
	require.Contains(t, shape.lanes, "coordinated")
	assert.NotContains(t, shape.lanes, "ideal", "ideal pacing meets no 429")
	assert.Equal(t, []int{2, 2, 1}, shape.lanes["coordinated"].bars, "429s by second: 0, 1, 20")
	assert.Contains(t, shape.texts, "one <Transport>: 3/4 answered by 5s", "text is escaped")
	assert.Contains(t, shape.texts, "5 429s")

	// Each admission instant is one step up; the line runs to the end.
	assert.Equal(t, "M64 344H64V214H90.6V149H117.2V84H862", p.stepPath(p.series[0].admitted))
	assert.Equal(t, []pacingBin{{0, 2}, {s, 2}, {20 * s, 1}}, bins(p.series[1].refused))
	assert.Equal(t, float64(pacingRight), p.xAt(p.end), "the axis ends at end")

	_, err = parsePacing(strings.Replace(svg, "</svg>", "", 1))
	assert.Error(t, err, "a truncated SVG does not parse")
}
