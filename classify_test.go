package llmretry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingRT counts the attempts that reach its RoundTripper.
type countingRT struct {
	rt http.RoundTripper
	n  atomic.Int32
}

func (c *countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

// realServers returns an HTTP/1.1 and an HTTP/2 test server answering 200,
// with their clients' transports, closed when the test ends.
func realServers(t *testing.T) map[string]struct {
	url string
	rt  http.RoundTripper
} {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte(`{"answer":42}`))
	})
	quiet := log.New(io.Discard, "", 0) // the servers' complaints about bad requests are expected
	h1 := httptest.NewUnstartedServer(h)
	h1.Config.ErrorLog = quiet
	h1.Start()
	h2 := httptest.NewUnstartedServer(h)
	h2.Config.ErrorLog = quiet
	h2.EnableHTTP2 = true
	h2.StartTLS()
	t.Cleanup(func() {
		h1.Close()
		h2.Close()
		h1.Client().CloseIdleConnections()
		h2.Client().CloseIdleConnections()
	})
	return map[string]struct {
		url string
		rt  http.RoundTripper
	}{
		"HTTP/1.1": {h1.URL, h1.Client().Transport},
		"HTTP/2":   {h2.URL, h2.Client().Transport},
	}
}

func TestRetryableStatusesAndErrors(t *testing.T) {
	retried := []step{fail(408), fail(425), fail(429), fail(500), fail(502), fail(503), fail(504), fail(529), refused,
		{err: &netOpError{syscall.ECONNRESET}}, {err: io.EOF}, {err: io.ErrUnexpectedEOF}, {err: timeoutError{}},
		// A context's error from below while the caller's context is
		// alive: a middleware's own timeout or cancellation.
		{err: context.DeadlineExceeded}, {err: context.Canceled}}
	for _, s := range retried {
		t.Run(fmt.Sprintf("retried %d %v", s.status, s.err), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := newProvider(s, ok)
				resp, err := post(t, mustNew(t, prov.mock, Policy{Waits: []time.Duration{time.Second}}), context.Background())
				require.NoError(t, err)
				assert.Equal(t, 200, resp.StatusCode)
				assert.Equal(t, 2, prov.attempts())
			})
		})
	}
	final := []step{fail(400), fail(401), fail(403), fail(404), fail(409), fail(422), fail(501),
		{err: x509.UnknownAuthorityError{}},
		{err: errors.New(`unsupported protocol scheme "ftp"`)}, {err: errors.New(`net/http: invalid header field name "\x00"`)},
		{err: Permanent(errors.New("signer refused"))}}
	for _, s := range final {
		t.Run(fmt.Sprintf("final %d %v", s.status, s.err), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := newProvider(s, ok)
				resp, err := post(t, mustNew(t, prov.mock, Policy{Waits: []time.Duration{time.Second}}), context.Background())
				assert.Equal(t, 1, prov.attempts())
				if s.err != nil {
					assert.Nil(t, resp)
					require.Error(t, err)
					assert.ErrorIs(t, err, s.err)
					return
				}
				require.NoError(t, err)
				assert.Equal(t, s.status, resp.StatusCode)
				assert.Equal(t, fmt.Sprintf("error %d", s.status), bodyOf(t, resp))
			})
		})
	}
}

// timeoutError is a network timeout that is not the context's.
type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

func TestRetryableClassifier(t *testing.T) {
	cases := []struct {
		resp *http.Response
		err  error
		want bool
	}{
		{&http.Response{StatusCode: 429}, nil, true},
		{&http.Response{StatusCode: 529}, nil, true},
		{&http.Response{StatusCode: 501}, nil, false},
		{&http.Response{StatusCode: 200}, nil, false},
		{&http.Response{StatusCode: 404}, nil, false},
		{nil, nil, false},
		{nil, &url.Error{Op: "Post", URL: testURL, Err: &netOpError{syscall.ECONNREFUSED}}, true},
		{nil, fmt.Errorf("wrapped: %w", context.Canceled), false},
		{nil, x509.HostnameError{Certificate: &x509.Certificate{}, Host: "api.example.test"}, false},
		{nil, Permanent(io.EOF), false},
		{&http.Response{StatusCode: 503}, io.EOF, true}, // the error decides
	}
	for i, c := range cases {
		assert.Equal(t, c.want, Retryable(c.resp, c.err), "case %d", i)
	}
}

