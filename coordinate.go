package llmretry

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"time"

	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/internal/coord"
)

// This file is NewCoordinated and the seam between the core and the
// coordination engine (internal/coord), whose types the core uses as they
// are: each call's coord.Gatekeeper, from its Transport's
// coord.Gatekeepers (the engine's Coordinator for NewCoordinated's; a call
// of New's has the no-op open, call.go), asked with a coord.Admission,
// told a coord.Outcome, answering a coord.Verdict. What the engine asks of a call's Policy is
// callPolicy, below.

// NewCoordinated returns a Transport like New's whose calls are coordinated
// per provider key as c says (see package coordination). An invalid policy
// or configuration is an error and no Transport is made.
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
func NewCoordinated(base http.RoundTripper, p Policy, c coordination.Config) (*Transport, error) {
	if err := errors.Join(p.Validate(), c.Validate()); err != nil {
		return nil, err
	}
	co, stop := coord.New(c, coord.Core{MaxRetryAfter: defaultMaxRetryAfter, IsStream: isEventStream})
	t, err := gated(base, p, co)
	if err != nil {
		stop()
		return nil, err
	}
	runtime.AddCleanup(t, func(stop func()) { stop() }, stop)
	return t, nil
}

// gated returns New's Transport over base and p whose calls join keepers
// instead of being open.
func gated(base http.RoundTripper, p Policy, keepers coord.Gatekeepers) (*Transport, error) {
	t, err := New(base, p)
	if err != nil {
		return nil, err
	}
	t.keepers = keepers
	return t, nil
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

var _ coord.Policy = (*callPolicy)(nil)
