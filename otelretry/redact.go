package otelretry

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/internal/credential"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// redacted is what replaces a credential in url.full, as the HTTP
// conventions spell it.
const redacted = "REDACTED"

// redactURL renders u for url.full as the HTTP conventions ask: user
// information becomes REDACTED:REDACTED, and the value of every query
// parameter whose name says it carries a credential (credential.IsParam,
// the rule llmretry's own texts blank by) becomes REDACTED, its name and
// every other parameter kept in place. The fragment is dropped: it is
// never sent, and OAuth's implicit flow puts tokens there. ok is false
// when u needs none of this, so that otelhttp's own value (which drops
// user information itself) can stand unrewritten.
func redactURL(u *url.URL) (s string, ok bool) {
	if u == nil || u.User == nil && u.Fragment == "" && !credential.HasParam(u.RawQuery) {
		return "", false
	}
	r := *u
	r.Fragment, r.RawFragment = "", ""
	if r.User != nil {
		r.User = url.UserPassword(redacted, redacted)
	}
	r.RawQuery = credential.MaskQuery(r.RawQuery, redacted)
	return r.String(), true
}

// redactedError is an error whose text quoted one of the request's
// credentials, with those credentials blanked. It is what llmretry and
// otelhttp see, so the span's status and llmretry's records carry the
// redacted text. errors.Is and errors.As see the original through Unwrap,
// and Timeout is passed on.
type redactedError struct {
	err  error
	text string
}

func (e *redactedError) Error() string { return e.text }
func (e *redactedError) Unwrap() error { return e.err }

// Timeout reports whether the original error is a timeout, for callers
// that ask the error directly rather than through errors.As.
func (e *redactedError) Timeout() bool {
	var t interface{ Timeout() bool }
	return errors.As(e.err, &t) && t.Timeout()
}

// typedRedactedError is a redactedError returned as the base's error
// itself. Its ErrorType keeps the span's error.type the original's
// (otelhttp's metrics, which read the type itself, name this one). Inside
// a *url.Error the plain redactedError is used, so that error.type stays
// *url.Error.
type typedRedactedError struct{ redactedError }

// ErrorType is the error.type of the original error.
func (e *typedRedactedError) ErrorType() string { return semconv.ErrorType(e.err).Value.AsString() }

// redactError returns err if its text quotes no credential of req, and
// otherwise err with those credentials blanked. A *url.Error stays one
// (its URL redacted, its Err redacted in turn), so that its type, and the
// error.type otelhttp reads off it, do not change; any other error is
// wrapped in a typedRedactedError.
func redactError(err error, req *http.Request) error {
	s := err.Error()
	r := redactText(s, req)
	if r == s {
		return err
	}
	if ue, ok := err.(*url.Error); ok && ue.Err != nil {
		c := *ue
		c.URL = redactText(ue.URL, req)
		if t := ue.Err.Error(); redactText(t, req) != t {
			c.Err = &redactedError{err: ue.Err, text: redactText(t, req)}
		}
		return &c
	}
	return &typedRedactedError{redactedError{err: err, text: r}}
}

// redactText blanks in s the credentials of req that a text may quote
// (llmretry.Redact).
func redactText(s string, req *http.Request) string { return llmretry.Redact(s, req) }