// A request that no server will take as it is fails in net/http itself,
// over HTTP/1.1 and HTTP/2 alike. Its error is the request's own fault: it
// is sent once, never retried, and Retryable says false.
func TestRequestFaultsAreFinal(t *testing.T) {
	cases := []struct {
		name   string
		mod    func(t *testing.T, req *http.Request)
		h1only bool // HTTP/2 sends it as it is (and the server takes it)
	}{
		{"ContentLength=10 with Body length 5", func(t *testing.T, req *http.Request) {
			req.Body = io.NopCloser(strings.NewReader("12345"))
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("12345")), nil }
			req.ContentLength = 10
		}, true},
		{"a nil body with a ContentLength", func(t *testing.T, req *http.Request) {
			req.Body, req.GetBody, req.ContentLength = nil, nil, 5
		}, true},
		{"a control character in the URL", func(t *testing.T, req *http.Request) {
			req.URL.Opaque = "/v1/chat\x01"
		}, false},
		{"an invalid trailer name", func(t *testing.T, req *http.Request) {
			req.Trailer = http.Header{"Bad Name": {"x"}}
		}, false},
		{"an invalid header name", func(t *testing.T, req *http.Request) {
			req.Header["Bad Name"] = []string{"x"}
		}, false},
		{"an invalid header value", func(t *testing.T, req *http.Request) {
			req.Header.Set("X-Note", "line\nbreak")
		}, false},
		{"an unsupported scheme", func(t *testing.T, req *http.Request) {
			req.URL.Scheme = "ftp"
		}, false},
		{"an invalid method", func(t *testing.T, req *http.Request) {
			req.Method = "BAD METHOD"
		}, false},
		{"no host", func(t *testing.T, req *http.Request) {
			req.URL.Host, req.Host = "", ""
		}, false},
	}
	for proto, srv := range realServers(t) {
		for _, c := range cases {
			if c.h1only && proto != "HTTP/1.1" {
				continue
			}
			t.Run(proto+"/"+c.name, func(t *testing.T) {
				base := &countingRT{rt: srv.rt}
				req, err := http.NewRequest(http.MethodPost, srv.url+"/v1/chat", strings.NewReader(`{"model":"m"}`))
				require.NoError(t, err)
				c.mod(t, req)
				var rec recorder
				resp, err := mustNew(t, base, Policy{Waits: []time.Duration{0, 0, 0}, OnAttempt: rec.on}).RoundTrip(req)
				if resp != nil {
					resp.Body.Close()
				}
				var ex *Exhausted
				require.ErrorAs(t, err, &ex, "net/http refuses the request")
				assert.Equal(t, int32(1), base.n.Load(), "sent once: %v", rec.attempts)
				assert.Equal(t, 1, ex.Attempts)
				if proto == "HTTP/2" && strings.Contains(c.name, "control") {
					return // the server refuses it: the Transport tells by the URL itself
				}
				assert.False(t, Retryable(nil, ex.Err), "Retryable says false for %q", ex.Err)
				assert.Equal(t, errRequest, classifyErr(ex.Err), "%q is the request's own fault", ex.Err)
			})
		}
	}
}

// The same faults as plain errors, as other bases word them.
func TestRetryableSaysFalseForRequestFaults(t *testing.T) {
	for _, msg := range []string{
		`net/http: HTTP/1.x transport connection broken: http: ContentLength=10 with Body length 5`,
		`http: Request.ContentLength=5 with nil Body`,
		`net/http: can't write control character in Request.URL`,
		`net/http: invalid trailer field name "Bad Name"`,
		`http2: invalid HTTP trailer invalid header field name "Bad Name"`,
		`unsupported protocol scheme "ftp"`,
	} {
		assert.False(t, Retryable(nil, errors.New(msg)), msg)
		assert.True(t, Retryable(nil, errors.New("read tcp: connection reset by peer")))
	}
}

