package llmretry

// This file is the adapter to github.com/hashicorp/go-retryablehttp, and
// the only one that imports it: the retry loop's mechanics (attempt, check,
// back off, wait or end with the context) are its Client.Do; every decision
// is call.decide's, every attempt call.send's.
//
// Client.Do sends each attempt through an http.Client, which would add to
// it (Basic auth from URL user information), follow or refuse redirects
// (building, and dropping, a redirect request), and wrap errors. None of
// that may reach the wire or the result, so the http.Client never sees an
// attempt: its transport, attemptTransport, ignores the request it is
// given, has the call send its own, and answers the http.Client with a
// placeholder. The real result stays in the call, where decide reads it.

import (
	"context"
	"math"
	"net/http"
	"net/url"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// round runs one round of retries on go-retryablehttp's loop, and says
// why it stopped. The loop's first attempt hands back the attempt that
// ended the previous round (or the first attempt, sent by RoundTrip), so
// that decide sees it like any other: the first attempt never pays for
// this set-up.
func (c *call) round() stop {
	replay := c.n > 0 // a call that started around its primary sent nothing yet
	rc := &retryablehttp.Client{
		HTTPClient: &http.Client{
			// attemptTransport has no CloseIdleConnections, so the calls
			// go-retryablehttp makes on failure cannot empty the caller's
			// connection pool.
			Transport: attemptTransport(func() {
				if replay {
					replay = false
					return
				}
				c.send()
			}),
		},
		RetryMax: math.MaxInt32, // decide alone says when to stop
		CheckRetry: func(context.Context, *http.Response, error) (bool, error) {
			return c.decide(), nil
		},
		Backoff: func(_, _ time.Duration, _ int, _ *http.Response) time.Duration {
			return c.wait
		},
		// Only a wait cut short by the context ends the loop with an
		// error; it is returned as it is.
		ErrorHandler: func(_ *http.Response, err error, _ int) (*http.Response, error) { return nil, err },
		// Logger stays nil: go-retryablehttp would log URLs with their
		// query strings, where API keys travel.
	}
	if _, err := rc.Do(&retryablehttp.Request{Request: c.template()}); err != nil {
		c.cut = err // the context ended during a wait
	}
	return c.why
}

// template returns the request go-retryablehttp passes to its http.Client:
// only its context (the call's, for the wait) and its URL (which the
// http.Client requires) matter; nothing of it is ever sent.
func (c *call) template() *http.Request {
	u := &url.URL{Scheme: c.req.URL.Scheme, Host: c.req.URL.Host, Path: c.req.URL.Path}
	r := &http.Request{Method: c.req.Method, URL: u, Header: make(http.Header)}
	return r.WithContext(c.f) // the first attempt's context
}

// attemptTransport is the http.Client's transport inside the loop: it runs
// the attempt the call sends (or replays) and answers with a placeholder.
// It deliberately has no CloseIdleConnections method.
type attemptTransport func()

// RoundTrip runs the attempt and returns the placeholder: a 200 with no
// body, which the http.Client hands back as it is (it follows no redirect
// and wraps no error) and go-retryablehttp's drain reads nothing of.
func (a attemptTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	a()
	return &http.Response{StatusCode: http.StatusOK, Header: make(http.Header), Body: http.NoBody, Request: r}, nil
}
