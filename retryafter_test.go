package llmretry

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// RetryAfter on its own: every hostile value either parses to a
// non-negative wait or is ignored (false), never an error or a panic.
func TestRetryAfterHostileValues(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	const none = time.Duration(-1) // not valid: the caller uses its own wait
	cases := []struct {
		hostileWait
		want time.Duration
	}{
		{ra("huge", "99999999999"), maxDuration},
		{ra("longest duration in seconds", "9223372036"), maxDuration},
		{ra("many digits", strings.Repeat("9", 400)), maxDuration},
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
		{ra("date in 3000", "Wed, 01 Jan 3000 00:00:00 GMT"), maxDuration},
		{ra("date before 1970", "Thu, 01 Jan 1900 00:00:00 GMT"), 0},
		{raDate("RFC 1123 date", dateRFC1123, 7*time.Second), 7 * time.Second},
		{raDate("RFC 850 date", dateRFC850, 8*time.Second), 8 * time.Second},
		{raDate("ANSI C date", dateANSIC, 9*time.Second), 9 * time.Second},
		{ra("date with a bad zone", "Sun, 01 Jun 2025 12:00:07 XYZ"), none},
		{ra("date with garbage after it", "Sun, 01 Jun 2025 12:00:07 GMT; x"), none},
		{raMs("ms", "1500"), 1500 * time.Millisecond},
		{raMs("ms fraction", "1.5"), 1500 * time.Microsecond},
		{raMs("ms leading dot", ".5"), 500 * time.Microsecond},
		{raMs("ms huge", "1"+strings.Repeat("0", 30)), maxDuration},
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

func TestRetryAfterRaisesTheWait(t *testing.T) {
	cases := []struct {
		name string
		kv   []string
		want time.Duration
	}{
		{"seconds", []string{"Retry-After", "20"}, 20 * time.Second},
		{"ms before seconds", []string{"Retry-After-Ms", "1500", "Retry-After", "20"}, 1500 * time.Millisecond},
		{"shorter than the schedule", []string{"Retry-After", "0"}, 1 * time.Second},
		{"malformed means the schedule", []string{"Retry-After", "soon"}, 1 * time.Second},
		{"http date", []string{"Retry-After", "DATE+7"}, 7 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				for i := range c.kv {
					if c.kv[i] == "DATE+7" {
						c.kv[i] = time.Now().Add(7 * time.Second).UTC().Format(http.TimeFormat)
					}
				}
				prov := newProvider(fail(429, c.kv...), ok)
				resp, err := post(t, mustNew(t, prov.mock, Policy{Waits: []time.Duration{time.Second}}), context.Background())
				require.NoError(t, err)
				assert.Equal(t, 200, resp.StatusCode)
				assert.Equal(t, []time.Duration{c.want}, prov.gaps())
			})
		})
	}
}

// The same hostile values through the Transport, on the fake clock: the
// wait taken is exactly the larger of the schedule's (100 ms) and a valid
// server wait; malformed means the schedule's own wait; a wait above
// MaxRetryAfter, or one that breaks the deadline/reserve rule, returns the
// response at once. Nothing ever sleeps past MaxRetryAfter or the deadline
// minus the reserve.
func TestRetryAfterHostileThroughTransport(t *testing.T) {
	const (
		sched  = 100 * time.Millisecond
		at0nce = time.Duration(-1) // the 429 is returned without a retry
	)
	cases := []struct {
		hostileWait
		maxRetryAfter time.Duration // 0: the default, 5 minutes
		deadline      time.Duration // 0: none
		want          time.Duration
	}{
		{hostileWait: ra("huge", "99999999999"), want: at0nce},
		{hostileWait: ra("negative", "-5"), want: sched},
		{hostileWait: ra("plus sign", "+1"), want: sched},
		{hostileWait: ra("decimal 1.0", "1.0"), want: sched},
		{hostileWait: ra("fraction 2.5", "2.5"), want: sched},
		{hostileWait: ra("empty", ""), want: sched},
		{hostileWait: ra("comma-separated values", "5, 10"), want: sched},
		{hostileWait: ra("two header lines", "5", "10"), want: 5 * time.Second},
		{hostileWait: ra("garbage bytes", "\x00\xff\xfe"), want: sched},
		{hostileWait: raDate("date in the past", dateRFC1123, -time.Hour), want: sched},
		{hostileWait: ra("date in 3000", "Wed, 01 Jan 3000 00:00:00 GMT"), want: at0nce},
		{hostileWait: raDate("RFC 1123 date", dateRFC1123, 7*time.Second), want: 7 * time.Second},
		{hostileWait: raDate("RFC 850 date", dateRFC850, 8*time.Second), want: 8 * time.Second},
		{hostileWait: raDate("ANSI C date", dateANSIC, 9*time.Second), want: 9 * time.Second},
		{hostileWait: ra("exactly MaxRetryAfter", "300"), want: 5 * time.Minute},
		{hostileWait: ra("just above MaxRetryAfter", "301"), want: at0nce},
		{hostileWait: raDate("date just above MaxRetryAfter", dateRFC850, 301*time.Second), want: at0nce},
		{hostileWait: ra("at a low MaxRetryAfter", "10"), maxRetryAfter: 10 * time.Second, want: 10 * time.Second},
		{hostileWait: raMs("ms above a low MaxRetryAfter", "10000.001"), maxRetryAfter: 10 * time.Second, want: at0nce},
		{hostileWait: raMs("ms huge", "1"+strings.Repeat("0", 30)), want: at0nce},
		{hostileWait: raMs("ms fraction", "1234.5"), want: 1234500 * time.Microsecond},
		{hostileWait: raMs("ms NaN", "NaN"), want: sched},
		{hostileWait: ra("fits the deadline and reserve", "60"), deadline: 2 * time.Minute, want: time.Minute},
		{hostileWait: ra("breaks the deadline and reserve", "61"), deadline: 2 * time.Minute, want: at0nce},
		{hostileWait: raDate("dated past the deadline and reserve", dateANSIC, 61*time.Second), deadline: 2 * time.Minute, want: at0nce},
		{hostileWait: ra("huge under a deadline", "99999999999"), deadline: 2 * time.Minute, want: at0nce},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				if c.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, c.deadline)
					defer cancel()
				}
				start := time.Now()
				prov := newProvider(step{status: 429, header: c.header(start), body: "slow down"}, ok)
				var rec recorder
				rt := mustNew(t, prov.mock, Policy{Waits: []time.Duration{sched}, MaxRetryAfter: c.maxRetryAfter, Reserve: time.Minute, OnAttempt: rec.on})
				resp, err := post(t, rt, ctx)
				require.NoError(t, err)
				if c.want == at0nce {
					assert.Equal(t, 429, resp.StatusCode)
					assert.Equal(t, "slow down", bodyOf(t, resp))
					assert.Equal(t, 1, prov.attempts())
					assert.Zero(t, time.Since(start), "no wait at all")
					assert.Equal(t, []time.Duration{0}, rec.retryIns())
					return
				}
				assert.Equal(t, 200, resp.StatusCode)
				assert.Equal(t, `{"answer":42}`, bodyOf(t, resp))
				assert.Equal(t, []time.Duration{c.want}, prov.gaps(), "the exact wait")
				assert.Equal(t, c.want, time.Since(start))
				assert.Equal(t, []time.Duration{c.want, 0}, rec.retryIns(), "the record says the real wait")
				maxRA := c.maxRetryAfter
				if maxRA == 0 {
					maxRA = DefaultMaxRetryAfter
				}
				assert.LessOrEqual(t, c.want, max(sched, maxRA))
				if dl, ok := ctx.Deadline(); ok {
					assert.GreaterOrEqual(t, time.Until(dl), time.Minute, "the reserve is left")
				}
			})
		})
	}
}

