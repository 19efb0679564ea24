package store

import (
	"context"
	"errors"
	"time"
)

// ErrUnreachable, wrapped by a Store method's error, says that the store
// as a whole cannot be reached (it does not answer, or refuses every
// call), not that one key failed: every key then coordinates in-process
// for a probe interval. Any other error sends only the key it was about
// there.
var ErrUnreachable = errors.New("llmretry: store unreachable")

// VersionHold is the least time a Store keeps a key's Version after its
// last change, lapsed facts or not, so that a late notice can be told
// from a new one: a process takes facts with a lower Version than its
// view's only once its view is this old.
const VersionHold = time.Minute

// Store keeps the facts that coordinated calls share about each provider
// key (see package coordination): whether the key is down, since when and
// why, who may probe it and until when, when the provider's requested
// wait ends, how many retries on calls' own schedules are in flight, the
// pace a spent rate limit sets, the limit on calls in flight a 429
// taught with the calls in flight counted against it, and the rate 429s
// taught where the published limit was wrong. Every fact has an
// expiry; a store forgets a key once none of its facts is live.
//
// A Store holds facts only. What waits on them — held calls, their
// channels and timers, the choice of the next probe among them — stays in
// the process that holds the calls, which keeps a local view of each key
// fed by the store's answers and by Watch. A call whose key is quiet in
// that view makes no store call at all; a process writes only when a
// failure, a recovery, a probe, a budgeted retry, a server wait, a spent
// rate limit or a 429's limit or lesson changes a fact, and, while a key is paced, taught or
// limited, for each send (and, while it is limited, for the send's end and
// the process's count of its calls in flight without a send lease).
//
// coordination.Config.Store nil means an in-process store (of the kind
// coordination.NewMemoryStore returns): one per Transport. A shared store
// (github.com/llmretry/llmretry/redisstore) lets a fleet of processes
// coordinate as one. A Store belongs to whoever made it: a Transport
// calls it and watches it, and never closes it.
//
// # Contract
//
// Every method is atomic with respect to the others on the same key, and
// safe for concurrent use. Times are the callers' (At, Until, now): a
// store judges expiry by them, and processes sharing a store need clocks
// that agree to within a small part of a probe interval.
//
//   - Key names a provider key: requests to host carrying credential (the
//     request's credential material, canonically joined; nil or empty for
//     none) share one name, in every process that uses the store. The name
//     must not let anyone recover the credential (hash it with a keyed
//     hash), must begin with host, and must be the same for equal inputs.
//     The store must not keep credential.
//   - Load returns the facts of key as they are at now, without the lapsed
//     ones (a lapsed fact reads as its zero value): the pace (Burst, Every,
//     Full) lapses at Full, the limit on calls in flight (MaxInFlight,
//     Grow, CutAt, CapUntil) at CapUntil, what 429s taught (Spacing,
//     Floor, Next, TaughtUntil) at TaughtUntil, and InFlight counts the
//     send leases and tallies live at now.
//   - Report records what one attempt's result says of the provider. If
//     r.Prober holds the probe lease, the lease ends. ProviderDown: a key
//     that is not down at r.At goes down (DownSince r.At, NextProbe
//     r.NextProbe); a key already down takes r.NextProbe only if r.Prober
//     held the lease (a failed probe schedules the next); either way
//     DownUntil becomes the later of itself and r.At+r.DownFor.
//     ProviderUp: the down facts are cleared (DownSince, DownUntil,
//     NextProbe, Reason). Reason becomes r.Reason for ProviderDown and for
//     a report that asks for a wait; WaitUntil becomes the later of itself
//     and r.WaitUntil. NoEvidence changes nothing but the lease.
//   - TakeProbe grants l.Holder the probe lease until l.Until, and only
//     then reports true, if at l.At the key is down, no live lease is held
//     and NextProbe is not after l.At. A granted lease keeps the key down
//     at least until the lease ends.
//   - TakeRetry grants l.Holder a retry lease until l.Until, and only then
//     reports true, if fewer than limit live retry leases are held.
//   - Report also ends r.Sender's send lease, if it holds one, before it
//     counts the calls in flight below (announced, as Release's end of a
//     send lease is).
//   - Report also applies what a response says of the key's rate limit.
//     r.Every > 0 paces the key: if it is not paced at r.At (Full not
//     after r.At), Burst, Every and Full become r's; else Full becomes the
//     later of the two, Every the longer, Burst the smaller.
//     r.Owner, if not empty, sets Owner's tally — the key's calls it has
//     in flight without a send lease — to r.Unleased until r.TallyUntil
//     (0 ends it), unless the store already took a count of Owner's with
//     a Seq as high; InFlight counts every live tally with the send
//     leases. r.Cut then limits the key's calls in flight to the calls in
//     flight the store counts at r.At (at least 1): MaxInFlight becomes
//     that number, Grow becomes r's, CutAt becomes r.At, and CapUntil the
//     later of itself and r.CapUntil. Without r.Cut, a tally that rose on
//     a limited key raises MaxInFlight to InFlight if it is lower (the
//     provider took those calls at once).
//     r.Spacing or r.Floor positive teaches the key a rate (Facts.Taught):
//     with s = max(r.Spacing, r.Floor), a key not taught at r.At takes
//     Spacing s, Floor r.Floor and Next r.At+s; a taught one takes the
//     longer Spacing and the longer Floor, and Next the later of itself
//     and r.At+s; either way Spacing is at least Floor, and TaughtUntil
//     the later of itself and r.At+LessonHold.
//   - TakeSend asks for the next send of a paced, limited or taught key.
//     If the key is paced at l.At, its slot is s = max(l.At, Full −
//     (Burst−1)·Every), else s = l.At; if it is taught at l.At, s is at
//     least Next. Nothing is granted if s is after l.Until (TakeSend
//     returns s), or if limit > 0 and InFlight (send leases and tallies) is
//     limit or more (it returns the zero time). Otherwise a paced key's
//     Full becomes max(Full, s) + Every; a taught key's Next becomes s +
//     Spacing, then its Spacing Climb(Spacing, Floor) and its TaughtUntil
//     the later of itself and s+LessonHold (a store may keep it to the
//     millisecond, rounded up); l.Holder takes a send lease
//     until l.Until if limit > 0, and TakeSend returns s and true.
//   - Release ends any lease holder holds (a probe sent without a result,
//     a retry or a send that ended); releasing what is not held does
//     nothing.
//   - Every method that changes a fact increments Version, and Watch
//     callbacks then receive the new facts (changes to retry leases alone,
//     and TakeSend's changes — Full, a new send lease — need not be
//     announced; the end of a send lease and a changed tally must be,
//     since calls elsewhere may wait for them). A holder that already
//     holds a send lease is refused one at the limit and otherwise keeps
//     one lease, until the later Until. A store keeps a key's Version for
//     at least VersionHold (a minute) after its last change, lapsed facts
//     or not, so that a late notice can be told from a new one; after that
//     a forgotten key may start again from zero.
//   - Watch calls fn, on any goroutine, with each key's facts after they
//     change, from this process or any other, until stop is called. fn must
//     return promptly and must not call the store. Notices may be late,
//     repeated, out of order (Version orders them) or lost. When a store
//     knows it may have lost notices (its subscription was made again, say
//     after a silent drop), it calls fn once with an empty key and zero
//     Facts: the watcher then reads again each key it uses, on that key's
//     next call.
//
// A store may lose facts and notices (a restart, an eviction): a lost fact
// costs at most a few requests that would have been held, and a process
// re-reads a key it holds calls for at least once per probe interval, and
// every key it uses after the store says notices were lost, so a lost
// notice costs at most that. A quiet key's calls make no store call. A
// store's method may fail: the coordinating process then goes on with an
// in-process store of its own, for that key alone, for one probe interval
// before it tries the store again; an error that wraps ErrUnreachable
// sends every key there.
// So a failing store never fails a call or holds it past its deadline,
// one failing key sinks no other, and no store error reaches a caller.
// Methods should bound their own time (a shared store's calls need short
// timeouts) and honour ctx.
//
// A process does not trust what a shared store tells it further than it
// would have written it: a probe lease or next probe more than a probe
// interval off, a down state beyond its lapse rule, are read as the most
// it would have written; a server wait longer than any its calls would
// honour is read as none; a send TakeSend grants after l.Until is read as
// refused (the process releases the lease).
type Store interface {
	// Key returns the store's name for the provider key of requests to
	// host carrying credential.
	Key(host string, credential []byte) string
	// Load returns key's facts at now.
	Load(ctx context.Context, key string, now time.Time) (Facts, error)
	// Report applies one attempt's evidence to key and returns key's facts
	// after it.
	Report(ctx context.Context, key string, r Report) (Facts, error)
	// TakeProbe asks for key's probe lease; it returns key's facts after
	// the request and whether the lease was granted.
	TakeProbe(ctx context.Context, key string, l Lease) (Facts, bool, error)
	// TakeRetry asks for one of key's retry leases, of which at most limit
	// may be live; it returns key's facts after the request and whether
	// the lease was granted.
	TakeRetry(ctx context.Context, key string, l Lease, limit int) (Facts, bool, error)
	// TakeSend asks for the next send of a paced key, or for one of the
	// send leases of a key whose calls in flight are limited to limit (0:
	// not limited); it returns key's facts after the request, the instant
	// the send may go, and whether it was granted.
	TakeSend(ctx context.Context, key string, l Lease, limit int) (Facts, time.Time, bool, error)
	// Release ends any lease holder holds on key, and returns key's facts
	// after it.
	Release(ctx context.Context, key, holder string, now time.Time) (Facts, error)
	// Watch calls fn with a key and its new facts whenever they change,
	// and with an empty key when notices may have been lost, until stop is
	// called.
	Watch(fn func(key string, f Facts)) (stop func())
}

