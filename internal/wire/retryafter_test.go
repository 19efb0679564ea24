package wire

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Date layouts of the three HTTP-date forms (RFC 9110 §5.6.7): the
// preferred IMF-fixdate, the obsolete RFC 850 form and ANSI C's asctime.
const (
	dateRFC1123 = http.TimeFormat
	dateRFC850  = "Monday, 02-Jan-06 15:04:05 GMT"
	dateANSIC   = time.ANSIC
)

// hostileWait is one server-wait case: headers built from the current time.
type hostileWait struct {
	name   string
	header func(now time.Time) http.Header
}

// ra returns a case whose Retry-After values are vs.
func ra(name string, vs ...string) hostileWait {
	return hostileWait{name, func(time.Time) http.Header { return http.Header{"Retry-After": vs} }}
}

// raMs returns a case with Retry-After-Ms ms and, if given, Retry-After.
func raMs(name, ms string, retryAfter ...string) hostileWait {
	return hostileWait{name, func(time.Time) http.Header {
		h := http.Header{"Retry-After-Ms": {ms}}
		if len(retryAfter) > 0 {
			h["Retry-After"] = retryAfter
		}
		return h
	}}
}

// raDate returns a case whose Retry-After is now+d in layout.
func raDate(name, layout string, d time.Duration) hostileWait {
	return hostileWait{name, func(now time.Time) http.Header {
		return http.Header{"Retry-After": {now.Add(d).UTC().Format(layout)}}
	}}
}

// Every hostile value either parses to a non-negative wait or is ignored
// (false), never an error or a panic.
func TestRetryAfterHostileValues(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	const none = time.Duration(-1) // not valid: the caller uses its own wait
	cases := []struct {
		hostileWait
		want time.Duration
	}{
		{ra("huge", "99999999999"), MaxDuration},
		{ra("longest duration in seconds", "9223372036"), MaxDuration},
		{ra("many digits", strings.Repeat("9", 400)), MaxDuration},
		{ra("negative", "-5"), none},
		{ra("plus sign", "+1"), none},
		{ra("decimal 1.0", "1.0"), none},
		{ra("fraction 2.5", "2.5"), none},
		{ra("empty", ""), none},
		{ra("blank", "   "), none},
		{ra("comma-separated values", "5, 10"), none},
		{ra("space-separated values", "5 10"), none},
		{ra("two header lines: the first counts", "5", "10"), 5 * time.Second},
		{ra("garbage bytes", "\x00\xff\xfe\x7f"), none},
		{ra("control characters", "\r\n5"), 5 * time.Second}, // trimmed like any whitespace
		{ra("hex", "0x10"), none},
		{ra("exponent", "1e3"), none},
		{ra("non-ASCII digits", "١٢"), none},
		{ra("unit suffix", "5s"), none},
		{ra("leading zeros", "007"), 7 * time.Second},
		{ra("zero", "0"), 0},
		{ra("padded", " 20 "), 20 * time.Second},
		{raDate("date in the past", dateRFC1123, -time.Hour), 0},
		{ra("date in 3000", "Wed, 01 Jan 3000 00:00:00 GMT"), MaxDuration},
		{ra("date before 1970", "Thu, 01 Jan 1900 00:00:00 GMT"), 0},
		{raDate("RFC 1123 date", dateRFC1123, 7*time.Second), 7 * time.Second},
		{raDate("RFC 850 date", dateRFC850, 8*time.Second), 8 * time.Second},
		{raDate("ANSI C date", dateANSIC, 9*time.Second), 9 * time.Second},
		{ra("date with a bad zone", "Sun, 01 Jun 2025 12:00:07 XYZ"), none},
		{ra("date with garbage after it", "Sun, 01 Jun 2025 12:00:07 GMT; x"), none},
		{raMs("ms with many digits: clamped", strings.Repeat("9", 400)), MaxDuration},
		{raMs("ms with many digits, and seconds: clamped", strings.Repeat("9", 400), "7"), MaxDuration},
		{raMs("ms", "1500"), 1500 * time.Millisecond},
		{raMs("ms fraction", "1.5"), 1500 * time.Microsecond},
		{raMs("ms leading dot", ".5"), 500 * time.Microsecond},
		{raMs("ms huge", "1"+strings.Repeat("0", 30)), MaxDuration},
		{raMs("ms negative falls back to Retry-After", "-1", "3"), 3 * time.Second},
		{raMs("ms NaN", "NaN"), none},
		{raMs("ms Inf", "Inf"), none},
		{raMs("ms exponent", "1e3"), none},
		{raMs("ms two dots", "1.2.3"), none},
		{raMs("ms dot", "."), none},
		{raMs("ms garbage falls back to a date", "\xff", now.Add(4*time.Second).Format(dateRFC1123)), 4 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, ok := RetryAfter(c.header(now), now)
			if c.want == none {
				assert.False(t, ok, "ignored, got %v", d)
				assert.Zero(t, d)
				return
			}
			assert.True(t, ok)
			assert.Equal(t, c.want, d)
		})
	}
	d, ok := RetryAfter(nil, now)
	assert.False(t, ok, "no headers at all")
	assert.Zero(t, d)
}

// FuzzRetryAfter checks that RetryAfter never panics and never yields a
// negative wait, whatever the headers and the clock, and that a
// digits-only Retry-After means exactly that many seconds (clamped).
func FuzzRetryAfter(f *testing.F) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC).Unix()
	for _, s := range []struct{ ra, ms string }{
		{"120", ""}, {"99999999999", ""}, {"-1", ""}, {"+1", ""}, {"1.0", ""}, {"", "1500"},
		{"Sun, 01 Jun 2025 12:00:07 GMT", ""}, {"Sunday, 01-Jun-25 12:00:07 GMT", ""}, {"Sun Jun  1 12:00:07 2025", ""},
		{"5, 10", "x"}, {"\xff\x00", "1e3"}, {"0", "0.5"}, {"", "99999999999999999999999999"},
	} {
		f.Add(s.ra, s.ms, now)
	}
	f.Fuzz(func(t *testing.T, retryAfter, retryAfterMs string, unix int64) {
		h := http.Header{}
		if retryAfter != "" {
			h["Retry-After"] = []string{retryAfter}
		}
		if retryAfterMs != "" {
			h["Retry-After-Ms"] = []string{retryAfterMs}
		}
		d, ok := RetryAfter(h, time.Unix(unix, 0))
		if d < 0 {
			t.Fatalf("negative wait %v for %q / %q", d, retryAfter, retryAfterMs)
		}
		if !ok && d != 0 {
			t.Fatalf("ignored, yet a wait of %v", d)
		}
		if v := strings.TrimSpace(retryAfter); retryAfterMs == "" && v != "" && strings.Trim(v, "0123456789") == "" {
			want := MaxDuration
			if secs, err := strconv.ParseInt(v, 10, 64); err == nil && secs < int64(MaxDuration/time.Second) {
				want = time.Duration(secs) * time.Second
			}
			if !ok || d != want {
				t.Fatalf("Retry-After %q: got %v %v, want %v", v, d, ok, want)
			}
		}
	})
}
