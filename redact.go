package llmretry

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/llmretry/llmretry/internal/credential"
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

// redactErr renders err without the credentials its text may carry (see
// Redact): an error from a nested http.Client quotes the whole URL, query
// included.
func redactErr(err error, req *http.Request) string {
	return Redact(err.Error(), req)
}

// secretHeaders names the request headers whose values are
// credentials: model providers' API keys, and the usual HTTP ones.
var secretHeaders = append(credential.Headers[:], "Proxy-Authorization", "Cookie")

// Redact returns text with every credential of req that it may quote
// blanked ("…"): req's query (whole), its URL user information, the values
// of its credential headers (Authorization, Proxy-Authorization,
// x-api-key, api-key, x-goog-api-key, Cookie; the token of "Bearer …"
// alone too), and, whatever req, the value of any credential-like
// name=value (key=, api_key=, token=, sig=, password=, …). req may be nil.
//
// Use it before logging an error a client returned: http.Client wraps a
// transport error in a *url.Error that quotes the whole URL, query
// included. It is what this package's own texts (Exhausted, Attempt,
// Question, DownError, LogAttempts) go through.
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
		for _, name := range secretHeaders {
			for _, v := range req.Header.Values(name) {
				text = blank(text, v)
				if _, tok, ok := strings.Cut(v, " "); ok {
					text = blank(text, strings.TrimSpace(tok))
				}
			}
		}
	}
	return redactParams(text)
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
	case "key", "api_key", "apikey", "api-key", "access_token", "token", "sig", "signature", "password", "secret", "client_secret",
		// presigned URLs (S3, GCS) and Azure's subscription key
		"x-amz-signature", "x-amz-credential", "x-amz-security-token", "x-goog-signature", "x-goog-credential", "subscription-key":
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
