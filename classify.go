package llmretry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"strings"
)

// Retryable reports whether a model request that ended with resp or err may
// succeed if sent again. It looks only at the status code and the error,
// never at the body, and is safe for concurrent use.
//
// Retryable statuses: 408, 425, 429 and 5xx other than 501 (529, Anthropic's
// "overloaded", included). Retryable errors: a failed connection (refused,
// reset, EOF before a response, a network timeout) and any other transport
// error except: the context's own (canceled or deadline exceeded), an error
// marked with Permanent, a TLS certificate that is not trusted or does not
// match, and a malformed request (bad URL or scheme, invalid header or
// method, too many redirects), none of which a retry fixes.
//
// When err is non-nil resp is ignored. The Transport also reads provider
// signals (x-should-retry, quota bodies, Gemini's RetryInfo) on top of this.
func Retryable(resp *http.Response, err error) bool {
	if err != nil {
		return retryableErr(err)
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

// retryableErr classifies a transport error.
func retryableErr(err error) bool {
	if isPermanent(err) {
		return false
	}
	if errors.Is(err, context.Canceled) || wrapsDeadlineExceeded(err) {
		return false
	}
	var (
		unknownAuthority x509.UnknownAuthorityError
		invalidCert      x509.CertificateInvalidError
		hostname         x509.HostnameError
		verification     *tls.CertificateVerificationError
	)
	if errors.As(err, &unknownAuthority) || errors.As(err, &invalidCert) ||
		errors.As(err, &hostname) || errors.As(err, &verification) {
		return false
	}
	// Fragments of net/http's untyped errors for requests that no retry
	// can fix.
	permanentMessages := [...]string{
		"unsupported protocol scheme",
		"invalid header",
		"invalid method",
		"no Host in request URL",
		"nil Request.URL",
		"nil Request.Header",
		"stopped after",
		"certificate is not trusted",
	}
	msg := err.Error()
	for _, m := range permanentMessages {
		if strings.Contains(msg, m) {
			return false
		}
	}
	return true
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
