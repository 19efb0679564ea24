// Package coordination is what a user of llmretry types to have the calls
// of one Transport (or of a fleet) to one provider key share what they
// learn: its Config for llmretry.NewCoordinated, the Hold records a
// Config.OnHold receives (LogHolds writes them to log/slog), the HeldError
// a call ends with when it cannot wait, and NewMemoryStore, the in-process
// store.Store. The engine behind it is internal to the module.
//
//	rt, err := llmretry.NewCoordinated(nil, policy, coordination.Config{})
//
// With coordination an outage costs the provider one probe at a time
// instead of every call's retries, and every call goes again as soon as the
// provider is back instead of sleeping out its own wait.
//
// # Provider keys
//
// A provider key is the request URL's host (with its port, if any) and the
// credential the request carries: a hash of its Authorization, x-api-key,
// api-key and x-goog-api-key headers and its key= query value (an AWS
// Signature Version 4 Authorization counts by its access key ID, not its
// per-request signature), in any spelling: a header name in any case, as a
// header map set directly may hold it (looked for when no such header is
// spelt canonically, as an SDK's are), and key= in any case or escaped,
// after a '&' or a ';'. Calls with different API keys to one host are
// coordinated separately, so that one key's rate limit does not hold back
// another's. Only hashes are kept: the key's name in records, errors and
// the Store is whatever the Store makes of host and credential (the
// in-process store: the host and 8 hex digits of a hash seeded per store,
// so that every Transport sharing a store names a key alike), never the
// credential.
//
// Each route of a call with llmretry's Policy.Fallback is a key of its
// own, even on the primary's host with its credential (a fallback to
// another model): its name is the Store's with "~route" and the route's
// number after it. While a call has another route to take, a key that is
// down does not hold it: it goes around at once (no attempt spent), unless
// the key's probe is due and no held call is to send it, when it goes as
// the probe; so the fleet's primary sees one probe per ProbeInterval, and
// new calls return to it once one answers. A call held on every route
// waits on all of their keys at once, and goes on whichever lets it go
// first. See docs/coordination.md.
//
// # What the calls share
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
//     A pace whose next turn is further off than the call's MaxRetryAfter
//     paces nothing for it (a long window refilled continuously still
//     paces a turn every window/limit).
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
//     *llmretry.Exhausted error wrapping a *HeldError that says since when
//     and why the key was held and what its last failure was. A call
//     without a deadline is held for as long as its key stays down (only
//     its own probes spend its retries): give calls a deadline.
//   - Retries on a call's own schedule, while the key is up (a 408, a 429
//     without a server wait or other calls in flight), are held while the
//     key's retries in flight reach max(MinRetries, RetryBudget × its calls
//     in flight). Probes and released calls are not counted against it:
//     one probe at a time already limits them.
//
// Config.OnHold records every hold, its reason and how it ended, and
// llmretry's Attempt.Probe marks the probes. OnHold, and the Policy's
// OnAttempt and OnExhausted, run on the call's goroutine with no lock
// held, once the shared state is consistent: a panic in one reaches the
// call's caller and leaves no lease held and no budget spent. (A stream's
// continuation runs on the goroutine that reads its body: a panic there
// reaches that Read.)
//
// The facts live in the Store (the in-process one unless Config.Store is
// set); what waits on them (held calls, their timers) stays in the
// process. A call to a key with no live fact takes no lock and makes no
// store call.
//
// Only the outermost llmretry Transport coordinates: a coordinated
// Transport nested under another one passes requests through.
package coordination
