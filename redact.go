package llmretry

import "net/url"

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