// A request body that fails to read is the request's own fault, even when
// the base reports it as its error: one attempt, not four.
func TestRequestBodyFailureIsFinal(t *testing.T) {
	for proto, srv := range realServers(t) {
		t.Run(proto, func(t *testing.T) {
			base := &countingRT{rt: srv.rt}
			req, err := http.NewRequest(http.MethodPost, srv.url+"/v1", errBody{})
			require.NoError(t, err)
			req.GetBody = func() (io.ReadCloser, error) { return errBody{}, nil }
			req.ContentLength = 100
			resp, err := mustNew(t, base, Policy{Waits: []time.Duration{0, 0, 0}}).RoundTrip(req)
			assert.Nil(t, resp)
			var ex *Exhausted
			require.ErrorAs(t, err, &ex)
			assert.ErrorContains(t, err, "disk on fire")
			assert.Equal(t, int32(1), base.n.Load())
		})
	}
}

// A GetBody that fails on a retry ends the call with its error; nothing is
// sent without the body.
func TestGetBodyFailureIsFinal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := newProvider(fail(503), ok)
		req, err := http.NewRequest(http.MethodPost, testURL, strings.NewReader(`{}`))
		require.NoError(t, err)
		calls := 0
		req.GetBody = func() (io.ReadCloser, error) {
			calls++
			return nil, errors.New("the spool is gone")
		}
		resp, err := mustNew(t, prov.mock, Policy{Waits: []time.Duration{time.Second, time.Second}}).RoundTrip(req)
		assert.Nil(t, resp)
		var ex *Exhausted
		require.ErrorAs(t, err, &ex)
		assert.ErrorContains(t, err, "the spool is gone")
		assert.Equal(t, 1, prov.attempts(), "nothing sent without its body")
		assert.Equal(t, 1, ex.Attempts)
	})
}

// A timeout from below the Transport while the caller's context is alive
// is retried: a middleware's own per-attempt deadline, and net/http's
// ResponseHeaderTimeout. Only the caller's own context ending is final.
func TestTimeoutsFromBelowAreRetried(t *testing.T) {
	t.Run("a per-attempt timeout middleware", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var n atomic.Int32
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second) // the middleware's own
				defer cancel()
				if n.Add(1) == 1 {
					<-ctx.Done() // the first attempt hangs
					return nil, ctx.Err()
				}
				return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
			})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			resp, err := post(t, mustNew(t, base, Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second}), ctx)
			require.NoError(t, err)
			assert.Equal(t, 200, resp.StatusCode)
			assert.Equal(t, int32(2), n.Load())
		})
	})
	t.Run("ResponseHeaderTimeout", func(t *testing.T) {
		var n atomic.Int32
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				select { // the first reply's headers come too late
				case <-release:
				case <-r.Context().Done():
				}
			}
			_, _ = w.Write([]byte(`{"answer":42}`))
		}))
		defer srv.Close()
		defer close(release)
		tr := &http.Transport{ResponseHeaderTimeout: 100 * time.Millisecond}
		defer tr.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{}`))
		require.NoError(t, err)
		resp, err := mustNew(t, tr, Policy{Waits: []time.Duration{0}, Reserve: time.Second}).RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, `{"answer":42}`, bodyOf(t, resp))
		assert.Equal(t, int32(2), n.Load())
	})
	t.Run("the caller's own deadline is final", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var n atomic.Int32
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				n.Add(1)
				<-r.Context().Done()
				return nil, r.Context().Err()
			})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := post(t, mustNew(t, base, Policy{Waits: []time.Duration{0}}), ctx)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Equal(t, int32(1), n.Load())
		})
	})
}

// A certificate the client does not trust is final through the real TLS
// stack: a retry would meet the same certificate.
func TestUntrustedCertificateIsFinal(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	srv.StartTLS()
	defer srv.Close()
	tr := &http.Transport{TLSClientConfig: &tls.Config{}} // the test CA is not trusted
	defer tr.CloseIdleConnections()
	base := &countingRT{rt: tr}
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	_, err = mustNew(t, base, Policy{Waits: []time.Duration{0, 0}}).RoundTrip(req)
	require.Error(t, err)
	assert.Equal(t, int32(1), base.n.Load())
}
