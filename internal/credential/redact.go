package credential

import (
	"net/http"
	"net/url"
	"strings"
)

// Redact returns text with every credential of req that it may quote
// blanked ("…"): req's query (whole), its URL user information, the values
// of its credential headers (Headers; the token of "Bearer …" alone too),
// and, whatever req, the value of any name=value whose name is a
// credential parameter's (IsParam). req may be nil.
func Redact(text string, req *http.Request) string {
	if req != nil && req.URL != nil {
		if q := req.URL.RawQuery; q != "" {
			text = strings.ReplaceAll(text, q, "…")
		}
		if u := req.URL.User; u != nil {
			text = blank(text, u.String())
			text = blank(text, u.Username())
			if p, ok := u.Password(); ok {
				text = blank(text, p)
			}
		}
	}
	if req != nil {
		for name, vs := range req.Header {
			if !isHeader(name) {
				continue
			}
			for _, v := range vs {
				text = blank(text, v)
				if _, tok, ok := strings.Cut(v, " "); ok {
					text = blank(text, strings.TrimSpace(tok))
				}
			}
		}
	}
	return RedactParams(text)
}

// isHeader reports whether name is a credential header's (Headers), in
// any spelling: a header map set directly may hold a name that is not
// canonical.
func isHeader(name string) bool {
	for _, h := range Headers {
		if strings.EqualFold(name, h.Name) {
			return true
		}
	}
	return false
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

// RedactParams blanks the value of every name=value in s whose name is a
// credential parameter's (IsParam): a name is the run of [A-Za-z0-9_.-]
// before the "=", a value runs to the first byte that ends a query value
// in a text (&, ;, space, a quote, a bracket, …).
func RedactParams(s string) string {
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
		if !IsParam(s[k:j]) {
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

// isParamNameByte reports whether c may be part of a query parameter name.
func isParamNameByte(c byte) bool {
	return c == '_' || c == '-' || c == '.' || isAlnum(c)
}

// isParamValueEnd reports whether c ends a query value inside a text.
func isParamValueEnd(c byte) bool {
	switch c {
	case '&', ';', ' ', '\t', '\n', '\r', '"', '\'', '`', '#', ')', ']', '}', ',', '<', '>':
		return true
	}
	return false
}

// RedactURL renders u as scheme://host/path, for a log line: no user
// information, query or fragment, which is where credentials travel in
// URLs (Gemini's key=); "?…" marks a query left out.
func RedactURL(u *url.URL) string {
	if u == nil {
		return "<nil URL>"
	}
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	s := r.String()
	if u.RawQuery != "" {
		s += "?…"
	}
	return s
}

// HasParam reports whether the raw query q has a credential parameter
// (IsParam, its name unescaped) with a value; its parameters are split as
// CutParam splits them. It allocates nothing for a name without escapes.
func HasParam(q string) bool {
	for q != "" {
		var part string
		part, q = CutParam(q)
		if name, v, ok := strings.Cut(part, "="); ok && v != "" && IsParam(unescape(name)) {
			return true
		}
	}
	return false
}

// MaskQuery returns the raw query q with the value of each credential
// parameter (IsParam, its name unescaped) replaced by mask, every name,
// every other value, every separator and the order kept as they were
// (OpenTelemetry's url.full, mask "REDACTED"); its parameters are split as
// CutParam splits them.
func MaskQuery(q, mask string) string {
	if !HasParam(q) {
		return q
	}
	var b strings.Builder
	b.Grow(len(q))
	for q != "" {
		part, rest := CutParam(q)
		name, _, hasValue := strings.Cut(part, "=")
		if hasValue && IsParam(unescape(name)) {
			b.WriteString(name)
			b.WriteString("=" + mask)
		} else {
			b.WriteString(part)
		}
		if len(part) < len(q) {
			b.WriteByte(q[len(part)]) // its separator, as it was
		}
		q = rest
	}
	return b.String()
}

// unescape returns the query name decoded, or as it is if it does not
// decode.
func unescape(name string) string {
	if u, err := url.QueryUnescape(name); err == nil {
		return u
	}
	return name
}

// Strip removes every credential of the primary from r, a copy of a
// request for another route: the credential headers (Headers), in any
// spelling (a header map set directly may hold a name that is not
// canonical), the URL's user information, and the credential parameters
// of its query (IsParam; the query is re-encoded, its parameters sorted by
// name, whenever it has one).
func Strip(r *http.Request) {
	for name := range r.Header {
		if isHeader(name) {
			delete(r.Header, name)
		}
	}
	r.URL.User = nil
	if r.URL.RawQuery != "" {
		q := r.URL.Query()
		for name := range q {
			if IsParam(name) {
				q.Del(name)
			}
		}
		r.URL.RawQuery = q.Encode()
	}
}

// Carried reports whether r carries a credential: a credential header
// (Headers) with a value, in any spelling, URL user information, or a
// credential parameter in its query with a value. A route's request that
// carries one after Strip set its own.
func Carried(r *http.Request) bool {
	for name, vs := range r.Header {
		if len(vs) > 0 && vs[0] != "" && isHeader(name) {
			return true
		}
	}
	if r.URL == nil {
		return false
	}
	return r.URL.User != nil || HasParam(r.URL.RawQuery)
}