// RetryAfter never panics and never yields a negative wait, whatever the
// headers and the clock; a digits-only Retry-After means exactly that many
// seconds (clamped); and the wait the Transport takes from it never exceeds
// MaxRetryAfter nor breaks the deadline/reserve rule.
func FuzzRetryAfter(f *testing.F) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC).Unix()
	for _, s := range []struct{ ra, ms string }{
		{"120", ""}, {"99999999999", ""}, {"-1", ""}, {"+1", ""}, {"1.0", ""}, {"", "1500"},
		{"Sun, 01 Jun 2025 12:00:07 GMT", ""}, {"Sunday, 01-Jun-25 12:00:07 GMT", ""}, {"Sun Jun  1 12:00:07 2025", ""},
		{"5, 10", "x"}, {"\xff\x00", "1e3"}, {"0", "0.5"}, {"", "99999999999999999999999999"},
	} {
		f.Add(s.ra, s.ms, now)
	}
	p := Policy{Waits: []time.Duration{time.Second}, Reserve: 10 * time.Second, MaxRetryAfter: 5 * time.Minute}.resolved()
	f.Fuzz(func(t *testing.T, retryAfter, retryAfterMs string, unix int64) {
		now := time.Unix(unix, 0)
		h := http.Header{}
		if retryAfter != "" {
			h["Retry-After"] = []string{retryAfter}
		}
		if retryAfterMs != "" {
			h["Retry-After-Ms"] = []string{retryAfterMs}
		}
		d, ok := RetryAfter(h, now)
		if d < 0 {
			t.Fatalf("negative wait %v for %q / %q", d, retryAfter, retryAfterMs)
		}
		if !ok && d != 0 {
			t.Fatalf("ignored, yet a wait of %v", d)
		}
		if v := strings.TrimSpace(retryAfter); retryAfterMs == "" && v != "" && strings.Trim(v, "0123456789") == "" {
			want := maxDuration
			if secs, err := strconv.ParseInt(v, 10, 64); err == nil && secs < int64(maxDuration/time.Second) {
				want = time.Duration(secs) * time.Second
			}
			if !ok || d != want {
				t.Fatalf("Retry-After %q: got %v %v, want %v", v, d, ok, want)
			}
		}

		// What the Transport does with it, with and without a deadline.
		deadline := now.Add(2 * time.Minute)
		for _, hasDeadline := range []bool{true, false} {
			var lim limits
			if hasDeadline {
				lim.giveUp = deadline.Add(-p.Reserve)
			}
			wait, why := p.plan(p.scheduleWait(1, hasDeadline), pause{d: d, set: ok}, now, lim)
			if wait < 0 {
				t.Fatalf("negative wait %v", wait)
			}
			if ok && d > p.MaxRetryAfter && why != stopServerWait {
				t.Fatalf("server wait %v above MaxRetryAfter not refused: %v", d, why)
			}
			if why != stopNone {
				if wait != 0 {
					t.Fatalf("no retry (%v), yet a wait of %v", why, wait)
				}
				continue
			}
			if wait > max(p.Waits[0], p.MaxRetryAfter) {
				t.Fatalf("wait %v above MaxRetryAfter", wait)
			}
			if hasDeadline && now.Add(wait).Add(p.Reserve).After(deadline) {
				t.Fatalf("wait %v breaks the deadline/reserve rule", wait)
			}
		}
	})
}
