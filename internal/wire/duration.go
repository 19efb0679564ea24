package wire

import (
	"math"
	"strings"
	"time"
)

const (
	// maxProtoSeconds and maxProtoNanos are time.Duration's maximum.
	maxProtoSeconds = int64(math.MaxInt64 / int64(time.Second))
	maxProtoNanos   = int64(math.MaxInt64 % int64(time.Second))
)

// ParseProtoDuration parses the JSON form of a google.protobuf.Duration
// (Gemini's RetryInfo.retryDelay): decimal seconds with up to nine
// fractional digits and a trailing "s", such as "26s", "0.5s" or
// "38.804097346s". It rejects signs, exponents, spaces, a missing "s" and
// values beyond time.Duration's range (about 292 years); it does not cap
// large values, the caller does.
func ParseProtoDuration(s string) (time.Duration, bool) {
	num, ok := strings.CutSuffix(s, "s")
	whole, frac, dot := strings.Cut(num, ".")
	if !ok || whole == "" || (dot && (frac == "" || len(frac) > 9)) {
		return 0, false
	}
	var secs, nanos int64
	for i := 0; i < len(whole); i++ {
		c := whole[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if secs = secs*10 + int64(c-'0'); secs > maxProtoSeconds {
			return 0, false
		}
	}
	for i := 0; i < 9; i++ {
		nanos *= 10
		if i < len(frac) {
			if c := frac[i]; c >= '0' && c <= '9' {
				nanos += int64(c - '0')
			} else {
				return 0, false
			}
		}
	}
	if secs == maxProtoSeconds && nanos > maxProtoNanos {
		return 0, false
	}
	return time.Duration(secs)*time.Second + time.Duration(nanos), true
}
