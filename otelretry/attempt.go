package otelretry

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/llmretry/llmretry"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// attemptTransport is the layer between otelhttp and base. The request it
// gets carries the attempt's span and otelhttp's labeler (otelhttp's) and
// the attempt's number (llmretry's), so it is where the span and the
// duration metric learn what otelhttp leaves out: that the attempt is a
// resend, a port that is the scheme's default, the error.type of a failure
// status, and the URL with its credentials redacted. It also counts the
// attempt. It is safe for concurrent use.
type attemptTransport struct {
	base http.RoundTripper
	tel  *telemetry
}

// RoundTrip completes the attempt span's attributes (see attemptTransport),
// sends req through base, and counts the attempt. An error whose text
// quotes a credential of req is returned with that text redacted (see
// redactError).
func (t *attemptTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	a, _ := llmretry.AttemptFromContext(ctx)
	n := a.N
	f := facts{resend: n > 1, probe: a.Probe, route: a.Route, continued: a.Continued}
	port, implied := serverPort(req.URL)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		if f.probe {
			span.SetAttributes(keyProbe.Bool(true))
		}
		if f.route > 0 {
			span.SetAttributes(keyRoute.Int(f.route))
		}
		if f.continued != "" {
			span.SetAttributes(keyContinued.String(f.continued), keyContinuedFrom.Int64(a.From))
		}
		// otelhttp has set its own attributes when the span started; the
		// later value of a key wins (the span has not been exported yet).
		u, rewrite := redactURL(req.URL)
		switch {
		case !rewrite && n <= 1 && implied:
			// A first try on the default port: the usual case, whose
			// attributes are made once (passing them allocates nothing).
			span.SetAttributes(impliedPort[port == 443]...)
		case rewrite || n > 1 || implied:
			span.SetAttributes(attemptAttrs(port, implied, u, rewrite, n)...)
		}
	}
	labeler, _ := otelhttp.ClientLabelerFromContext(ctx)
	if implied {
		labeler.Add(semconv.ServerPort(port))
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		err = redactError(err, req)
	} else if resp != nil {
		if resp.Request == nil {
			// Where the attempt's number travels up to the Transport.
			resp.Request = req
		}
		if resp.StatusCode >= 400 || resp.StatusCode < 100 {
			// otelhttp puts error.type on the span for a failure status,
			// and on the duration metric only for an error.
			labeler.Add(semconv.ErrorTypeKey.String(strconv.Itoa(resp.StatusCode)))
		}
	}
	if err == nil && opensStream(resp) {
		// Its stream's first event may yet fail it (llmretry.event): the
		// attempt is counted once that is known (see pending).
		resp = t.tel.pend(ctx, req, resp, f)
		return resp, nil
	}
	t.tel.countAttempt(ctx, req, resp, err, f)
	return resp, err
}

// impliedPort are the server.port attributes of the default ports, by
// whether the port is https's (443) or http's (80).
var impliedPort = map[bool][]attribute.KeyValue{
	true:  {semconv.ServerPort(443)},
	false: {semconv.ServerPort(80)},
}

// attemptAttrs are the attributes an attempt span gets beyond the port
// alone: url.full redacted (when rewrite), http.request.resend_count (from
// the second attempt, numbered n, on) and server.port (when implied).
func attemptAttrs(port int, implied bool, u string, rewrite bool, n int) []attribute.KeyValue {
	kvs := make([]attribute.KeyValue, 0, 3)
	if implied {
		kvs = append(kvs, semconv.ServerPort(port))
	}
	if rewrite {
		kvs = append(kvs, semconv.URLFull(u))
	}
	if n > 1 {
		kvs = append(kvs, semconv.HTTPRequestResendCount(n-1))
	}
	return kvs
}

// serverPort returns the port u is sent to and whether it is implied by
// the scheme (443 for https, 80 for http), stated or not: otelhttp
// records server.port only for any other port, though the conventions
// require it on client spans and on http.client.request.duration.
func serverPort(u *url.URL) (port int, implied bool) {
	if u == nil {
		return 0, false
	}
	def := 0
	switch {
	case strings.EqualFold(u.Scheme, "https"):
		def = 443
	case strings.EqualFold(u.Scheme, "http"):
		def = 80
	}
	p := u.Port()
	if p == "" {
		return def, def != 0
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return 0, false
	}
	return port, port == def
}

// spanName names an attempt span as the HTTP conventions ask: the method
// as http.request.method records it (a known method, in upper case), or
// "HTTP" for any other method (recorded as _OTHER), an empty one
// included.
func spanName(_ string, r *http.Request) string {
	switch r.Method {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch,
		http.MethodHead, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return r.Method
	}
	for _, m := range knownMethods {
		if strings.EqualFold(r.Method, m) {
			return m // otelhttp records a "post" as POST, with the original beside it
		}
	}
	return "HTTP"
}

// knownMethods are the methods otelhttp records as themselves: RFC 9110's
// and PATCH.
var knownMethods = [...]string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch,
	http.MethodHead, http.MethodOptions, http.MethodConnect, http.MethodTrace}
