// Package wire is llmretry's vocabulary of the model providers' wire: what
// their requests, replies and streams say, read in one place.
//
// It owns:
//
//   - the one JSON lexer every JSON reader here is built on (json.go), and
//     its readers: a request body's top-level "stream": true (request.go),
//     an event's top-level members (top.go), and the retry signal of an
//     error body, whole or cut (errorbody.go);
//   - the one server-sent-events framer (sse.go), incremental and bounded,
//     that reads a stream's opening before it is committed (firstevent.go)
//     and the error event of an error reply (signal.go);
//   - each API's event shapes, named in one table (apis.go: Chat
//     Completions, Responses, Anthropic Messages, Gemini, Bedrock's event
//     stream), and the error words of each provider (words.go);
//   - a checked walk of one JSON value on the lexer (walk.go), each API's
//     events read with it (events.go), and the writer of what a splice
//     changes (edit.go);
//   - the continuation of a stream cut mid-answer: Stream follows a
//     committed stream as the caller's SDK accumulates it (stream.go),
//     PrefillBody builds a prefill (prefill.go), a Splicer turns a
//     continuation's events into the rest of the original (splice.go);
//   - provider signals (signal.go: x-should-retry, spent quotas and spend
//     caps, Gemini's per-day and zero quotas and RetryInfo), waits in words
//     (wait.go), Retry-After in its forms (retryafter.go), the protobuf
//     duration (duration.go), and the published rate-limit headers
//     (ratelimit.go) that both a 429's wait and the coordination engine's
//     pace read.
//
// It imports the standard library only and keeps no state between calls:
// its functions are safe for concurrent use, each reader (Lexer,
// StreamBody, Framer, Stream, Splicer) is a value its one user owns, and
// its tables (RateLimits, the shapes behind Shapes) are read, never
// written. It never
// panics on any input: its parsers are fuzzed (go test -fuzz). Nothing
// here decides what to do: the root package and internal/coord do, from
// what it reads.
package wire
