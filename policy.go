package llmretry

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"
)

// The defaults applied where a Policy field is zero (each field's doc
// states its own).
const (
	// defaultReserve is the most a zero Reserve keeps: the reserve is then
	// the lesser of it and a fifth of the time the request's deadline
	// leaves when the call starts.
	defaultReserve = 60 * time.Second
	// defaultMaxRetries is the number of retries after the first try when
	// Waits is empty and MaxRetries is zero.
	defaultMaxRetries = 6
	// defaultMaxWait caps each computed exponential wait when MaxWait is
	// zero.
	defaultMaxWait = 60 * time.Second
	// defaultMaxRetryAfter is the longest server-requested wait honoured
	// when MaxRetryAfter is zero.
	defaultMaxRetryAfter = 5 * time.Minute
)

// Policy says when and how often a failed model request is sent again.
//
// The zero Policy is ready to use: up to 6 retries after the first try,
// each after a random wait of up to 1 s, 2 s, 4 s, … capped at 60 s
// (exponential backoff with full jitter); a wait is taken only if, after it,
// a reserve remains before the request's context deadline (60 s under a
// deadline of 5 minutes or more, a fifth of the time left under a shorter
// one: 6 s of a 30-s deadline); server waits (Retry-After, retry-after-ms,
// a wait stated in the reply or in a base's error, a spent rate limit's
// reset) of up to 5
// minutes are honoured; an attempt may wait for its response as
// long as the deadline allows; streamed requests are not retried; when
// retries run out the last result is returned (nobody is asked).
//
// A Policy is a value: the Transport keeps its own copy (including a copy of
// Waits), so changing a Policy after passing it to New or WithPolicy has no
// effect. OnAttempt and OnExhausted are called from the goroutine that
// called RoundTrip (or Do) — for the continuation of a stream
// (ContinueStreams), from the goroutine that reads the body, where a panic
// in one reaches that Read; they must be safe for concurrent use when the
// Transport is shared.
type Policy struct {
	// Waits is an explicit schedule: retry k waits Waits[k-1]. Without a
	// context deadline the list is the bound on retries. With one, a last
	// wait above zero repeats for as long as the deadline and Reserve
	// allow; a last wait of zero does not repeat (the list is the bound,
	// as without a deadline), so a provider that is down is never sent to
	// without a pause until the deadline. Empty means exponential backoff
	// with full jitter (see MaxWait, MaxRetries).
	Waits []time.Duration
	// Reserve is the time that must remain before the request's context
	// deadline after a wait: a wait is taken only if
	// now + wait + Reserve <= deadline, and no read of a reply (a failed
	// one's body, a stream's opening), hold, question or continuation
	// goes past deadline − Reserve (the first attempt, with the one copy
	// of a body without GetBody, is bounded by the context alone, as
	// without llmretry). Zero means the lesser of 60 s and a fifth of
	// the time the deadline leaves when the call starts, so a short
	// deadline (an http.Client's 30-s Timeout) still leaves room to retry. It has no effect on requests without a deadline.
	Reserve time.Duration
	// MaxRetries is the number of retries after the first try (retries, not
	// attempts), in each round of the schedule (see OnExhausted). Zero
	// means 6 when Waits is empty; with Waits, zero means no cap beyond the
	// schedule and a positive value caps the number of retries.
	MaxRetries int
	// MaxWait caps each computed exponential wait (it does not cap Waits or
	// server waits). Zero means 60 s.
	MaxWait time.Duration
	// MaxRetryAfter is the longest server-requested wait honoured. A
	// response asking for longer ends retrying at once and is returned;
	// so does an error stating a longer wait (a method RetryAfter()
	// time.Duration in its chain, from Do's operation or a Transport's
	// base; see Do). Zero means 5 minutes.
	MaxRetryAfter time.Duration
	// AttemptTimeout is the longest one attempt may wait for its response
	// headers, counted from when it is sent (its request body's upload
	// included). An attempt past it is abandoned (its connection closed)
	// and counts as a failed connection: it is retried, and it is evidence
	// that the provider is down. Zero means no bound but the deadline's.
	//
	// A model call that does not stream gets its headers only after the
	// whole answer is generated, which may take minutes: set it above the
	// longest generation you expect, or use streams, whose headers come at
	// once.
	AttemptTimeout time.Duration
	// RetryStreams makes requests detected as streams retryable like any
	// other. By default a streamed request is sent once and its first
	// result returned as it is. See IsStream.
	//
	// A stream is retried only until it is committed: when the Transport
	// hands its response to the caller, nothing of it is ever resent. With
	// RetryStreams, a 2xx text/event-stream response is read ahead, before
	// it is handed over, to the first event that carries content; if that
	// event is an error instead (Anthropic's overloaded_error, api_error
	// and rate_limit_error, OpenAI's error chunks and Responses error
	// events, Gemini's errors) the attempt counts as the status it stands
	// for (529, 500, 429, with any wait it states) and is retried; any
	// other error event stands for a 400, which is not retried. The
	// caller reads exactly the bytes the provider sent, from the first.
	// Bedrock's binary event stream is not read ahead; its framing is
	// followed, so that a cut in it reads as ErrStreamCut (see there).
	RetryStreams bool
	// ContinueStreams continues a stream the caller already reads when it
	// breaks before its end (with RetryStreams, which it needs): a reset
	// or early close, a failed read, a stall past StreamIdleTimeout, an
	// error event after content, or a data line that is not JSON. The
	// breaking event never reaches the caller; the rest of the answer is
	// asked for again and handed on in the same body, spliced so that the
	// caller's SDK accumulates one whole answer (the first message's id,
	// continuous indices, one completion marker): resumed where a
	// Responses stream was created with background: true; else with the
	// text delivered so far as a last assistant turn (a prefill) where the
	// route's API continues one and has not refused one; else sent again
	// as it was and matched against what was delivered (a regeneration
	// that departs from it is never handed on). Each continuation is an
	// attempt of the call (Attempt.Continued says so), under its limits,
	// schedule, timeouts, coordination and routes, and is billed on top
	// of the cut attempt: a resume bills nothing more; a prefill bills the
	// prompt and the delivered text as input and only the rest as output;
	// a regeneration bills the prompt and the whole answer again (the
	// part the caller has is generated and dropped). A stream is never
	// continued inside or after a tool call, in a thinking block, with
	// several choices, or as Bedrock's event stream: its read then fails
	// with ErrStreamCut. Opt-in: it changes what is sent. See
	// docs/streams.md.
	ContinueStreams bool
	// ContinueBy says how a stream cut on a host is continued, where what
	// the host's API allows is not known (a proxy, a self-hosted server):
	// "prefill" (it continues a final assistant message), "prefix" (it
	// does when that message says "prefix": true, as DeepSeek's and
	// Mistral's do) or "regenerate" (it does not: the request is sent
	// again as it was and matched). Keys are hosts as in the URL, in
	// lower case. A host not listed is continued as its API is known to
	// allow, and by prefill where nothing is known, with a reply that
	// starts over recognised as a regeneration. Nil means none.
	ContinueBy map[string]string
	// FirstEventTimeout bounds the wait for a stream's first event that
	// carries content, counted from its response headers, when the policy
	// retries streams: an attempt past it is abandoned and retried. Zero
	// means no bound but the deadline's.
	FirstEventTimeout time.Duration
	// StreamIdleTimeout makes a stream the caller reads (a 2xx
	// text/event-stream or AWS event-stream response) end with an error
	// from Body.Read, never a clean end, when a read waits longer than
	// this for a byte: a stall is never taken for a truncated answer. The
	// caller's own pauses between reads do not count (a slow consumer is
	// not a silent provider). It is not retried as a whole: bytes of it
	// have reached the caller (ContinueStreams continues it). Zero means
	// no bound.
	StreamIdleTimeout time.Duration
	// Fallback lists the routes a call goes around to, in order, when its
	// primary (the request as the caller made it) cannot answer in time:
	// the same API elsewhere (another region, deployment or account; see
	// RouteTo), or another model. A call moves its next attempt to the
	// next route that applies to the request, at once, when an attempt
	// fails in a way that says waiting on its provider cannot win: a wait
	// the call cannot afford or above MaxRetryAfter, its retries spent, a
	// provider that says waiting will not help (x-should-retry: false, a
	// spent quota or spend cap), an attempt or first-event timeout, a key
	// coordination already knows is down (see package coordination), or a
	// second failure in a row that says the provider is down (a retryable
	// 5xx or 529, a failed connection, an error as a stream's first
	// event): one such failure alone is a blip, retried on the primary
	// after its wait (with FallbackAfter, see there). A 401 or 403 that
	// refuses the primary's credential (invalid, revoked, lacking
	// permission) moves the call to the next route whose Route sets a
	// credential of its own, and the primary is not sent it again. It
	// never moves for the request's own fault, another status that says
	// the request is wrong (400, 404, 422 …), or a stream already handed
	// to the caller; a stream moves only with RetryStreams. A route that
	// fails as if down is passed for the next; after the last, the call
	// waits as it waits on its primary and tries again from the primary.
	// Every route keeps the call's deadline, reserve and retry count; a
	// move is a retry without a wait, and a route the call has not tried
	// yet is tried even when the schedule's retries are spent. A route
	// that does not apply to the request (a RouteTo route for another
	// base) is no move: the call waits as if it were not there.
	// Attempt.Route, Attempt.Moved, LogAttempts and Exhausted.Routes say
	// which route each attempt took and why the call moved. A fallback
	// bills its own account and model. Nil means none: every attempt goes
	// to the primary.
	Fallback []Route
	// FallbackAfter is how long a call stays on its primary first: before
	// it has passed (counted from the call's start), a failure of the
	// primary is retried on the primary by the schedule, unless no retry
	// could follow there (its retries spent, or a wait the call cannot
	// afford); once it has passed, any retryable failure moves the call.
	// Zero means a blip stays home: one failure that says the provider is
	// down is retried on the primary after its wait, and the call moves at
	// the second, or at once when waiting cannot win (see Fallback).
	FallbackAfter time.Duration
	// LongContext lists the routes a call moves to, in order, when its
	// provider refuses the request as longer than the model's context
	// window: a model with a larger window (OpenAI's and Azure's
	// context_length_exceeded, Anthropic's "prompt is too long", Gemini's
	// and Vertex's input token count, Bedrock's "Input is too long",
	// OpenRouter's and others' "maximum context length"). The move is at
	// once, and the request is never sent as it is to the primary or a
	// Fallback route again: the rest of the call stays on these routes
	// (one that is down is retried by the schedule, or passed for the
	// next). Any other 400 never moves. Routes are numbered after
	// Fallback's: route len(Fallback)+k is LongContext[k-1]. Nil means
	// none: such a refusal is returned at once.
	LongContext []Route
	// OnAttempt, if set, is called once per attempt, after the attempt ends
	// and before any wait. It must not read or close Attempt.Response.Body.
	OnAttempt func(Attempt)
	// OnExhausted, if set, is asked once the schedule's retries are spent
	// (ErrRetriesSpent, not another reason) whether to run another round
	// of the schedule: true runs it (an attempt at once, or when a wait
	// the last answer asked for ends; then the schedule's retries), false
	// returns the last result. A wait above MaxRetryAfter is not a
	// question: it ends the call with ErrWaitTooLong. It is called once
	// per round with the call's record so far (its Response body belongs
	// to the caller: do not read or close it), from the goroutine that
	// made the call (a continuation's: the one reading the body), and
	// must return promptly once ctx is done (a done context counts as
	// false). ctx ends with the call's context or once the call's
	// deadline less its Reserve has passed, whichever comes first: a yes
	// after that could send nothing. A Person's Ask method is one that puts the
	// question to a person. Nil means fail: the last result is returned.
	OnExhausted func(ctx context.Context, e *Exhausted) bool
}

