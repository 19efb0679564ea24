package wire

import (
	"strings"
	"time"
)

// MessageWait reads the wait an error message states in words: OpenAI's
// "Please try again in 1.868s.", "in 20ms", "in 1m30s", "in 20 seconds"
// (the forms codex-rs's try_parse_retry_after reads, and Go durations), and
// Azure OpenAI's "retry after 33 seconds". It rejects a sign and values
// time.ParseDuration cannot hold; it does not cap large values (Azure's
// "retry after 86400 seconds" is a daily quota: the caller refuses it).
func MessageWait(msg string) (time.Duration, bool) {
	phrase := "try again in"
	i := indexFold(msg, phrase)
	if i < 0 {
		phrase = "retry after"
		if i = indexFold(msg, phrase); i < 0 {
			return 0, false
		}
	}
	rest := msg[i+len(phrase):]
	for len(rest) > 0 && rest[0] == ' ' {
		rest = rest[1:]
	}
	n := 0
	for n < len(rest) && (rest[n] >= '0' && rest[n] <= '9' || rest[n] == '.' || rest[n] >= 'a' && rest[n] <= 'z' || rest[n] == 0xc2 || rest[n] == 0xb5) {
		n++
	}
	tok := rest[:n]
	for len(tok) > 0 && tok[len(tok)-1] == '.' {
		tok = tok[:len(tok)-1] // the sentence's full stop
	}
	if tok == "" || tok[0] < '0' || tok[0] > '9' {
		return 0, false
	}
	if last := tok[len(tok)-1]; last >= '0' && last <= '9' {
		// A bare number: its unit is the next word.
		unit := rest[n:]
		for len(unit) > 0 && unit[0] == ' ' {
			unit = unit[1:]
		}
		m := 0
		for m < len(unit) && (unit[m] >= 'a' && unit[m] <= 'z' || unit[m] >= 'A' && unit[m] <= 'Z') {
			m++
		}
		switch unit = unit[:m]; {
		case eqFoldAny(unit, "s", "sec", "secs", "second", "seconds"):
			tok += "s"
		case eqFoldAny(unit, "ms", "millisecond", "milliseconds"):
			tok += "ms"
		case eqFoldAny(unit, "m", "min", "mins", "minute", "minutes"):
			tok += "m"
		case eqFoldAny(unit, "h", "hour", "hours"):
			tok += "h"
		default:
			return 0, false
		}
	}
	d, err := time.ParseDuration(tok)
	if err != nil || d < 0 {
		return 0, false
	}
	return d, true
}

// indexFold returns the index of the first instance of the ASCII string
// sub in s, ignoring case, or -1.
func indexFold(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return i
		}
	}
	return -1
}

// eqFoldAny reports whether s equals one of words, ignoring case.
func eqFoldAny(s string, words ...string) bool {
	for _, w := range words {
		if strings.EqualFold(s, w) {
			return true
		}
	}
	return false
}
