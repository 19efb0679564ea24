package llmretry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"time"

	"github.com/llmretry/llmretry/internal/coord"
	"github.com/llmretry/llmretry/store"
)

// Defaults applied where a Coordination field is zero.
const (
	// DefaultProbeInterval is the longest time between probes while a
	// provider key is down, when Coordination.ProbeInterval is zero.
	DefaultProbeInterval = 5 * time.Second
	// DefaultReleaseSpread is the window over which held calls are released
	// when their provider key comes back, when Coordination.ReleaseSpread
	// is zero.
	DefaultReleaseSpread = time.Second
	// DefaultRetryBudget is the share of a key's calls in flight that may be
	// sending a retry on their own schedule at once, when
	// Coordination.RetryBudget is zero (Envoy's retry budget).
	DefaultRetryBudget = 0.2
	// DefaultMinRetries is the number of such retries the budget always
	// allows, when Coordination.MinRetries is zero.
	DefaultMinRetries = 3
)

// Coordination turns on coordinated ride-through for a Transport made by
// NewCoordinated: the calls it carries to one provider key share what they
// learn, so that an outage costs the provider one probe at a time instead
// of every call's retries, and every call goes again as soon as the
// provider is back instead of sleeping out its own wait.
//
// A provider key is the request URL's host (with its port, if any) and the
// credential the request carries: a hash of its Authorization, x-api-key,
// api-key and x-goog-api-key headers and its key= query value (an AWS
// Signature Version 4 Authorization counts by its access key ID, not its
// per-request signature). Calls with different API keys to one host are
// coordinated separately, so that one key's rate limit does not hold back
// another's. Only hashes are kept: the key's name in records, errors and
// the Store is whatever the Store makes of host and credential (the
// in-process store: the host and 8 hex digits of a per-Transport seeded
// hash), never the credential.
//
// Each route of a call with Policy.Fallback is a key of its own, even on
// the primary's host with its credential (a fallback to another model):
// its name is the Store's with "~route" and the route's number after it.
// While a call has another route to take, a key that is down does not
// hold it: it goes around at once (no attempt spent), unless the key's
// probe is due and no held call is to send it, when it goes as the probe;
// so the fleet's primary sees one probe per ProbeInterval, and new calls
// return to it once one answers. A call held on every route waits on all
// of their keys at once, and goes on whichever lets it go first. See
// docs/coordination.md.
//
// For each key:
//
//   - An attempt that fails in a way that says the provider is down (a
//     retryable 5xx such as 502, 503 or Anthropic's 529, or a failed
//     connection) marks the key down. While it is down, retries and new
//     calls for that key are held instead of sent, and one held call goes
//     out as the probe, at most ProbeInterval after the previous probe was
//     sent (a random 0–20 % sooner). Any response that is not a down
//     failure (the probe's or a call already in flight) brings the key
//     back up. Only the provider's evidence counts: an error the request
//     itself caused (malformed, its body failing, its caller's context)
//     moves no key.
//   - Every fact has a lifetime. The down state lapses three probe
//     intervals after the last failure that confirmed it (while calls are
//     held, probes keep confirming it), the probe lease after one probe
//     interval (a probe slower than that does not block the next), a
//     server wait at its end; a key that no call uses and that knows no
//     live fact is forgotten, here and in the store.
//   - A server wait (Retry-After, retry-after-ms, Gemini's RetryInfo, a
//     wait in the message's words) on a 429 or 503 holds every call for
//     the key until that instant, if the call that received it honours it
//     (Policy.MaxRetryAfter), unless the response says which published
//     rate limit is spent: that paces the key instead.
//   - A response (a success or not) whose rate-limit headers say a limit is
//     spent (x-ratelimit-*, anthropic-ratelimit-*, OpenRouter's
//     X-RateLimit-*; tokens once a 429 said what a request takes) paces
//     the key until the limit is full again: each call, new or retried,
//     takes the next turn at the limit's rate from the Store, in the order
//     they ask, so that a crowd meets its limit without running into it.
//     A reset further off than the call's MaxRetryAfter paces nothing for
//     it.
//   - A 429 that spends no published limit, while other calls of the key
//     are in flight, limits the key's calls in flight to that number;
//     calls over it wait for one in flight to end (a stream: its body),
//     oldest first. The count is the fleet's: the store counts every
//     process's send leases and its attempts sent before the limit was
//     learnt. The limit grows back by one every 6 probe intervals, and
//     lapses 12 probe intervals after the last 429 that cut it.
//   - When the key comes back (or the server's wait is over), the held
//     calls are released at random times within ReleaseSpread (or before
//     each call's deadline minus its reserve, if that comes first); a
//     failure during the spread marks the key down again and holds the
//     rest.
//   - A call keeps its own Policy: its retry count, MaxRetryAfter, deadline
//     and reserve. While held it does not sleep its own waits; a call that
//     can wait no longer (a wait past its deadline minus its reserve, or a
//     server wait above its MaxRetryAfter) ends, without sending, with an
//     *Exhausted error wrapping a *DownError that says since when and why
//     the key was held and what its last failure was. A call without a
//     deadline is held for as long as its key stays down (only its own
//     probes spend its retries): give calls a deadline.
//   - Retries on a call's own schedule, while the key is up (a 408, a 429
//     without a server wait or other calls in flight), are held while the
//     key's retries in flight
//     reach max(MinRetries, RetryBudget × its calls in flight). Probes and
//     released calls are not counted against it: one probe at a time
//     already limits them.
//
// Policy.OnHold records every hold, its reason and how it ended, and
// Attempt.Probe marks the probes. OnHold, OnAttempt and the Asker run on
// the call's goroutine with no lock held, once the shared state is
// consistent: a panic in one reaches the call's caller and leaves no lease
// held and no budget spent.
//
// The facts live in the Store (the in-process one unless Store is set);
// what waits on them (held calls, their timers) stays in the process. A
// call to a key with no live fact takes no lock and makes no store call.
//
// The zero Coordination uses the defaults above. A Coordination is a value:
// NewCoordinated keeps its own copy. The Transport's coordination is safe
// for concurrent use.
//
// Only the outermost llmretry Transport coordinates: a coordinated
// Transport nested under another one passes requests through.
type Coordination struct {
	// ProbeInterval is the longest time between two probes while a key is
	// down; each interval is a random 0–20 % shorter. Zero means
	// DefaultProbeInterval (5 s).
	ProbeInterval time.Duration
	// ReleaseSpread is the window within which the held calls are sent
	// when their key comes back, each at a random moment. Zero means
	// DefaultReleaseSpread (1 s).
	ReleaseSpread time.Duration
	// RetryBudget is the share (0 to 1) of a key's calls in flight that
	// may be sending a retry on their own schedule at once. Zero means
	// DefaultRetryBudget (0.2); 1 turns the budget off.
	RetryBudget float64
	// MinRetries is the number of concurrent retries the budget always
	// allows. Zero means DefaultMinRetries (3).
	MinRetries int
	// Store keeps the facts the calls share. Nil means an in-process store
	// of the Transport's own; a shared store (see redisstore) makes every
	// process that uses it coordinate as one. Transports may share a
	// Store.
	Store store.Store
}

