package llmretry

import (
	"math/rand/v2"
	"time"

	"github.com/llmretry/llmretry/internal/coord"
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

// scheduleWait returns the policy's own wait before retry k (1-based,
// counted within one round), unset when the schedule allows no retry k.
// A jittered wait is drawn anew on each call. p must be resolved.
func (p *Policy) scheduleWait(k int, hasDeadline bool) coord.Pause {
	if k < 1 || k > p.retryLimit(hasDeadline) {
		return coord.Pause{}
	}
	if len(p.Waits) == 0 {
		return coord.Pause{D: fullJitter(k, p.MaxWait), Set: true}
	}
	return coord.Pause{D: p.Waits[min(k, len(p.Waits))-1], Set: true}
}

// fullJitter returns a random duration in [0, min(maxWait, 2^(k-1) s)].
func fullJitter(k int, maxWait time.Duration) time.Duration {
	ceiling := jitterCeiling(k, maxWait)
	if ceiling <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(ceiling) + 1))
}

// upperJitter returns a random duration in the upper half of fullJitter's
// range: [c/2, c], c = min(maxWait, 2^(k-1) s).
func upperJitter(k int, maxWait time.Duration) time.Duration {
	ceiling := jitterCeiling(k, maxWait)
	if ceiling <= 0 {
		return 0
	}
	half := ceiling / 2
	return half + time.Duration(rand.Int64N(int64(ceiling-half)+1))
}

// jitterCeiling returns min(maxWait, 2^(k-1) s), the top of retry k's
// jitter range.
func jitterCeiling(k int, maxWait time.Duration) time.Duration {
	ceiling := maxWait
	if k-1 < 32 { // 2^31 s is far above any sane MaxWait; avoid overflow
		if exp := time.Duration(1<<(k-1)) * time.Second; exp < ceiling {
			ceiling = exp
		}
	}
	return ceiling
}

// refusedWait returns the schedule's pause sched for retry k (1-based,
// within the round) after a 429 that stated no wait (no Retry-After, no
// wait in its words or its rate-limit headers): a jittered wait is drawn
// again from the upper half of its step's range, so that it is never
// less than half of what the step allows and at least what it promises on
// average — a persistent 429 meets at most 3 attempts in its first 3 s
// (0, ≥ 0.5 s, ≥ 1.5 s), where full jitter may draw four waits near zero.
// Full jitter stays for 5xx and failed connections, where spreading a
// crowd over the whole range does the least work. Waits are kept as they
// are. p must be resolved.
func (p *Policy) refusedWait(k int, sched coord.Pause) coord.Pause {
	if !sched.Set || len(p.Waits) > 0 {
		return sched
	}
	return coord.Pause{D: upperJitter(k, p.MaxWait), Set: true}
}

// plan decides whether a retry follows and after how long, at now, from
// the schedule's pause for it (unset: the schedule allows none), the
// server's (unset: it asked for nothing) and the call's limits: the wait
// is the longer of the two, a server's above MaxRetryAfter ends retrying
// (whether or not the schedule allows a retry), and so does a wait that
// would pass a limit. A call whose next attempt
// its gatekeeper holds (see coord.Gatekeeper) passes a zero schedule's wait: only
// the server's counts, and the gate keeps the limits while it holds. p
// must be resolved.
func (p *Policy) plan(sched, server coord.Pause, now time.Time, lim limits) (time.Duration, stop) {
	if server.Set && server.D > p.MaxRetryAfter {
		// Before the schedule: a round OnExhausted's yes would run
		// starts when the server's wait ends, so spent retries do not
		// make a wait too long a question for a person.
		return 0, stopServerWait
	}
	if !sched.Set {
		// The retries are spent; but when the attempt OnExhausted's yes
		// would send (once the server's wait ends) passes a limit, that
		// is the stop: nobody is asked a question whose yes cannot be
		// honoured.
		var next time.Duration
		if server.Set {
			next = server.D
		}
		if why := lim.allows(now.Add(next)); why != stopNone {
			return 0, why
		}
		return 0, stopSpent
	}
	wait := sched.D
	if server.Set {
		wait = max(wait, server.D)
	}
	if why := lim.allows(now.Add(wait)); why != stopNone {
		return 0, why
	}
	return wait, stopNone
}
