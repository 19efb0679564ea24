package coord

import (
	"math"
	"net/http"
	"time"

	"github.com/llmretry/llmretry/store"
)

// This file is what a 429 teaches a key of a rate its provider enforces
// below the one it publishes (store.Facts.Spacing, Floor): a per-minute
// figure enforced over a second, a limit on sudden growth. The headers'
// pace (pace.go) is what the provider states; a 429 is what it does.

// cutRate is what a 429 that came where the pace said there was room
// leaves of the key's rate: AWS's adaptive retry and CUBIC's β. The
// spacing of its sends grows by its inverse.
const cutRate = 0.7

// lesson returns what the 429 o, the result of an attempt sent at
// cc.sentAt while the key's facts were f, teaches the key: a spacing of
// its sends, and a floor under it (zero: nothing).
//
// A 429 that came to an attempt sent at its turn (mispaced: the pace said
// there was room) cuts the rate the key was sent at by cutRate: the spacing
// becomes the interval the pace and the lesson kept, over cutRate.
//
// A 429 whose headers say a published limit is spent (pc, spent) and that
// states the wait until a request is back proves a floor (see floorOf).
// Refused at the floor (sent at its turn while the spacing was the
// floor's), the bucket holds fewer requests than the floor allowed for:
// the floor becomes its window over one fewer.
func (cc *Call) lesson(o Outcome, f store.Facts, pc pace, spent, mispaced bool, now time.Time) (spacing, floor time.Duration) {
	most := cc.p.MaxServerWait()
	if mispaced {
		var kept time.Duration
		if f.Paced(now) {
			kept = f.Every
		}
		if f.Taught(now) {
			kept = max(kept, f.Spacing)
		}
		if kept > 0 {
			spacing = min(time.Duration(float64(kept)/cutRate), most)
		}
	}
	if !spent {
		return spacing, 0
	}
	if o.Server.Set && !o.Reset && o.Resp != nil {
		floor = floorOf(pc, pc.full.Sub(cc.sentAt), o.Server.D, statedResolution(o.Resp.Header))
	}
	if mispaced && f.Taught(now) && f.Floor > 0 && f.Spacing <= f.Floor {
		if w, n, ok := windowOf(f.Floor); ok && n > 1 {
			floor = max(floor, w/time.Duration(n-1))
		}
	}
	if floor <= f.Floor && f.Taught(now) || floor > most {
		floor = 0 // known, or more than the call honours
	}
	return spacing, floor
}

// floorOf returns the least interval one request of the bucket the spent
// limit pc describes takes to come back, as a 429 proves it: its headers
// said the bucket is full again in untilFull and its words (or
// Retry-After, printed to res) that a request is back in wait, both
// measured by the provider as it refused; 0 if they prove no more than pc.
//
// A bucket of n requests, one back each e, that refuses a request is full
// again in untilFull = (n−1)·e + wait (it lacks the one request the wait
// brings back, and the n−1 after it): so untilFull − wait is a whole
// number of intervals, and with the round window w = n·e providers state
// limits per, n = w / (w − (untilFull − wait)) is a whole number. When one
// round window gives one, the floor is w/n, exact whatever the instant of
// the bucket's cycle the 429 found (the first 429 of a crowd arriving
// over time comes some way into it). Otherwise the wait alone bounds the
// interval from below (a request comes back no later than one interval
// after the bucket ran dry): the bucket refilled over window = pc's Every
// × Burst holds at most window/wait whole requests, and the floor is the
// window over that many. A wait in whole seconds counts a second short of
// what it says (Anthropic rounds it up), and proves no exact interval.
func floorOf(pc pace, untilFull, wait, res time.Duration) time.Duration {
	least := wait - res
	if least <= pc.every {
		return 0
	}
	if res == 0 {
		gap := untilFull - wait // (n−1) intervals
		for _, w := range roundWindows {
			if gap <= 0 || gap >= w {
				continue
			}
			n := float64(w) / float64(w-gap)
			if r := math.Round(n); r >= 2 && math.Abs(n-r) <= 0.01*r {
				if e := w / time.Duration(r); e > pc.every {
					return e
				}
				return 0
			}
		}
	}
	window := (pc.every * time.Duration(pc.burst)).Round(time.Millisecond)
	if n := window / least; n >= 1 {
		return window / n
	}
	return least
}

// windowOf returns the round window a floor is a whole fraction of, and
// the requests it holds: a floor floorOf read exactly.
func windowOf(floor time.Duration) (time.Duration, int64, bool) {
	for _, w := range roundWindows {
		n := math.Round(float64(w) / float64(floor))
		if n >= 1 && math.Abs(n*float64(floor)-float64(w)) <= 0.001*float64(floor) {
			return w, int64(n), true
		}
	}
	return 0, 0, false
}

// statedResolution returns how far short of the truth a 429's stated
// wait, read from h, may be: a second for a Retry-After (whole seconds, or
// a date), nothing for retry-after-ms or a wait in words.
func statedResolution(h http.Header) time.Duration {
	if _, ms := h["Retry-After-Ms"]; ms {
		return 0
	}
	if _, s := h["Retry-After"]; s {
		return time.Second
	}
	return 0
}