// Validate reports whether c can be used, naming the first field that
// cannot: negative durations and counts, and a RetryBudget outside 0 to 1
// (or NaN).
func (c Coordination) Validate() error {
	var errs []error
	if c.ProbeInterval < 0 {
		errs = append(errs, fmt.Errorf("llmretry: Coordination.ProbeInterval is negative (%v)", c.ProbeInterval))
	}
	if c.ReleaseSpread < 0 {
		errs = append(errs, fmt.Errorf("llmretry: Coordination.ReleaseSpread is negative (%v)", c.ReleaseSpread))
	}
	if math.IsNaN(c.RetryBudget) || c.RetryBudget < 0 || c.RetryBudget > 1 {
		errs = append(errs, fmt.Errorf("llmretry: Coordination.RetryBudget is %v, not between 0 and 1", c.RetryBudget))
	}
	if c.MinRetries < 0 {
		errs = append(errs, fmt.Errorf("llmretry: Coordination.MinRetries is negative (%d)", c.MinRetries))
	}
	return errors.Join(errs...)
}

// resolved returns c with its defaults filled in.
func (c Coordination) resolved() Coordination {
	if c.ProbeInterval == 0 {
		c.ProbeInterval = DefaultProbeInterval
	}
	if c.ReleaseSpread == 0 {
		c.ReleaseSpread = DefaultReleaseSpread
	}
	if c.RetryBudget == 0 {
		c.RetryBudget = DefaultRetryBudget
	}
	if c.MinRetries == 0 {
		c.MinRetries = DefaultMinRetries
	}
	return c
}

// NewCoordinated returns a Transport like New's whose calls are coordinated
// per provider key as c says (see Coordination). An invalid policy or
// coordination is an error and no Transport is made.
//
// Turn it on when one Transport carries many concurrent calls to the same
// provider (an agent host running many turns): during an outage the
// provider then sees one probe at a time instead of every call's retries,
// and the calls go again within a probe interval of its recovery. The
// probes cost per key, not per call: a Transport that carries only a few
// calls at a time sends more attempts with it (one probe every 4–5 s while
// the provider is down) than its calls' own schedules would, in exchange
// for answering within seconds of the recovery.
//
// A Transport made with a shared Store watches it for changes for as long
// as the Transport is reachable.
func NewCoordinated(base http.RoundTripper, p Policy, c Coordination) (*Transport, error) {
	if err := errors.Join(p.Validate(), c.Validate()); err != nil {
		return nil, err
	}
	t, err := New(base, p)
	if err != nil {
		return nil, err
	}
	co, stop := coord.New(c.resolved().engineConfig())
	t.keepers = coordinated{co}
	runtime.AddCleanup(t, func(stop func()) { stop() }, stop)
	return t, nil
}

