package llmretry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/llmretry/llmretry/internal/wire"
)

// Retryable reports whether a model request that ended with resp or err may
// succeed if sent again. It looks only at the status code and the error,
// never at the body, and is safe for concurrent use.
//
// Retryable statuses: 408, 425, 429 and 5xx other than 501 (529, Anthropic's
// "overloaded", included). Retryable errors: a failed connection (refused,
// reset, EOF before a response, a network timeout) and any other transport
// error except: an error marked with Permanent, a TLS certificate that is
// not trusted or does not match, too many redirects, a context's own end
// (canceled or deadline exceeded), and the request's own faults — a
// malformed request (bad URL, scheme, method, header or trailer, a control
// character in the URL, a ContentLength that does not match the body),
// none of which a retry fixes.
//
// Retryable cannot see whose context ended, so it calls a context's error
// final. The Transport knows: a timeout from below it (a middleware's own
// deadline, http.Transport's ResponseHeaderTimeout) while the caller's
// context is alive is retried; only the caller's own context ending is
// final. A request body that fails to read is final too: the Transport
// sees that from the body itself.
//
// When err is non-nil resp is ignored. The Transport also reads provider
// signals (x-should-retry, quota bodies, Gemini's RetryInfo) on top of this.
func Retryable(resp *http.Response, err error) bool {
	if err != nil {
		return classifyErr(err) == errTransient
	}
	if resp == nil {
		return false
	}
	return retryableStatus(resp.StatusCode)
}

// retryableStatus reports whether status is worth another attempt.
func retryableStatus(status int) bool {
	switch {
	case status == http.StatusRequestTimeout, status == http.StatusTooEarly, status == http.StatusTooManyRequests:
		return true
	case status == http.StatusNotImplemented:
		return false
	case status >= 500 && status <= 599:
		return true
	}
	return false
}

// errClass is what a transport error says.
type errClass int8

const (
	// errTransient: a failed connection or a timeout; a retry may work,
	// and the provider looks down.
	errTransient errClass = iota
	// errRequest: the request's own fault (malformed); never retried,
	// and it says nothing of the provider.
	errRequest
	// errFinal: marked Permanent, a TLS certificate refused, too many
	// redirects; never retried, and it says nothing of the provider.
	errFinal
	// errContext: a context's own error; final for the caller's context,
	// a timeout from below otherwise.
	errContext
)

// classifyErr classifies a transport error.
func classifyErr(err error) errClass {
	if isPermanent(err) {
		return errFinal
	}
	if errors.Is(err, context.Canceled) || wrapsDeadlineExceeded(err) {
		return errContext
	}
	var (
		unknownAuthority x509.UnknownAuthorityError
		invalidCert      x509.CertificateInvalidError
		hostname         x509.HostnameError
		verification     *tls.CertificateVerificationError
	)
	if errors.As(err, &unknownAuthority) || errors.As(err, &invalidCert) ||
		errors.As(err, &hostname) || errors.As(err, &verification) {
		return errFinal
	}
	msg := err.Error()
	for _, m := range requestFaults {
		if strings.Contains(msg, m) {
			return errRequest
		}
	}
	for _, m := range finalMessages {
		if strings.Contains(msg, m) {
			return errFinal
		}
	}
	return errTransient
}

// requestFaults are fragments of net/http's untyped errors for a request
// that no server will take as it is: net/http refuses it before or while
// writing it, HTTP/1 (transport.go, request.go, transfer.go) and HTTP/2
// (h2_bundle.go, internal/httpcommon) alike. Each is tested against the
// real net/http in classify_test.go, so a Go release that rewords one
// shows.
var requestFaults = [...]string{
	"unsupported protocol scheme",          // transport: the URL's scheme
	"http2: unsupported scheme",            // HTTP/2 on its own
	"net/http: invalid header",             // header name or value
	"net/http: invalid trailer",            // trailer name or value
	"invalid HTTP header",                  // HTTP/2: header
	"invalid HTTP trailer",                 // HTTP/2: trailer
	"invalid header field",                 // HTTP/2: header name or value
	"invalid Trailer key",                  // HTTP/2: Trailer header
	"invalid Host header",                  // both
	"invalid request :path",                // HTTP/2: the URL's path
	"net/http: invalid method",             // the method
	"no Host in request URL",               // the URL
	"nil Request.URL",                      // the URL
	"Request.URL is nil",                   // HTTP/2: the URL
	"nil Request.Header",                   // the header map
	"can't write control character",        // a control character in the URL
	"with nil Body",                        // ContentLength set, Body nil
	"with Body length",                     // ContentLength not the body's length
	"larger than specified content length", // HTTP/2: body longer than ContentLength
	"Request.RequestURI can't be set",      // a server request passed on as it is
	"header list larger than peer's",       // HTTP/2: headers above the server's limit
}

// malformed reports whether req, as sent, is one no server takes, whatever
// error its attempt ended with (net/http's own refusal races with its read
// of the connection it broke for it): a ContentLength with no body, or a
// URL with a control character (which net/http refuses to write over
// HTTP/1; over HTTP/2 it is sent, and refused).
func malformed(req *http.Request) bool {
	if req.ContentLength > 0 && (req.Body == nil || req.Body == http.NoBody) {
		return true
	}
	return req.URL != nil && strings.ContainsFunc(req.URL.RequestURI(), func(r rune) bool { return r < ' ' || r == 0x7f })
}

// finalMessages are fragments of other untyped errors no retry fixes.
var finalMessages = [...]string{
	"stopped after",              // an http.Client below us: too many redirects
	"certificate is not trusted", // macOS's TLS verification text
}

// wrapsDeadlineExceeded reports whether err is context.DeadlineExceeded or
// wraps it. errors.Is would also match net/http's timeout awaiting response
// headers (http.Transport.ResponseHeaderTimeout), which says it Is
// context.DeadlineExceeded although no context ended and a retry may well
// get an answer.
func wrapsDeadlineExceeded(err error) bool {
	for err != nil {
		if err == context.DeadlineExceeded {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if wrapsDeadlineExceeded(e) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// What a failed reply says beyond its status is read by internal/wire; the
// Transport asks through these.

// RetryAfter returns the wait a server asked for in h, measured from now:
// the retry-after-ms header (milliseconds, fractions allowed, as OpenAI and
// Azure send it) if it is valid, else Retry-After as delay-seconds (digits
// only, per RFC 9110) or an HTTP-date in any of the three forms
// http.ParseTime accepts. A date in the past means a wait of zero.
//
// It reports false when neither header holds a valid value: malformed,
// negative, empty or several comma-separated values are ignored, never an
// error. Huge values are clamped to the longest time.Duration rather than
// overflowing; it is the caller's job to bound them (a Transport does not
// wait longer than Policy.MaxRetryAfter: it returns the response at once,
// with ErrWaitTooLong). Only the first value of each header is read.
//
// RetryAfter does not read the response body; provider waits carried in the
// body (Gemini's RetryInfo) are read by the Transport on failures.
func RetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	return wire.RetryAfter(h, now)
}