// Report is one attempt's evidence about its provider key, for
// Store.Report. A Report is a value the caller fills; the zero Report
// says nothing (NoEvidence) and changes no fact.
type Report struct {
	// At is when the attempt ended.
	At time.Time
	// Evidence is what the attempt says of the provider.
	Evidence Evidence
	// Reason is the failure's kind, for ProviderDown (see Facts.Reason).
	Reason string
	// DownFor is how long ProviderDown keeps the key down: DownUntil is at
	// least At+DownFor.
	DownFor time.Duration
	// NextProbe is the earliest time of the next probe, for ProviderDown
	// evidence that takes the key down or ends the probe lease.
	NextProbe time.Time
	// WaitUntil, if not zero, is when the wait the provider asked for ends.
	WaitUntil time.Time
	// Prober, if not empty, is the holder of the probe lease this attempt
	// was sent under: the lease ends.
	Prober string
	// Burst, Every and Full, if Every > 0, pace the key: the response
	// says a rate limit is spent (see Facts).
	Burst int
	Every time.Duration
	Full  time.Time
	// Owner, if not empty, names the reporting process (the same in all
	// its reports, unique among the processes that share the store), and
	// Unleased is the number of the key's calls it has in flight without
	// a send lease, as of its Seq-th count: its tally, counted in
	// InFlight until TallyUntil (see Store).
	Owner      string
	Unleased   int
	Seq        uint64
	TallyUntil time.Time
	// Cut says that the attempt was refused (429) for too many calls in
	// flight: the key's calls in flight are limited to the number the
	// store counts, growing by one each Grow, until at least CapUntil.
	Cut      bool
	Grow     time.Duration
	CapUntil time.Time
	// Sender, if not empty, is the holder of the send lease this attempt
	// was sent under, kept until its result was told (a 429's): the
	// lease ends before the tally and Cut count the calls in flight, so
	// that the room a refused attempt leaves is not granted again before
	// its 429 is counted, nor the refused attempt counted in the cut.
	Sender string
	// Spacing and Floor, if either is positive, teach the key a rate its
	// provider enforces below the one it publishes: a 429 came where the
	// pace (or the published limit) said there was room. Its sends go at
	// least max(Spacing, Floor) apart; Floor is what the 429's stated wait
	// proved (see Facts).
	Spacing, Floor time.Duration
}

// Evidence is what one attempt's result says of its provider. The zero
// Evidence is NoEvidence.
type Evidence int8

const (
	// NoEvidence: nothing. The request's own fault (malformed, its body
	// failed), or its caller's context ended.
	NoEvidence Evidence = iota
	// ProviderUp: the provider answered (a 2xx, a 4xx, a 429).
	ProviderUp
	// ProviderDown: the provider failed as if down (a retryable 5xx such
	// as 502, 503 or 529, or a failed connection).
	ProviderDown
)

// Lease asks a Store for a lease: Holder, asking at At, for a lease that
// lapses at Until unless released first. A Lease is a value the caller
// fills; it has no useful zero value (a lease held by nobody, lapsed from
// the start).
type Lease struct {
	Holder    string
	At, Until time.Time
}
