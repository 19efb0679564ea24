package coord

import (
	"bytes"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/llmretry/llmretry/internal/wire"
)

// pace is a rate limit a response says is spent, as a bucket of burst
// requests, one back each every, full again at full (see Facts).
type pace struct {
	burst int
	every time.Duration
	full  time.Time
}

// spentPace returns the pace of the rate limit that h, the headers of a
// response to an attempt sent at sent and back by arrived, says is spent
// (of the dimensions providers publish, wire.RateLimits): a dimension
// whose remaining is below one request's cost (1 for requests; cost, the
// tokens a request of the key is known to take, for tokens: tokens are
// not read while it is unknown). A relative reset
// counts from sent, when the provider measured it (the time until full is
// the header's, whenever it was measured); a reset instant was measured
// some time between sent and arrived, which bounds the time until full it
// says. Of several spent dimensions, the slowest paces. Values it cannot
// read, negative ones (Azure's -1) and absent ones say nothing.
func spentPace(h http.Header, sent, arrived time.Time, cost int64) (pace, bool) {
	return readPace(h, sent, arrived, cost, false)
}

// statedPace is spentPace for a dimension with requests left, too: the
// pace of the bucket h's published limits describe as the provider
// admitted the attempt, of those that are not full, the one whose next
// request is due last (of several, it binds first). Taken on a key
// whose sends already go through its store (one with a limit on calls in
// flight, or taught), it anticipates a bucket running dry before any of
// its answers says it is spent: those answers come a generation after
// the sends that spent it.
func statedPace(h http.Header, sent, arrived time.Time, cost int64) (pace, bool) {
	return readPace(h, sent, arrived, cost, true)
}

// readPace is spentPace, and with left statedPace.
func readPace(h http.Header, sent, arrived time.Time, cost int64, left bool) (pace, bool) {
	var best pace
	found := false
	for i := range wire.RateLimits {
		d := &wire.RateLimits[i]
		vs, ok := h[d.Remaining]
		if !ok || len(vs) == 0 {
			continue
		}
		unit := int64(1)
		if d.Tokens {
			if cost <= 0 {
				continue
			}
			unit = cost
		}
		remaining, ok := wire.Count(vs[0])
		if !ok || remaining >= unit && !left {
			continue
		}
		limit, ok := wire.Count(first(h, d.Limit))
		if !ok || limit < unit || remaining >= limit {
			continue
		}
		full, res, ok := wire.ResetAt(first(h, d.Reset), d.Instant, sent)
		if !ok || !full.After(sent) {
			continue
		}
		least, most := full.Sub(sent), full.Sub(sent)
		if d.Instant {
			// Measured at some instant of the attempt, and printed to
			// res (a second, mostly: Anthropic rounds it up).
			least, most = full.Sub(arrived)-res, most+res
		}
		every := refill(full.Sub(sent), least, most, limit, limit-remaining, unit)
		if every <= 0 {
			continue
		}
		p := pace{burst: int(min(limit/unit, maxBurst)), every: every, full: full}
		if !found || !left && p.every > best.every || left && p.due().After(best.due()) {
			best, found = p, true
		}
	}
	return best, found
}

// due returns when p's bucket has a request for the next send: the slot
// a store gives it (Full less Burst−1 intervals).
func (p pace) due() time.Time {
	return p.full.Add(-time.Duration(p.burst-1) * p.every)
}

// refill returns the time one request of unit units takes to come back
// to a bucket of limit units that is full again in untilFull, as read,
// and truly in at least least and at most most (they differ when the
// provider measured it at an unknown instant of the attempt, or printed
// it to the second), with used units missing. The bucket's window (the
// time it takes to refill from empty) is limit × untilFull / used;
// remaining is a whole count, so the units missing are between used − 1
// and used, and the window lies between limit × least / used and limit ×
// most / (used − 1). Read from untilFull and used alone it is long (a
// lower rate than the truth: a pace read slow stays slow, since a store
// keeps the slowest it is told). Providers state their limits per round
// window (a minute, mostly): when one of those lies in the span, it is
// the window, read exactly — the one nearest the reading, if several do.
func refill(untilFull, least, most time.Duration, limit, used, unit int64) time.Duration {
	slow := float64(untilFull) * float64(limit) / float64(used)
	lo := float64(least) * float64(limit) / float64(used)
	hi := math.Inf(1)
	if used > 1 {
		hi = float64(most) * float64(limit) / float64(used-1)
	}
	window, off := slow, math.Inf(1)
	for _, w := range roundWindows {
		// A reset is printed to the millisecond, or the second: a
		// window within 1 % of the span still fits.
		if float64(w) >= lo*0.99 && float64(w) < hi*1.01 && math.Abs(float64(w)-slow) < off {
			window, off = float64(w), math.Abs(float64(w)-slow)
		}
	}
	return time.Duration(window * float64(unit) / float64(limit))
}

// roundWindows are the windows providers state their limits per.
var roundWindows = [...]time.Duration{time.Second, 10 * time.Second, time.Minute, time.Hour, 24 * time.Hour}

// maxBurst bounds the burst a pace is read with: more than any provider's
// bucket, and small enough for any arithmetic on it.
const maxBurst = 1 << 20

// first returns h's first value for the canonical key k.
func first(h http.Header, k string) string {
	if vs := h[k]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// requestedTokens returns the tokens a refused request asked for, as
// OpenAI's token-limit message states it ("… Limit 30000, Used 29500,
// Requested 1200. Please try again in 1.4s."), or 0.
func requestedTokens(body []byte) int64 {
	i := bytes.Index(body, []byte("Requested "))
	if i < 0 {
		return 0
	}
	rest := body[i+len("Requested "):]
	j := 0
	for j < len(rest) && j < 12 && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	n, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	if err != nil {
		return 0
	}
	return n
}
