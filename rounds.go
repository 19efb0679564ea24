package llmretry

import (
	"context"
	"time"
)

// This file is the Asker's rounds, one implementation for a Transport's
// calls (retry.go) and Do's (do.go): a call runs its schedule's retries in
// rounds; once a round's retries are spent, the policy's Asker is asked
// whether to run another, and a yes starts it with an attempt at once (or
// when what is left of the server's wait ends), then the schedule's
// retries from the first, under the same limits.

// rounds is the state of a call's rounds, embedded in the call that runs
// them. It belongs to the call's goroutine.
type rounds struct {
	lim     limits        // when the call sends nothing more
	n       int           // attempts made, across rounds
	retries int           // retries taken in the current round
	again   bool          // an Asker said yes: the next attempt goes at once
	server  time.Time     // when the latest server wait ends; zero if none
	wait    time.Duration // the wait before the next attempt, as decided
	why     stop          // why the latest round stopped
}

// rounder is a call that runs in rounds: a Transport's call, or Do's.
type rounder interface {
	// round runs the current round's attempts until one is not retried,
	// and says why.
	round() stop
	// exhausted returns the record an Asker is shown when the round's
	// retries are spent.
	exhausted() *Exhausted
	// nextRound starts the next round (rounds' own).
	nextRound()
}

// runRounds runs r's rounds: once per round whose retries are spent, the
// policy's Asker is asked whether to run another (a done context counts
// as no, before or after it answers). It returns when a round stops for
// another reason, ctx ends, or the Asker says no; r keeps the outcome.
func (p *Policy) runRounds(ctx context.Context, r rounder) {
	for r.round() == stopSpent && p.OnExhausted != nil && ctx.Err() == nil {
		if !p.OnExhausted.Ask(ctx, r.exhausted()) || ctx.Err() != nil {
			return
		}
		r.nextRound()
	}
}

// nextRound starts the round after an Asker's yes: its first attempt goes
// at once (see atOnce), then the schedule's retries from the first.
func (s *rounds) nextRound() {
	s.retries, s.why, s.again = 0, stopNone, true
}

// atOnce decides the attempt that follows an Asker's yes: at once, or when
// the server's wait ends, if the call's limits allow it then. It leaves
// the wait in s.wait, or why no attempt follows in s.why.
func (s *rounds) atOnce() bool {
	s.again = false
	now := time.Now()
	wait := max(0, s.server.Sub(now))
	if s.why = s.lim.allows(now.Add(wait)); s.why != stopNone {
		return false
	}
	s.wait = wait
	return true
}
