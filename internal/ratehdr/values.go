package ratehdr

import (
	"strconv"
	"strings"
	"time"
)

// Count reads a non-negative count.
func Count(v string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	return n, err == nil && n >= 0
}

// GoDuration parses a non-negative Go duration as OpenAI writes its
// resets ("1s", "6m0s", "12ms").
func GoDuration(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, false
	}
	return d, true
}

// UnixInstant reads an instant in Unix seconds or milliseconds, as
// OpenRouter writes X-RateLimit-Reset, and the resolution it is printed
// to (a second or a millisecond); a number too small to be either (below
// 1e9) is none.
func UnixInstant(v string) (time.Time, time.Duration, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	switch {
	case err != nil || n <= 0:
		return time.Time{}, 0, false
	case n >= 1e11: // milliseconds since the epoch (as seconds: past the year 5000)
		return time.UnixMilli(n), time.Millisecond, true
	case n >= 1e9: // seconds since the epoch
		return time.Unix(n, 0), time.Second, true
	}
	return time.Time{}, 0, false
}
