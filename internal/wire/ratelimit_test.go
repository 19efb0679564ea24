package wire

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestCount(t *testing.T) {
	for _, c := range []struct {
		v    string
		want int64
		ok   bool
	}{{"0", 0, true}, {" 12 ", 12, true}, {"-1", -1, false}, {"", 0, false}, {"1.5", 0, false}} {
		n, ok := Count(c.v)
		assert.Equal(t, c.ok, ok, c.v)
		if ok {
			assert.Equal(t, c.want, n, c.v)
		}
	}
}

func TestGoDuration(t *testing.T) {
	d, ok := GoDuration(" 6m0s ")
	assert.True(t, ok)
	assert.Equal(t, 6*time.Minute, d)
	for _, v := range []string{"", "-1s", "soon", "12"} {
		_, ok := GoDuration(v)
		assert.False(t, ok, v)
	}
}

func TestUnixInstant(t *testing.T) {
	at, res, ok := UnixInstant("1764576000")
	assert.True(t, ok)
	assert.Equal(t, time.Unix(1764576000, 0), at, "seconds")
	assert.Equal(t, time.Second, res)
	at, res, ok = UnixInstant("1764576000123")
	assert.True(t, ok)
	assert.Equal(t, time.UnixMilli(1764576000123), at, "milliseconds")
	assert.Equal(t, time.Millisecond, res)
	for _, v := range []string{"", "0", "-5", "12345", "soon"} {
		_, _, ok := UnixInstant(v)
		assert.False(t, ok, v)
	}
}

// A 429's rate-limit headers state its wait: the reset of the spent
// OpenAI dimension (the shorter when neither says), or OpenRouter's reset
// instant; nothing readable states nothing.
func TestSpentReset(t *testing.T) {
	now := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name   string
		header http.Header
		want   time.Duration
		ok     bool
	}{
		{"requests spent", http.Header{"X-Ratelimit-Reset-Requests": {"20s"}, "X-Ratelimit-Remaining-Requests": {"0"}, "X-Ratelimit-Reset-Tokens": {"6m0s"}, "X-Ratelimit-Remaining-Tokens": {"149984"}}, 20 * time.Second, true},
		{"tokens spent", http.Header{"X-Ratelimit-Reset-Requests": {"1s"}, "X-Ratelimit-Remaining-Requests": {"59"}, "X-Ratelimit-Reset-Tokens": {"1m30s"}, "X-Ratelimit-Remaining-Tokens": {"0"}}, 90 * time.Second, true},
		{"both spent: the longer", http.Header{"X-Ratelimit-Reset-Requests": {"1s"}, "X-Ratelimit-Remaining-Requests": {"0"}, "X-Ratelimit-Reset-Tokens": {"3s"}, "X-Ratelimit-Remaining-Tokens": {"0"}}, 3 * time.Second, true},
		{"requests remain: the tokens are too few", http.Header{"X-Ratelimit-Reset-Requests": {"6ms"}, "X-Ratelimit-Remaining-Requests": {"9999"}, "X-Ratelimit-Reset-Tokens": {"58.5s"}, "X-Ratelimit-Remaining-Tokens": {"500"}}, 58500 * time.Millisecond, true},
		{"requests remain, tokens not counted: the tokens are spent", http.Header{"X-Ratelimit-Reset-Requests": {"1s"}, "X-Ratelimit-Remaining-Requests": {"59"}, "X-Ratelimit-Reset-Tokens": {"6m0s"}}, 6 * time.Minute, true},
		{"neither says spent: the shorter", http.Header{"X-Ratelimit-Reset-Requests": {"12s"}, "X-Ratelimit-Reset-Tokens": {"6m0s"}}, 12 * time.Second, true},
		{"requests alone", http.Header{"X-Ratelimit-Reset-Requests": {"2s"}}, 2 * time.Second, true},
		{"tokens alone", http.Header{"X-Ratelimit-Reset-Tokens": {"4s"}}, 4 * time.Second, true},
		{"openrouter instant in ms", http.Header{"X-Ratelimit-Reset": {strconv.FormatInt(now.Add(40*time.Second).UnixMilli(), 10)}}, 40 * time.Second, true},
		{"openrouter instant passed", http.Header{"X-Ratelimit-Reset": {strconv.FormatInt(now.Add(-time.Minute).Unix(), 10)}}, 0, true},
		{"anthropic resets are not read", http.Header{"Anthropic-Ratelimit-Requests-Reset": {"2000-01-01T00:00:30Z"}}, 0, false},
		{"unreadable", http.Header{"X-Ratelimit-Reset-Requests": {"soon"}, "X-Ratelimit-Reset": {"-5"}}, 0, false},
	} {
		d, ok := SpentReset(c.header, now)
		assert.Equal(t, c.ok, ok, c.name)
		assert.Equal(t, c.want, d, c.name)
	}
}

// A reset is a Go duration from the send, or an instant: RFC 3339 (to
// the second without a fraction) or Unix seconds or milliseconds.
func TestResetAt(t *testing.T) {
	sent := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		v       string
		instant bool
		at      time.Time
		res     time.Duration
		ok      bool
	}{
		{"6m0s", false, sent.Add(6 * time.Minute), 0, true},
		{" 12ms ", false, sent.Add(12 * time.Millisecond), 0, true},
		{"2026-12-01T07:00:30Z", true, sent.Add(30 * time.Second), time.Second, true},
		{"2026-12-01T07:00:30.5Z", true, sent.Add(30500 * time.Millisecond), 0, true},
		{strconv.FormatInt(sent.Unix()+9, 10), true, sent.Add(9 * time.Second), time.Second, true},
		{"", true, time.Time{}, 0, false},
		{"2026-12-01T07:00:30Z", false, sent, 0, false},
		{"soon", true, time.Time{}, 0, false},
	} {
		at, res, ok := ResetAt(c.v, c.instant, sent)
		assert.Equal(t, c.ok, ok, c.v)
		if ok {
			assert.True(t, c.at.Equal(at), "%s: %v", c.v, at)
			assert.Equal(t, c.res, res, c.v)
		}
	}
}

// Every name in the table is canonical: a response's Header map is read
// with them directly, without allocating.
func TestRateLimitsAreCanonical(t *testing.T) {
	for _, l := range RateLimits {
		for _, name := range []string{l.Limit, l.Remaining, l.Reset} {
			assert.Equal(t, http.CanonicalHeaderKey(name), name)
		}
	}
}
