package coordination

import (
	"context"
	"log/slog"

	"github.com/llmretry/llmretry/internal/credential"
)

// LogHolds returns a Config.OnHold that writes coordinated holds to l: one
// line when a hold begins and one when it ends, with the message
// "llmretry hold" and the fields
//
//	method, url   the request (no query, no user information)
//	key           the provider key: host and credential hash
//	reason        why the call is held (provider down, server wait, …)
//	outcome       waiting, or how the hold ended (sent as the probe,
//	              released, gave up, canceled)
//	held          how long the call was held, once the hold has ended
//
// A hold that gave up is logged at slog.LevelWarn, every other record at
// slog.LevelInfo; nothing is built when the level is disabled. The
// request's context is passed to the handler. A nil l means slog.Default(),
// looked up at each record. The returned function is safe for concurrent
// use if l's handler is (slog's are); it keeps l and nothing else.
func LogHolds(l *slog.Logger) func(Hold) {
	return func(h Hold) { logHold(l, h) }
}

// logHold writes h to l, or to slog.Default() if l is nil.
func logHold(l *slog.Logger, h Hold) {
	if l == nil {
		l = slog.Default()
	}
	ctx, level := context.Background(), slog.LevelInfo
	if h.Request != nil {
		ctx = h.Request.Context()
	}
	if h.Outcome == HoldGaveUp {
		level = slog.LevelWarn
	}
	if !l.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 6)
	if h.Request != nil {
		attrs = append(attrs, slog.String("method", h.Request.Method), slog.String("url", credential.RedactURL(h.Request.URL)))
	}
	attrs = append(attrs, slog.String("key", h.Key), slog.String("reason", h.Reason.String()), slog.String("outcome", h.Outcome.String()))
	if !h.End.IsZero() {
		attrs = append(attrs, slog.Duration("held", h.End.Sub(h.Start)))
	}
	l.LogAttrs(ctx, level, "llmretry hold", attrs...)
}
