package store

import "time"

// Facts is what a Store knows of one provider key at one instant. The zero
// Facts says that nothing is known: the key is up, nobody probes it and
// the provider asked for no wait. A Facts is a value; it holds no
// credential and nothing of any request or response but the failure's
// kind.
type Facts struct {
	// Version orders the facts of one key: it grows with every change (a
	// key its store forgot may start again from zero).
	Version uint64
	// DownSince is when the key went down (the first failure of the
	// outage), DownUntil when the down state lapses unless a failure
	// confirms it again; both zero while the key is up.
	DownSince, DownUntil time.Time
	// Reason is the kind of the last failure that confirmed the key down:
	// a status ("502 Bad Gateway") or a transport failure ("connection
	// refused"), never a body, a URL or a credential.
	Reason string
	// NextProbe is the earliest time the next probe may go.
	NextProbe time.Time
	// Prober holds the probe lease until ProbeUntil; empty if nobody does.
	Prober     string
	ProbeUntil time.Time
	// WaitUntil is when the wait the provider asked for (Retry-After) ends;
	// nothing is sent for the key before it.
	WaitUntil time.Time
	// Retries is the number of live retry leases: retries on calls' own
	// schedules in flight, counted against the retry budget.
	Retries int

	// Burst, Every and Full pace the key under a rate limit the provider
	// published and the key has spent: a bucket of Burst requests, one
	// back each Every, full again at Full (the generic cell rate
	// algorithm's theoretical arrival time). The key is paced until Full;
	// all three are zero when it is not.
	Burst int
	Every time.Duration
	Full  time.Time
	// MaxInFlight is the limit on the key's calls in flight learnt from a
	// 429 at CutAt (0: none); it grows by one each Grow since (see Cap),
	// and lapses at CapUntil. All four are zero when there is none.
	MaxInFlight     int
	Grow            time.Duration
	CutAt, CapUntil time.Time
	// InFlight is the number of the key's calls in flight the store
	// counts: live send leases, and the calls each process said it has in
	// flight without one (its tally; see Report.Owner).
	InFlight int

	// Spacing, Floor, Next and TaughtUntil are what the key's 429s taught
	// of a rate its provider enforces below the one its headers publish (a
	// per-minute figure enforced over a second, a limit on sudden growth):
	// its sends go at least Spacing apart, the next no sooner than Next,
	// until TaughtUntil. Spacing climbs back (shrinks) with each send
	// granted under it (see Climb), never below Floor, the least time a
	// 429's stated wait proved one request takes to come back. All four
	// are zero when nothing is taught.
	Spacing, Floor    time.Duration
	Next, TaughtUntil time.Time
}

// LessonHold is how long what 429s taught a key (Facts.Spacing) outlives
// the last 429 that taught it and the last send granted under it.
const LessonHold = time.Minute

// Climb returns the spacing a key's sends take after one more send is
// granted under spacing: the rate rises by half a request a second with
// each send (so by about 1.65 times a second while sends keep going at
// it: less than a provider's acceleration limit allows, a doubling), and
// never above the rate floor allows. It is computed in whole
// microseconds, as every store computes it.
func Climb(spacing, floor time.Duration) time.Duration {
	us := spacing.Microseconds()
	next := time.Duration(us*climbScale/(climbScale+us)) * time.Microsecond
	if us > climbCap {
		next = spacing // beyond any spacing a process writes: as it is
	}
	return max(next, floor)
}

// climbScale is Climb's 2 s in microseconds, and climbCap the largest
// spacing it computes on (an hour: climbScale × climbCap stays within
// 2^53, so a store's Lua numbers compute it exactly).
const (
	climbScale = 2_000_000
	climbCap   = 3_600_000_000
)

// Down reports whether f says the key is down at now.
func (f Facts) Down(now time.Time) bool {
	return !f.DownSince.IsZero() && now.Before(f.DownUntil)
}

// Probing reports whether someone holds the probe lease at now.
func (f Facts) Probing(now time.Time) bool {
	return f.Prober != "" && now.Before(f.ProbeUntil)
}

// Waiting reports whether the provider's wait is not over at now.
func (f Facts) Waiting(now time.Time) bool {
	return now.Before(f.WaitUntil)
}

// Paced reports whether the key's calls are paced at now.
func (f Facts) Paced(now time.Time) bool {
	return f.Every > 0 && now.Before(f.Full)
}

// Capped reports whether the key's calls in flight are limited at now.
func (f Facts) Capped(now time.Time) bool {
	return f.MaxInFlight > 0 && now.Before(f.CapUntil)
}

// Taught reports whether what 429s taught of the key's rate holds at now.
func (f Facts) Taught(now time.Time) bool {
	return f.Spacing > 0 && now.Before(f.TaughtUntil)
}

// Cap returns the limit on the key's calls in flight at now: MaxInFlight,
// plus one for each Grow since CutAt (none if Grow is not positive); 0 if
// the key has no limit at now.
func (f Facts) Cap(now time.Time) int {
	if !f.Capped(now) {
		return 0
	}
	if f.Grow <= 0 || !now.After(f.CutAt) {
		return f.MaxInFlight
	}
	return f.MaxInFlight + int(min(now.Sub(f.CutAt)/f.Grow, 1<<20))
}