// Validate reports whether p can be used, naming every field that cannot
// (one error per field, joined). It refuses negative durations and counts,
// a negative wait in Waits and a nil Route in Fallback or LongContext.
func (p Policy) Validate() error {
	var errs []error
	for i, w := range p.Waits {
		if w < 0 {
			errs = append(errs, fmt.Errorf("llmretry: Policy.Waits[%d] is negative (%v)", i, w))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"Reserve", p.Reserve}, {"MaxWait", p.MaxWait}, {"MaxRetryAfter", p.MaxRetryAfter},
		{"AttemptTimeout", p.AttemptTimeout}, {"FirstEventTimeout", p.FirstEventTimeout}, {"StreamIdleTimeout", p.StreamIdleTimeout},
		{"FallbackAfter", p.FallbackAfter},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("llmretry: Policy.%s is negative (%v)", d.name, d.v))
		}
	}
	for i, r := range p.Fallback {
		if r == nil {
			errs = append(errs, fmt.Errorf("llmretry: Policy.Fallback[%d] is nil", i))
		}
	}
	for i, r := range p.LongContext {
		if r == nil {
			errs = append(errs, fmt.Errorf("llmretry: Policy.LongContext[%d] is nil", i))
		}
	}
	for host, by := range p.ContinueBy {
		if by != "prefill" && by != "prefix" && by != "regenerate" {
			errs = append(errs, fmt.Errorf("llmretry: Policy.ContinueBy[%q] is %q, not prefill, prefix or regenerate", host, by))
		}
	}
	if p.ContinueStreams && !p.RetryStreams {
		errs = append(errs, errors.New("llmretry: Policy.ContinueStreams needs RetryStreams"))
	}
	if p.MaxRetries < 0 {
		errs = append(errs, fmt.Errorf("llmretry: Policy.MaxRetries is negative (%d)", p.MaxRetries))
	}
	return errors.Join(errs...)
}

// resolved returns a copy of p with its defaults filled in and Waits
// copied, so that the caller's slice can change without affecting us. A
// zero Reserve stays zero: it depends on each call's deadline (reserveFor).
func (p Policy) resolved() Policy {
	if p.MaxRetries == 0 && len(p.Waits) == 0 {
		p.MaxRetries = defaultMaxRetries
	}
	if p.MaxWait == 0 {
		p.MaxWait = defaultMaxWait
	}
	if p.MaxRetryAfter == 0 {
		p.MaxRetryAfter = defaultMaxRetryAfter
	}
	if p.Waits != nil {
		p.Waits = append([]time.Duration(nil), p.Waits...)
	}
	if p.Fallback != nil {
		p.Fallback = append([]Route(nil), p.Fallback...)
	}
	if p.LongContext != nil {
		p.LongContext = append([]Route(nil), p.LongContext...)
	}
	if p.ContinueBy != nil {
		p.ContinueBy = maps.Clone(p.ContinueBy)
	}
	return p
}
