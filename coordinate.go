package llmretry

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"
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
// api-key and x-goog-api-key headers and its key= query value. Calls with
// different API keys to one host are coordinated separately, so that one
// key's rate limit does not hold back another's. Only the hash is kept
// (hash/maphash, seeded per Transport); the key's name in records and
// errors is the host and 8 hex digits of it, never the credential.
//
// For each key:
//
//   - An attempt that fails in a way that says the provider is down (a
//     retryable 5xx such as 502, 503 or Anthropic's 529, or a failed
//     connection) marks the key down. While it is down, retries and new
//     calls for that key are held instead of sent, and one held call at a
//     time goes out as the probe, at most ProbeInterval after the previous
//     probe (a random 0–20 % sooner). Any response that is not a down
//     failure (the probe's or a call already in flight) brings the key
//     back up.
//   - A server wait (Retry-After, retry-after-ms, Gemini's RetryInfo) on a
//     429 or 503 holds every call for the key until that instant, if the
//     call that received it honours it (Policy.MaxRetryAfter).
//   - When the key comes back (or the server's wait is over), the held
//     calls are released at random times within ReleaseSpread; a failure
//     during the spread marks the key down again and holds the rest.
//   - A call keeps its own Policy: its retry count, MaxRetryAfter, deadline
//     and reserve. While held it does not sleep its own waits; a call that
//     can wait no longer (a wait past its deadline minus its reserve, or a
//     server wait above its MaxRetryAfter) ends, without sending, with an
//     *Exhausted error wrapping a *DownError that says since when and why
//     the key was held and what its last failure was. A call without a
//     deadline is held for as long as its key stays down (only its own
//     probes spend its retries): give calls a deadline.
//   - Retries on a call's own schedule, while the key is up (a 429 without
//     a server wait, a 408), are held while the key's retries in flight
//     reach max(MinRetries, RetryBudget × its calls in flight). Probes and
//     released calls are not counted against it: one probe at a time
//     already limits them.
//
// Policy.OnHold records every hold, its reason and how it ended, and
// Attempt.Probe marks the probes.
//
// The zero Coordination uses the defaults above. A Coordination is a value:
// NewCoordinated keeps its own copy. The shared state lives in the
// Transport, is safe for concurrent use, and forgets a key once no call is
// using it and it is neither down nor under a server wait.
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
func NewCoordinated(base http.RoundTripper, p Policy, c Coordination) (*Transport, error) {
	if err := errors.Join(p.Validate(), c.Validate()); err != nil {
		return nil, err
	}
	t, err := New(base, p)
	if err != nil {
		return nil, err
	}
	t.coord = newCoordinator(c.resolved())
	return t, nil
}

// roundTripCoordinated is RoundTrip for a coordinated Transport: the first
// attempt, too, passes the key's gate.
func (t *Transport) roundTripCoordinated(c *call) (*http.Response, error) {
	c.co = t.coord
	out := c.first
	c.key = t.coord.enter(c.req)
	defer t.coord.leave(c)
	probe, err := t.coord.admit(out.Context(), c, false)
	if err != nil {
		closeBody(out)
		return nil, &Exhausted{Request: c.req, Err: err}
	}
	c.probe, c.wasProbe = probe, probe
	resp, err := normalize(c.base.RoundTrip(out))
	if err == nil && resp.StatusCode < 400 {
		c.n = 1
		c.resp = resp
		t.coord.report(c, evUp, stopFinal, 0, false, time.Now())
		if c.p.OnAttempt != nil {
			c.p.OnAttempt(Attempt{ID: newID(), N: 1, Request: out, Response: resp, Probe: probe})
		}
		return resp, nil
	}
	return c.run(resp, err)
}
