package llmretry

import (
	"net/http"
	"net/url"
	"strings"
)

// redactURL renders u as scheme://host/path: no user information, query or
// fragment, which is where credentials travel in URLs (Gemini's key=).
func redactURL(u *url.URL) string {
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

// redactErr renders err without the credentials its text may carry: an
// error from a nested http.Client quotes the whole URL, query included.
// The request's query (if req is known) is replaced as a whole, and any
// credential-like name=value has its value blanked.
func redactErr(err error, req *http.Request) string {
	s := err.Error()
	if req != nil && req.URL != nil && req.URL.RawQuery != "" {
		s = strings.ReplaceAll(s, req.URL.RawQuery, "…")
	}
	return redactParams(s)
}

// redactParams blanks the value of every name=value in s whose name is
// one that carries credentials in URLs.
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
