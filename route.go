package llmretry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/llmretry/llmretry/internal/credential"
)

// Route turns the request a call would send to its primary into the one it
// sends on this route: another base URL, other credentials, another model
// name. See Policy.Fallback for when a call takes a route.
//
// The request a Route receives is the call's own to change: a deep copy of
// the first attempt's, with a fresh body (nil for a request without one)
// and with every credential of the primary already removed (the
// Authorization, Proxy-Authorization, x-api-key, api-key, x-goog-api-key,
// Cookie, X-Amz-Security-Token and Ocp-Apim-Subscription-Key headers, in
// any spelling, credential-like query parameters such as key= (the ones
// Redact blanks), and URL user information): a Route sets its own
// credentials, and no credential of the primary can reach another route
// unless a Route copies one in. The Route
// is called afresh for every attempt on its route, so that it may sign each
// one (an AWS Signature Version 4 binds the host: a Route that re-signs
// routes a Bedrock call). It returns the request to send (the one it was
// given, or a new one; its context is replaced by the call's) or an error,
// which passes the route over for the rest of the call, as does a request
// that fails before any provider answers it for its own fault (a
// ContentLength that does not match a body the Route changed, say). A
// Route is called from the call's goroutine and must be safe for
// concurrent use when the Policy is shared.
type Route func(*http.Request) (*http.Request, error)

// ErrNotRouted is wrapped by the error of a Route made by RouteTo that
// does not apply to a request: its URL is not under the route's fromBase,
// or it is signed with AWS Signature Version 4.
var ErrNotRouted = errors.New("llmretry: route does not apply to this request")

// RouteTo is a ready Route for the same API at another base: a request whose
// URL starts with fromBase is sent to toBase instead, with header's values set
// and every credential of the primary removed.
//
// Both bases are absolute http or https URLs without user information,
// query or fragment; a base is matched by scheme, host (without regard to
// case) and path prefix at a segment boundary, so "https://api.openai.com/v1"
// routes "https://api.openai.com/v1/chat/completions" to
// toBase+"/chat/completions", keeping the request's query (without its
// credentials). header's values replace the request's values of the same
// names (set your credential here: "Authorization", "api-key", …); header
// is copied, so changing it afterwards has no effect. The Route refuses
// (ErrNotRouted) a request outside fromBase and one signed with AWS
// Signature Version 4 (it carries X-Amz-Date): its signature binds the
// host, and RouteTo cannot sign.
func RouteTo(fromBase, toBase string, header http.Header) (Route, error) {
	from, err := parseBase("fromBase", fromBase)
	if err != nil {
		return nil, err
	}
	to, err := parseBase("toBase", toBase)
	if err != nil {
		return nil, err
	}
	h := header.Clone()
	return func(r *http.Request) (*http.Request, error) {
		if r == nil || r.URL == nil {
			return nil, fmt.Errorf("%w: no URL", ErrNotRouted)
		}
		rest, ok := under(r.URL, from)
		if !ok {
			return nil, &outside{url: redactURL(r.URL), base: redactURL(from)}
		}
		if r.Header.Get("X-Amz-Date") != "" {
			return nil, fmt.Errorf("%w: it is signed with AWS Signature Version 4, which binds the host", ErrNotRouted)
		}
		u := *r.URL
		u.Scheme, u.Host, u.User = to.Scheme, to.Host, nil
		u.Path = strings.TrimSuffix(to.Path, "/") + rest
		u.RawPath = ""
		r.URL = &u
		r.Host = ""
		for name, vs := range h {
			r.Header[name] = append([]string(nil), vs...)
		}
		return r, nil
	}, nil
}

// outside is the error of a RouteTo route for a request that is not under
// its fromBase: the route does not apply (an Anthropic call on a policy
// whose first fallback is for OpenAI), which a call passes over without
// recording it.
type outside struct{ url, base string }

func (e *outside) Error() string {
	return ErrNotRouted.Error() + ": " + e.url + " is not under " + e.base
}
func (e *outside) Is(target error) bool { return target == ErrNotRouted }

// parseBase parses one of RouteTo's bases.
func parseBase(name, base string) (*url.URL, error) {
	u, err := url.Parse(base)
	switch {
	case err != nil:
		return nil, fmt.Errorf("llmretry: RouteTo %s: %w", name, errors.Unwrap(err))
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("llmretry: RouteTo %s %q: want an http or https URL", name, redactURL(u))
	case u.Host == "":
		return nil, fmt.Errorf("llmretry: RouteTo %s %q has no host", name, redactURL(u))
	case u.User != nil:
		return nil, fmt.Errorf("llmretry: RouteTo %s has user information: set credentials in header", name)
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("llmretry: RouteTo %s %q has a query or fragment", name, redactURL(u))
	}
	return u, nil
}

// under reports whether u is under base (same scheme, host without regard
// to case, path prefix at a segment boundary), and returns the rest of its
// path.
func under(u, base *url.URL) (string, bool) {
	if !strings.EqualFold(u.Scheme, base.Scheme) || !strings.EqualFold(u.Host, base.Host) {
		return "", false
	}
	prefix := strings.TrimSuffix(base.Path, "/")
	rest, ok := strings.CutPrefix(u.Path, prefix)
	if !ok || rest != "" && rest[0] != '/' {
		return "", false
	}
	return rest, true
}

// forRoute returns what a Route receives for one attempt: a deep copy of
// first, with ctx, body and none of first's credentials (see Route).
func forRoute(ctx context.Context, first *http.Request, body io.ReadCloser) *http.Request {
	r := first.Clone(ctx)
	credential.Strip(r)
	r.Body, r.GetBody = body, nil // a Route may change the body: it sets its own GetBody
	return r
}

// routed runs route on what it receives for one attempt (see forRoute) and
// checks its result: a request to send, with ctx.
func routed(ctx context.Context, route Route, first *http.Request, body io.ReadCloser) (*http.Request, error) {
	r, err := route(forRoute(ctx, first, body))
	switch {
	case err != nil:
		return nil, err
	case r == nil:
		return nil, errors.New("llmretry: route returned no request and no error")
	case r.URL == nil:
		closeBody(r)
		return nil, errors.New("llmretry: route returned a request with no URL")
	}
	if r.Context() != ctx {
		r = r.WithContext(ctx)
	}
	return r, nil
}
