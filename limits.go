package llmretry

import (
	"context"
	"net/http"
	"time"

	"github.com/llmretry/llmretry/internal/credential"
)

// sigV4Lifetime is how long AWS accepts a Signature Version 4 signature
// after the time it was made for (X-Amz-Date): requests older than that
// are refused with 403 InvalidSignatureException.
const sigV4Lifetime = 5 * time.Minute

// limits are the instants after which a call sends nothing more: its
// deadline less its reserve (the host keeps the reserve to act on a
// failure), and, for a request signed with AWS Signature Version 4, the
// signature's expiry (a resent request carries the first attempt's
// signature). Every wait, every hold and every read of a failed reply's
// body is bounded by them. The zero value has none.
type limits struct {
	giveUp time.Time // deadline − reserve; zero without a deadline
	signed time.Time // the signature's expiry; zero if not SigV4-signed
}

// limitsOf returns the limits of a call starting now with context ctx,
// policy p (resolved) and request req (nil for Do's calls, which sign
// nothing).
func limitsOf(ctx context.Context, p *Policy, req *http.Request) limits {
	return limitsFrom(ctx, p, req, time.Time{})
}

// limitsFrom returns the limits of a call that started at start (zero:
// now), whose default reserve is a share of the time its deadline left
// then.
func limitsFrom(ctx context.Context, p *Policy, req *http.Request, start time.Time) limits {
	var l limits
	if deadline, ok := ctx.Deadline(); ok {
		if start.IsZero() {
			start = time.Now()
		}
		l.giveUp = deadline.Add(-p.reserveFor(deadline.Sub(start)))
	}
	if req == nil {
		return l
	}
	if at, ok := credential.SignedAt(req.Header); ok {
		l.signed = at.Add(sigV4Lifetime)
	}
	return l
}

// hasDeadline reports whether the call has a deadline.
func (l limits) hasDeadline() bool { return !l.giveUp.IsZero() }

// allows says whether an attempt may be sent at t: stopNone if it may, or
// which limit it would pass.
func (l limits) allows(t time.Time) stop {
	switch {
	case !l.giveUp.IsZero() && t.After(l.giveUp):
		return stopDeadline
	case !l.signed.IsZero() && t.After(l.signed):
		return stopSigned
	}
	return stopNone
}

// latest returns the last instant at which an attempt may be sent, or the
// zero time when nothing bounds it.
func (l limits) latest() time.Time {
	switch {
	case l.giveUp.IsZero():
		return l.signed
	case l.signed.IsZero() || l.giveUp.Before(l.signed):
		return l.giveUp
	}
	return l.signed
}

// before returns the instant d before the latest one (the time a read may
// take so that an attempt after a wait of d still fits), or the zero time
// when nothing bounds it.
func (l limits) before(d time.Duration) time.Time {
	t := l.latest()
	if t.IsZero() {
		return t
	}
	return t.Add(-d)
}

// reserveFor returns the reserve of a call whose deadline leaves left when
// it starts: the policy's Reserve, or, when that is zero, the lesser of
// defaultReserve and a fifth of left.
func (p *Policy) reserveFor(left time.Duration) time.Duration {
	if p.Reserve != 0 {
		return p.Reserve
	}
	return max(0, min(defaultReserve, left/5))
}
