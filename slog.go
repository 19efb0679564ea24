package llmretry

import (
	"context"
	"log/slog"
	"net/http"
)

// LogAttempts returns a Policy.OnAttempt that writes the record to l as a
// log: one line per attempt, with the message "llmretry attempt" and the
// fields
//
//	method, url   the request (absent for Do)
//	attempt_id    the attempt's own ID
//	attempt       its number: 1 for the first try, counting across rounds
//	status        the response's status code, or
//	error         the attempt's error
//	retry_in      the wait before the next attempt, when one follows
//	              after a wait above zero
//	route         the route the attempt took (see Policy.Fallback), when
//	              it is a fallback (1 and above); absent for the primary
//	probe         true, when the attempt was its provider key's probe
//	held          true, when the next attempt is held until the provider
//	              is back (see Coordination)
//	stop          why no retry follows this attempt (the words of
//	              Attempt.Stop: "retries spent", "no time left …"), when
//	              none does; absent on a success
//
// A successful attempt is logged at slog.LevelInfo, a failed one (an error
// or a status of 400 or above) at slog.LevelWarn; nothing is built when the
// level is disabled. The request's context is passed to the handler.
//
// No credential is written: the url has no query or user information
// (Gemini's key= travels in the query), no header is logged
// (Authorization, x-api-key, api-key, x-goog-api-key, cookies), and the
// error text has the request's query and credential-like query values
// (key=, api_key=, token=, sig=, …) blanked.
//
// A nil l means slog.Default(), looked up at each attempt. The returned
// function is safe for concurrent use if l's handler is (slog's are); it
// keeps l and nothing else.
func LogAttempts(l *slog.Logger) func(Attempt) {
	return func(a Attempt) {
		level := slog.LevelInfo
		if a.Err != nil || (a.Response != nil && a.Response.StatusCode >= 400) {
			level = slog.LevelWarn
		}
		logger, ctx, ok := enabled(l, a.Request, level)
		if !ok {
			return
		}
		attrs := make([]slog.Attr, 0, 11)
		if a.Request != nil {
			attrs = append(attrs, slog.String("method", a.Request.Method), slog.String("url", redactURL(a.Request.URL)))
		}
		attrs = append(attrs, slog.String("attempt_id", a.ID), slog.Int("attempt", a.N))
		switch {
		case a.Err != nil:
			attrs = append(attrs, slog.String("error", redactErr(a.Err, a.Request)))
		case a.Response != nil:
			attrs = append(attrs, slog.Int("status", a.Response.StatusCode))
		}
		if a.RetryIn > 0 {
			attrs = append(attrs, slog.Duration("retry_in", a.RetryIn))
		}
		if a.Route > 0 {
			attrs = append(attrs, slog.Int("route", a.Route))
		}
		if a.Probe {
			attrs = append(attrs, slog.Bool("probe", true))
		}
		if a.Held {
			attrs = append(attrs, slog.Bool("held", true))
		}
		if a.Stop != nil {
			attrs = append(attrs, slog.String("stop", reasonText(a.Stop)))
		}
		logger.LogAttrs(ctx, level, "llmretry attempt", attrs...)
	}
}

// LogHolds returns a Policy.OnHold that writes coordinated holds (see
// Coordination) to l: one line when a hold begins and one when it ends,
// with the message "llmretry hold" and the fields
//
//	method, url   the request (no query, no user information)
//	key           the provider key: host and credential hash
//	reason        why the call is held (provider down, server wait, …)
//	outcome       waiting, or how the hold ended (sent as the probe,
//	              released, gave up, canceled)
//	held          how long the call was held, once the hold has ended
//
// A hold that gave up is logged at slog.LevelWarn, every other record at
// slog.LevelInfo. A nil l means slog.Default(), looked up at each record.
// The returned function is safe for concurrent use if l's handler is.
func LogHolds(l *slog.Logger) func(Hold) {
	return func(h Hold) {
		level := slog.LevelInfo
		if h.Outcome == HoldGaveUp {
			level = slog.LevelWarn
		}
		logger, ctx, ok := enabled(l, h.Request, level)
		if !ok {
			return
		}
		attrs := make([]slog.Attr, 0, 6)
		if h.Request != nil {
			attrs = append(attrs, slog.String("method", h.Request.Method), slog.String("url", redactURL(h.Request.URL)))
		}
		attrs = append(attrs, slog.String("key", h.Key), slog.String("reason", h.Reason.String()), slog.String("outcome", h.Outcome.String()))
		if !h.End.IsZero() {
			attrs = append(attrs, slog.Duration("held", h.End.Sub(h.Start)))
		}
		logger.LogAttrs(ctx, level, "llmretry hold", attrs...)
	}
}

// enabled returns the logger to write to (l, or slog.Default() if nil) and
// the context to pass it (req's, if any), and whether it logs at level.
func enabled(l *slog.Logger, req *http.Request, level slog.Level) (*slog.Logger, context.Context, bool) {
	if l == nil {
		l = slog.Default()
	}
	ctx := context.Background()
	if req != nil {
		ctx = req.Context()
	}
	return l, ctx, l.Enabled(ctx, level)
}
