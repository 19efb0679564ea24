package llmretry

import (
	"math/rand/v2"
	"time"
)

// stop says why a request is not retried any more.
type stop int

const (
	stopNone       stop = iota // a retry follows
	stopFinal                  // the result is not retryable
	stopSpent                  // the schedule ran out of retries (an Asker may be asked)
	stopDeadline               // the wait would break the deadline/reserve rule
	stopServerWait             // the server asked for a wait above MaxRetryAfter
	stopProvider               // the provider says waiting will not help (spent quota, x-should-retry: false)
	stopHeld                   // coordinated: the provider was down (or asked for a wait) longer than the call could wait
)

// String names the reason for logs and errors.
func (s stop) String() string {
	switch s {
	case stopNone:
		return "retrying"
	case stopFinal:
		return "not retryable"
	case stopSpent:
		return "retries spent"
	case stopDeadline:
		return "no time left before the deadline and reserve"
	case stopServerWait:
		return "server wait above MaxRetryAfter"
	case stopProvider:
		return "the provider says waiting will not help"
	case stopHeld:
		return "the provider was down longer than the call could wait"
	}
	return "unknown"
}

// scheduleWait returns the policy's own wait before retry k (1-based,
// counted within one round), or false when the schedule allows no retry k.
// p must be resolved.
func (p *Policy) scheduleWait(k int, hasDeadline bool) (time.Duration, bool) {
	if k < 1 {
		return 0, false
	}
	if len(p.Waits) > 0 {
		if p.MaxRetries > 0 && k > p.MaxRetries {
			return 0, false
		}
		if k <= len(p.Waits) {
			return p.Waits[k-1], true
		}
		last := p.Waits[len(p.Waits)-1]
		// The last wait repeats only under a deadline, and only if it is
		// positive: repeating a zero wait would hammer a provider that is
		// down until the deadline.
		if !hasDeadline || last <= 0 {
			return 0, false
		}
		return last, true
	}
	if k > p.MaxRetries {
		return 0, false
	}
	return fullJitter(k, p.MaxWait), true
}

// fullJitter returns a random duration in [0, min(maxWait, 2^(k-1) s)].
func fullJitter(k int, maxWait time.Duration) time.Duration {
	ceiling := maxWait
	if k-1 < 32 { // 2^31 s is far above any sane MaxWait; avoid overflow
		if exp := time.Duration(1<<(k-1)) * time.Second; exp < ceiling {
			ceiling = exp
		}
	}
	if ceiling <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(ceiling) + 1))
}

// nextWait decides whether retry k (1-based within the round) follows and
// after how long. serverWait is what the server asked for (hasServerWait
// false when it asked for nothing). now and deadline come from the
// request's clock and context. held says that the retry waits at a
// coordinated gate (see Coordination) instead of sleeping the schedule's
// own wait: only the server's wait is then counted here, and the gate
// enforces the deadline and reserve while it holds. p must be resolved.
func (p *Policy) nextWait(k int, serverWait time.Duration, hasServerWait bool, now, deadline time.Time, hasDeadline, held bool) (time.Duration, stop) {
	wait, ok := p.scheduleWait(k, hasDeadline)
	if !ok {
		return 0, stopSpent
	}
	if held {
		wait = 0
	}
	if hasServerWait {
		if serverWait > p.MaxRetryAfter {
			return 0, stopServerWait
		}
		wait = max(wait, serverWait)
	}
	if hasDeadline && now.Add(wait).Add(p.Reserve).After(deadline) {
		return 0, stopDeadline
	}
	return wait, stopNone
}
