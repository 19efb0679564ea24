package llmretry

import (
	"math/rand/v2"
	"time"
)

// stop says why a request is not retried any more; reason turns it into
// the exported sentinel (reason.go).
type stop int

const (
	stopNone       stop = iota // a retry follows
	stopAnswered               // the result is an answer (a status below 400)
	stopFinal                  // the result is not retryable
	stopSpent                  // the schedule ran out of retries (an Asker may be asked)
	stopDeadline               // the wait would break the deadline/reserve rule
	stopServerWait             // the server asked for a wait above MaxRetryAfter
	stopProvider               // the provider says waiting will not help (spent quota, x-should-retry: false)
	stopHeld                   // the gatekeeper held the next attempt (its provider down, or asking for a wait) longer than the call could wait
	stopSigned                 // the request's AWS signature would be too old when resent
)

// retryLimit returns how many retries the schedule allows in one round: a
// large number when only a deadline bounds them (a Waits schedule whose
// last wait repeats). p must be resolved.
func (p *Policy) retryLimit(hasDeadline bool) int {
	if len(p.Waits) == 0 {
		return p.MaxRetries
	}
	limit := 1 << 30 // room for +1 on 32-bit platforms
	if p.MaxRetries > 0 {
		limit = p.MaxRetries
	}
	// The last wait repeats only under a deadline, and only if it is
	// positive: repeating a zero wait would hammer a provider that is down
	// until the deadline.
	if !hasDeadline || p.Waits[len(p.Waits)-1] <= 0 {
		limit = min(limit, len(p.Waits))
	}
	return limit
}

// pause is a wait before a retry as one side states it: the schedule's
// (set false when it allows no further retry) or the server's (set false
// when it asked for none). The zero pause states none.
type pause struct {
	d   time.Duration
	set bool
}

// scheduleWait returns the policy's own wait before retry k (1-based,
// counted within one round), unset when the schedule allows no retry k.
// A jittered wait is drawn anew on each call. p must be resolved.
func (p *Policy) scheduleWait(k int, hasDeadline bool) pause {
	if k < 1 || k > p.retryLimit(hasDeadline) {
		return pause{}
	}
	if len(p.Waits) == 0 {
		return pause{d: fullJitter(k, p.MaxWait), set: true}
	}
	return pause{d: p.Waits[min(k, len(p.Waits))-1], set: true}
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

// plan decides whether a retry follows and after how long, at now, from
// the schedule's pause for it (unset: the schedule allows none), the
// server's (unset: it asked for nothing) and the call's limits: the wait
// is the longer of the two, a server's above MaxRetryAfter ends retrying,
// and so does a wait that would pass a limit. A call whose next attempt
// its gatekeeper holds (see gatekeeper) passes a zero schedule's wait: only
// the server's counts, and the gate keeps the limits while it holds. p
// must be resolved.
func (p *Policy) plan(sched, server pause, now time.Time, lim limits) (time.Duration, stop) {
	if !sched.set {
		return 0, stopSpent
	}
	wait := sched.d
	if server.set {
		if server.d > p.MaxRetryAfter {
			return 0, stopServerWait
		}
		wait = max(wait, server.d)
	}
	if why := lim.allows(now.Add(wait)); why != stopNone {
		return 0, why
	}
	return wait, stopNone
}
