package wire

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxDuration is the longest time.Duration; parsed server waits longer
// than it are clamped to it (and then refused by the caller's bound).
const MaxDuration = time.Duration(math.MaxInt64)

// RetryAfter returns the wait a server asked for in h, measured from now:
// the retry-after-ms header (milliseconds, fractions allowed, as OpenAI and
// Azure send it) if it is valid, else Retry-After as delay-seconds (digits
// only, per RFC 9110) or an HTTP-date in any of the three forms
// http.ParseTime accepts. A date in the past means a wait of zero.
//
// It reports false when neither header holds a valid value: malformed,
// negative, empty or several comma-separated values are ignored, never an
// error. Huge values are clamped to MaxDuration rather than overflowing;
// it is the caller's job to bound them. Only the first value of each
// header is read.
func RetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := firstHeader(h, "Retry-After-Ms"); v != "" {
		if d, ok := parseMillis(v); ok {
			return d, true
		}
	}
	v := firstHeader(h, "Retry-After")
	if v == "" {
		return 0, false
	}
	if d, ok := parseDelaySeconds(v); ok {
		return d, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d < 0 {
		d = 0
	}
	return d, true
}

// firstHeader returns the first value of key in h, trimmed.
func firstHeader(h http.Header, key string) string {
	vs := h[key]
	if len(vs) == 0 {
		return ""
	}
	return strings.TrimSpace(vs[0])
}

// parseDelaySeconds parses 1*DIGIT as seconds, clamping instead of
// overflowing.
func parseDelaySeconds(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	var secs int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if secs > int64(MaxDuration/time.Second)/10 {
			secs = int64(MaxDuration / time.Second) // keep scanning for validity
			continue
		}
		secs = secs*10 + int64(c-'0')
	}
	if secs >= int64(MaxDuration/time.Second) {
		return MaxDuration, true
	}
	return time.Duration(secs) * time.Second, true
}

// parseMillis parses a non-negative decimal number of milliseconds (digits
// with at most one '.'; no sign, exponent, hex or underscores).
func parseMillis(v string) (time.Duration, bool) {
	dots := 0
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '.':
			dots++
		case c < '0' || c > '9':
			return 0, false
		}
	}
	if dots > 1 || v == "." {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	switch {
	case errors.Is(err, strconv.ErrRange) && math.IsInf(f, 1):
		return MaxDuration, true // digits beyond float64: clamped, as RetryAfter says
	case errors.Is(err, strconv.ErrRange):
		return 0, true // a fraction below float64's least: no wait
	case err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0:
		return 0, false
	}
	ns := f * float64(time.Millisecond)
	if ns >= float64(MaxDuration) {
		return MaxDuration, true
	}
	return time.Duration(ns), true
}