// NewMemoryStore returns an empty in-process Store: the one NewCoordinated
// makes for each Transport when Coordination.Store is nil. Share one among
// several Transports of a process (with different policies, say) to have
// their calls to a provider coordinate as one. It is safe for concurrent
// use and starts no goroutine; it forgets a key a minute after its last
// fact lapsed.
func NewMemoryStore() store.Store { return coord.NewMemoryStore() }

// engineConfig is c (resolved) as the engine reads it, with what it needs
// of the core.
func (c Coordination) engineConfig() coord.Config {
	return coord.Config{
		ProbeInterval: c.ProbeInterval,
		ReleaseSpread: c.ReleaseSpread,
		RetryBudget:   c.RetryBudget,
		MinRetries:    c.MinRetries,
		Store:         c.Store,
		MaxRetryAfter: DefaultMaxRetryAfter,
		IsStream:      isEventStream,
	}
}

// coordinated is the gatekeepers of a Transport made by NewCoordinated:
// the engine (internal/coord), which gives each call a coord.Call.
type coordinated struct{ co *coord.Coordinator }

// join makes the call's part in its key's coordination.
func (c coordinated) join(req *http.Request, p *Policy, route int) gatekeeper {
	return coordCall{c.co.Join(req, (*callPolicy)(p), route)}
}

// coordCall is a coordinated call's gatekeeper: it converts the core's
// values to the engine's and back, and allocates nothing (a one-pointer
// struct fits an interface as is).
type coordCall struct{ c *coord.Call }

func (g coordCall) admit(ctx context.Context, a admission) (bool, error) {
	probe, err := g.c.Admit(ctx, engineAdmission(a))
	return probe, downErrorOf(err)
}

func (g coordCall) await(ctx context.Context, a admission, others []gatekeeper) (int, bool, error) {
	calls := make([]*coord.Call, 0, len(others))
	for _, o := range others {
		if oc, ok := o.(coordCall); ok {
			calls = append(calls, oc.c)
		}
	}
	which, probe, err := g.c.AdmitAny(ctx, engineAdmission(a), calls)
	return which, probe, downErrorOf(err)
}

// engineAdmission is a as the engine reads it.
func engineAdmission(a admission) coord.Admission {
	return coord.Admission{N: a.n, Left: a.left, Latest: a.latest, NotBefore: a.notBefore, Elsewhere: a.elsewhere}
}
func (g coordCall) begin()                                       { g.c.Begin() }
func (g coordCall) end(ctx context.Context, resp *http.Response) { g.c.End(ctx, resp) }
func (g coordCall) sent()                                        { g.c.Sent() }
func (g coordCall) leave()                                       { g.c.Leave() }

func (g coordCall) report(ctx context.Context, o outcome) verdict {
	v := g.c.Report(ctx, coord.Outcome{
		Health: coord.Health(o.health),
		Resp:   o.resp,
		Err:    o.err,
		Status: o.status,
		Event:  o.event,
		Server: coord.Pause{D: o.server.d, Set: o.server.set},
		Own:    coord.Pause{D: o.own.d, Set: o.own.set},
		Body:   o.body,
	})
	return verdict{held: v.Held, paced: v.Paced}
}

var (
	_ gatekeepers = coordinated{}
	_ gatekeeper  = coordCall{}
)

// downErrorOf returns err, or the *DownError a *coord.Refused in it
// stands for: the engine's refusal, in the user's type. A nil err costs
// nothing (the success path's).
func downErrorOf(err error) error {
	if err == nil {
		return nil
	}
	return refusal(err)
}

// refusal is downErrorOf for an error: its target escapes to the heap,
// which the success path must not pay for.
func refusal(err error) error {
	var r *coord.Refused
	if !errors.As(err, &r) {
		return err
	}
	d := &DownError{Key: r.Key, Reason: HoldReason(r.Reason), Since: r.Since, For: r.For, Until: r.Until, Left: r.Left, Waited: r.Waited}
	if r.Last != "" {
		d.Last = &failedStatus{status: r.Last}
	}
	return d
}

// callPolicy is a call's Policy as the engine asks of it (coord.Policy):
// a pointer conversion, so that passing it allocates nothing.
type callPolicy Policy

// MaxServerWait returns the policy's MaxRetryAfter.
func (p *callPolicy) MaxServerWait() time.Duration { return p.MaxRetryAfter }

// FirstBounds returns the attempts a call may send and the last instant
// its first attempt may go, from its limits (see limitsOf).
func (p *callPolicy) FirstBounds(ctx context.Context, req *http.Request) (int, time.Time) {
	pol := (*Policy)(p)
	lim := limitsOf(ctx, pol, req)
	return pol.retryLimit(lim.hasDeadline()) + 1, lim.latest()
}

// Held passes h to OnHold, if set, as a Hold.
func (p *callPolicy) Held(h coord.Hold) {
	if p.OnHold == nil {
		return
	}
	p.OnHold(Hold{Request: h.Request, N: h.N, Key: h.Key, Reason: HoldReason(h.Reason), Start: h.Start, End: h.End, Outcome: HoldOutcome(h.Outcome)})
}
