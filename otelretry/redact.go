package otelretry

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// redactURL renders u as scheme://host/path: no user information, query
// or fragment, which is where credentials travel in URLs (Gemini's key=).
// It is the form llmretry's own records use, without their "?…" marker,
// so that url.full stays a URL.
func redactURL(u *url.URL) string {
	if u == nil {
		return ""
	}
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	return r.String()
}

// credentialHeaders are the request headers whose values are credentials:
// model providers' API keys, and the usual HTTP ones.
var credentialHeaders = [...]string{"Authorization", "Proxy-Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key", "Cookie"}

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

// redactText blanks in s the credentials of req that a text may quote:
// its query (whole), its user information, its credential headers'
// values, and the value of any credential-like name=value.
func redactText(s string, req *http.Request) string {
	if req != nil && req.URL != nil {
		if q := req.URL.RawQuery; q != "" {
			s = strings.ReplaceAll(s, q, "…")
		}
		if u := req.URL.User; u != nil {
			s = blank(s, u.String())
			s = blank(s, u.Username())
			if p, ok := u.Password(); ok {
				s = blank(s, p)
			}
		}
	}
	if req != nil {
		for _, name := range credentialHeaders {
			for _, v := range req.Header.Values(name) {
				s = blank(s, v)
				// "Bearer sk-…": the token alone may be quoted too.
				if _, tok, ok := strings.Cut(v, " "); ok {
					s = blank(s, strings.TrimSpace(tok))
				}
			}
		}
	}
	return redactParams(s)
}

// blank replaces every occurrence of secret in s with "…". Empty and
// one-character secrets are left alone: blanking them would garble the
// text and hide nothing.
func blank(s, secret string) string {
	if len(secret) < 2 {
		return s
	}
	return strings.ReplaceAll(s, secret, "…")
}

// redactParams blanks the value of every name=value in s whose name is
// one that carries credentials in URLs. It is llmretry's rule for its own
// records, which this package cannot call.
func redactParams(s string) string {
	var b strings.Builder
	copied := 0
	for j := 0; j < len(s); j++ {
		if s[j] != '=' {
			continue
		}
		k := j
		for k > 0 && isParamNameByte(s[k-1]) {
			k--
		}
		if !isCredentialParam(s[k:j]) {
			continue
		}
		end := j + 1
		for end < len(s) && !isParamValueEnd(s[end]) {
			end++
		}
		if end == j+1 {
			continue
		}
		b.WriteString(s[copied : j+1])
		b.WriteString("…")
		copied = end
		j = end - 1
	}
	if copied == 0 {
		return s
	}
	b.WriteString(s[copied:])
	return b.String()
}

// isCredentialParam reports whether a query parameter named name carries
// a credential.
func isCredentialParam(name string) bool {
	switch strings.ToLower(name) {
	case "key", "api_key", "apikey", "api-key", "access_token", "token", "sig", "signature", "password", "secret", "client_secret":
		return true
	}
	return false
}

// isParamNameByte reports whether c may be part of a query parameter name.
func isParamNameByte(c byte) bool {
	return c == '_' || c == '-' || c == '.' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// isParamValueEnd reports whether c ends a query value inside a text.
func isParamValueEnd(c byte) bool {
	switch c {
	case '&', ';', ' ', '\t', '\n', '\r', '"', '\'', '`', '#', ')', ']', '}', ',', '<', '>':
		return true
	}
	return false
}
