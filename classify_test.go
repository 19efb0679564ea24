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
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry/internal/coord"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/llmretry/llmretry/internal/wire"
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
	retried := []testkit.Reply{testkit.Fail(408), testkit.Fail(425), testkit.Fail(429), testkit.Fail(500), testkit.Fail(502), testkit.Fail(503), testkit.Fail(504), testkit.Fail(529), testkit.Refused(),
		{Err: &netOpError{syscall.ECONNRESET}}, {Err: io.EOF}, {Err: io.ErrUnexpectedEOF}, {Err: timeoutError{}},
		// A context's error from below while the caller's context is
		// alive: a middleware's own timeout or cancellation.
		{Err: context.DeadlineExceeded}, {Err: context.Canceled}}
	for _, s := range retried {
		t.Run(fmt.Sprintf("retried %d %v", s.Status, s.Err), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(s, testkit.OK())
				resp, err := post(t, mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}}), context.Background())
				require.NoError(t, err)
				assert.Equal(t, 200, resp.StatusCode)
				assert.Equal(t, 2, prov.Attempts())
			})
		})
	}
	final := []testkit.Reply{testkit.Fail(400), testkit.Fail(401), testkit.Fail(403), testkit.Fail(404), testkit.Fail(409), testkit.Fail(422), testkit.Fail(501),
		{Err: x509.UnknownAuthorityError{}},
		{Err: errors.New(`unsupported protocol scheme "ftp"`)}, {Err: errors.New(`net/http: invalid header field name "\x00"`)},
		{Err: Permanent(errors.New("signer refused"))}}
	for _, s := range final {
		t.Run(fmt.Sprintf("final %d %v", s.Status, s.Err), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(s, testkit.OK())
				resp, err := post(t, mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}}), context.Background())
				assert.Equal(t, 1, prov.Attempts())
				if s.Err != nil {
					assert.Nil(t, resp)
					require.Error(t, err)
					assert.ErrorIs(t, err, s.Err)
					return
				}
				require.NoError(t, err)
				assert.Equal(t, s.Status, resp.StatusCode)
				assert.Equal(t, fmt.Sprintf("error %d", s.Status), bodyOf(t, resp))
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
		prov := testkit.NewProvider(testkit.Fail(503), testkit.OK())
		req, err := http.NewRequest(http.MethodPost, testURL, strings.NewReader(`{}`))
		require.NoError(t, err)
		calls := 0
		req.GetBody = func() (io.ReadCloser, error) {
			calls++
			return nil, errors.New("the spool is gone")
		}
		resp, err := mustNew(t, prov, Policy{Waits: []time.Duration{time.Second, time.Second}}).RoundTrip(req)
		assert.Nil(t, resp)
		var ex *Exhausted
		require.ErrorAs(t, err, &ex)
		assert.ErrorContains(t, err, "the spool is gone")
		assert.Equal(t, 1, prov.Attempts(), "nothing sent without its body")
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
			ctx := withDeadline(t, 5*time.Minute)
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
		ctx := withDeadline(t, time.Minute)
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
			ctx := withDeadline(t, time.Minute)
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

// What providers say in their error replies changes what the Transport
// does, and the caller still reads the provider's whole body.
func TestProviderSignalsThroughTheTransport(t *testing.T) {
	long := strings.Repeat("x", 3*signalPeek)
	cases := []struct {
		name     string
		first    testkit.Reply
		attempts int           // provider attempts with a schedule of one 1 s retry
		gap      time.Duration // the wait before the retry, when there is one
	}{
		{"openai insufficient_quota is final", testkit.Reply{Status: 429, Body: `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`}, 1, 0},
		{"openai rate limit is retried", testkit.Reply{Status: 429, Body: `{"error":{"message":"Rate limit reached","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`}, 2, time.Second},
		{"anthropic spend limit is final", testkit.Reply{Status: 429, Body: `{"type":"error","error":{"type":"rate_limit_error","message":"spend limit","details":{"error_code":"enforced_spend_limit_reached"}}}`}, 1, 0},
		{"anthropic overloaded is retried", testkit.Reply{Status: 529, Body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}, 2, time.Second},
		{"gemini RetryInfo is the wait", testkit.Reply{Status: 429, Body: `{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"26.5s"}]}}`}, 2, 26500 * time.Millisecond},
		{"gemini per-day quota is final", testkit.Reply{Status: 429, Body: `{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"26s"}]}}`}, 1, 0},
		{"x-should-retry false beats 503", testkit.Reply{Status: 503, Header: map[string][]string{"X-Should-Retry": {"false"}}, Body: "down"}, 1, 0},
		{"x-should-retry true makes 409 retried", testkit.Reply{Status: 409, Header: map[string][]string{"X-Should-Retry": {"true"}}, Body: "conflict"}, 2, time.Second},
		{"a long error body is peeked, not read", testkit.Reply{Status: 503, Body: long}, 2, time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The provider fails the same way every time, so the
				// response the caller sees is the first reply's twin.
				prov := testkit.NewProvider(c.first)
				resp, err := post(t, mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}}), context.Background())
				require.NoError(t, err)
				assert.Equal(t, c.attempts, prov.Attempts())
				if c.attempts == 2 {
					assert.Equal(t, []time.Duration{c.gap}, prov.Gaps())
				}
				assert.Equal(t, c.first.Status, resp.StatusCode)
				if c.attempts == 1 {
					// Final by the provider's word: SDKs above must not
					// resend it either.
					assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
				}
				assert.Equal(t, c.first.Body, bodyOf(t, resp), "the caller reads the provider's whole body")
			})
		})
	}
}

// A 429 without Retry-After still states its wait: in its message's words
// (OpenAI, Azure) or its rate-limit headers (OpenAI's resets, OpenRouter's
// instant); the retry waits that long, under MaxRetryAfter.
func TestRateLimitWaitsStated(t *testing.T) {
	openAIMessage := `{"error":{"message":"Rate limit reached for gpt-4o in organization org-abc on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 7.5s. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	cases := []struct {
		name   string
		header http.Header
		body   string
		policy Policy
		want   time.Duration // the gap before attempt 2; 0: no attempt 2
		reason error         // when no retry follows
	}{
		{"openai message", http.Header{"Content-Type": {"application/json"}, "X-Ratelimit-Reset-Requests": {"20s"}, "X-Ratelimit-Remaining-Requests": {"0"}}, openAIMessage, Policy{}, 7500 * time.Millisecond, nil},
		{"azure message", http.Header{"Content-Type": {"application/json"}}, `{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation have exceeded call rate limit of your current OpenAI S0 pricing tier. Please retry after 33 seconds."}}`, Policy{}, 33 * time.Second, nil},
		{"openai requests reset spent", http.Header{"X-Ratelimit-Reset-Requests": {"20s"}, "X-Ratelimit-Remaining-Requests": {"0"}, "X-Ratelimit-Reset-Tokens": {"6m0s"}, "X-Ratelimit-Remaining-Tokens": {"149984"}}, "", Policy{}, 20 * time.Second, nil},
		{"openai tokens reset spent", http.Header{"X-Ratelimit-Reset-Requests": {"1s"}, "X-Ratelimit-Remaining-Requests": {"59"}, "X-Ratelimit-Reset-Tokens": {"1m30s"}, "X-Ratelimit-Remaining-Tokens": {"0"}}, "", Policy{}, 90 * time.Second, nil},
		{"openai tokens too few for the request: requests remain, so the tokens are spent", http.Header{"X-Ratelimit-Reset-Requests": {"6ms"}, "X-Ratelimit-Remaining-Requests": {"9999"}, "X-Ratelimit-Reset-Tokens": {"58.5s"}, "X-Ratelimit-Remaining-Tokens": {"500"}}, "", Policy{}, 58500 * time.Millisecond, nil},
		{"openai neither says spent: the shorter", http.Header{"X-Ratelimit-Reset-Requests": {"12s"}, "X-Ratelimit-Reset-Tokens": {"6m0s"}}, "", Policy{}, 12 * time.Second, nil},
		{"openrouter reset instant", http.Header{"X-Ratelimit-Reset": {strconv.FormatInt(time.Date(2000, 1, 1, 0, 0, 40, 0, time.UTC).UnixMilli(), 10)}}, "", Policy{}, 40 * time.Second, nil},
		{"a reset above MaxRetryAfter", http.Header{"X-Ratelimit-Reset-Requests": {"10m0s"}, "X-Ratelimit-Remaining-Requests": {"0"}}, "", Policy{}, 0, ErrWaitTooLong},
		{"retry-after wins", http.Header{"Retry-After": {"3"}, "X-Ratelimit-Reset-Requests": {"20s"}}, openAIMessage, Policy{}, 3 * time.Second, nil},
		{"the schedule's longer wait wins", http.Header{"X-Ratelimit-Reset-Requests": {"2s"}}, "", Policy{Waits: []time.Duration{15 * time.Second}}, 15 * time.Second, nil},
		{"unreadable headers: the schedule", http.Header{"X-Ratelimit-Reset-Requests": {"soon"}, "X-Ratelimit-Reset": {"-5"}}, "", Policy{Waits: []time.Duration{4 * time.Second}}, 4 * time.Second, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The bubble's clock starts at 2000-01-01 00:00:00 UTC.
				prov := testkit.NewProvider(testkit.Reply{Status: 429, Header: c.header, Body: c.body}, testkit.OK())
				c.policy.MaxRetryAfter = 5 * time.Minute
				if c.policy.Waits == nil {
					c.policy.Waits = []time.Duration{time.Millisecond}
				}
				resp, err := post(t, mustNew(t, prov, c.policy), context.Background())
				require.NoError(t, err)
				defer resp.Body.Close()
				if c.reason != nil {
					assert.Equal(t, 1, prov.Attempts())
					require.NotNil(t, GaveUp(resp))
					assert.ErrorIs(t, GaveUp(resp).Reason, c.reason)
					return
				}
				require.Equal(t, 2, prov.Attempts())
				assert.Equal(t, c.want, prov.Gaps()[0])
				assert.Equal(t, 200, resp.StatusCode)
			})
		})
	}
}

func TestRetryAfterRaisesTheWait(t *testing.T) {
	cases := []struct {
		name string
		kv   []string
		want time.Duration
	}{
		{"seconds", []string{"Retry-After", "20"}, 20 * time.Second},
		{"ms before seconds", []string{"Retry-After-Ms", "1500", "Retry-After", "20"}, 1500 * time.Millisecond},
		{"shorter than the schedule", []string{"Retry-After", "0"}, 1 * time.Second},
		{"malformed means the schedule", []string{"Retry-After", "soon"}, 1 * time.Second},
		{"http date", []string{"Retry-After", "DATE+7"}, 7 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				for i := range c.kv {
					if c.kv[i] == "DATE+7" {
						c.kv[i] = time.Now().Add(7 * time.Second).UTC().Format(http.TimeFormat)
					}
				}
				prov := testkit.NewProvider(testkit.Fail(429, c.kv...), testkit.OK())
				resp, err := post(t, mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}}), context.Background())
				require.NoError(t, err)
				assert.Equal(t, 200, resp.StatusCode)
				assert.Equal(t, []time.Duration{c.want}, prov.Gaps())
			})
		})
	}
}

// The same hostile values through the Transport, on the fake clock: the
// wait taken is exactly the larger of the schedule's (100 ms) and a valid
// server wait; malformed means the schedule's own wait; a wait above
// MaxRetryAfter, or one that breaks the deadline/reserve rule, returns the
// response at once. Nothing ever sleeps past MaxRetryAfter or the deadline
// minus the reserve.
func TestRetryAfterHostileThroughTransport(t *testing.T) {
	const (
		sched  = 100 * time.Millisecond
		at0nce = time.Duration(-1) // the 429 is returned without a retry
	)
	const rfc850 = "Monday, 02-Jan-06 15:04:05 GMT" // RFC 9110's obsolete HTTP-date
	cases := []struct {
		name          string
		ra            []string      // Retry-After's values
		ms            string        // Retry-After-Ms
		layout        string        // if set, Retry-After is the start plus in, in this layout
		in            time.Duration // (see layout)
		maxRetryAfter time.Duration // 0: the default, 5 minutes
		deadline      time.Duration // 0: none
		want          time.Duration
	}{
		{name: "huge", ra: []string{"99999999999"}, want: at0nce},
		{name: "negative", ra: []string{"-5"}, want: sched},
		{name: "plus sign", ra: []string{"+1"}, want: sched},
		{name: "decimal 1.0", ra: []string{"1.0"}, want: sched},
		{name: "fraction 2.5", ra: []string{"2.5"}, want: sched},
		{name: "empty", ra: []string{""}, want: sched},
		{name: "comma-separated values", ra: []string{"5, 10"}, want: sched},
		{name: "two header lines", ra: []string{"5", "10"}, want: 5 * time.Second},
		{name: "garbage bytes", ra: []string{"\x00\xff\xfe"}, want: sched},
		{name: "date in the past", layout: http.TimeFormat, in: -time.Hour, want: sched},
		{name: "date in 3000", ra: []string{"Wed, 01 Jan 3000 00:00:00 GMT"}, want: at0nce},
		{name: "RFC 1123 date", layout: http.TimeFormat, in: 7 * time.Second, want: 7 * time.Second},
		{name: "RFC 850 date", layout: rfc850, in: 8 * time.Second, want: 8 * time.Second},
		{name: "ANSI C date", layout: time.ANSIC, in: 9 * time.Second, want: 9 * time.Second},
		{name: "exactly MaxRetryAfter", ra: []string{"300"}, want: 5 * time.Minute},
		{name: "just above MaxRetryAfter", ra: []string{"301"}, want: at0nce},
		{name: "date just above MaxRetryAfter", layout: rfc850, in: 301 * time.Second, want: at0nce},
		{name: "at a low MaxRetryAfter", ra: []string{"10"}, maxRetryAfter: 10 * time.Second, want: 10 * time.Second},
		{name: "ms above a low MaxRetryAfter", ms: "10000.001", maxRetryAfter: 10 * time.Second, want: at0nce},
		{name: "ms huge", ms: "1" + strings.Repeat("0", 30), want: at0nce},
		{name: "ms fraction", ms: "1234.5", want: 1234500 * time.Microsecond},
		{name: "ms NaN", ms: "NaN", want: sched},
		{name: "fits the deadline and reserve", ra: []string{"60"}, deadline: 2 * time.Minute, want: time.Minute},
		{name: "breaks the deadline and reserve", ra: []string{"61"}, deadline: 2 * time.Minute, want: at0nce},
		{name: "dated past the deadline and reserve", layout: time.ANSIC, in: 61 * time.Second, deadline: 2 * time.Minute, want: at0nce},
		{name: "huge under a deadline", ra: []string{"99999999999"}, deadline: 2 * time.Minute, want: at0nce},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := withDeadline(t, c.deadline)
				start := time.Now()
				h := http.Header{}
				if c.ra != nil {
					h["Retry-After"] = c.ra
				}
				if c.ms != "" {
					h["Retry-After-Ms"] = []string{c.ms}
				}
				if c.layout != "" {
					h["Retry-After"] = []string{start.Add(c.in).UTC().Format(c.layout)}
				}
				prov := testkit.NewProvider(testkit.Reply{Status: 429, Header: h, Body: "slow down"}, testkit.OK())
				var rec recorder
				rt := mustNew(t, prov, Policy{Waits: []time.Duration{sched}, MaxRetryAfter: c.maxRetryAfter, Reserve: time.Minute, OnAttempt: rec.on})
				resp, err := post(t, rt, ctx)
				require.NoError(t, err)
				if c.want == at0nce {
					assert.Equal(t, 429, resp.StatusCode)
					assert.Equal(t, "slow down", bodyOf(t, resp))
					assert.Equal(t, 1, prov.Attempts())
					assert.Zero(t, time.Since(start), "no wait at all")
					assert.Equal(t, []time.Duration{0}, rec.retryIns())
					return
				}
				assert.Equal(t, 200, resp.StatusCode)
				assert.Equal(t, `{"answer":42}`, bodyOf(t, resp))
				assert.Equal(t, []time.Duration{c.want}, prov.Gaps(), "the exact wait")
				assert.Equal(t, c.want, time.Since(start))
				assert.Equal(t, []time.Duration{c.want, 0}, rec.retryIns(), "the record says the real wait")
				maxRA := c.maxRetryAfter
				if maxRA == 0 {
					maxRA = defaultMaxRetryAfter
				}
				assert.LessOrEqual(t, c.want, max(sched, maxRA))
				if dl, ok := ctx.Deadline(); ok {
					assert.GreaterOrEqual(t, time.Until(dl), time.Minute, "the reserve is left")
				}
			})
		})
	}
}

// The wait the Transport takes from any server wait RetryAfter can read (a
// duration from zero to the longest, or none) never exceeds MaxRetryAfter
// nor breaks the deadline/reserve rule, with a deadline or without. What
// RetryAfter reads from headers is internal/wire's FuzzRetryAfter.
func FuzzRetryAfterPlan(f *testing.F) {
	for _, d := range []time.Duration{0, time.Second, time.Minute, 61 * time.Second, 5 * time.Minute, 301 * time.Second, wire.MaxDuration} {
		f.Add(uint64(d), true, time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC).Unix())
	}
	f.Add(uint64(0), false, int64(0))
	p := Policy{Waits: []time.Duration{time.Second}, Reserve: 10 * time.Second, MaxRetryAfter: 5 * time.Minute}.resolved()
	f.Fuzz(func(t *testing.T, server uint64, set bool, unix int64) {
		d := time.Duration(min(server, uint64(wire.MaxDuration)))
		if !set {
			d = 0
		}
		now := time.Unix(unix, 0)
		deadline := now.Add(2 * time.Minute)
		for _, hasDeadline := range []bool{true, false} {
			var lim limits
			if hasDeadline {
				lim.giveUp = deadline.Add(-p.Reserve)
			}
			wait, why := p.plan(p.scheduleWait(1, hasDeadline), coord.Pause{D: d, Set: set}, now, lim)
			if wait < 0 {
				t.Fatalf("negative wait %v", wait)
			}
			if set && d > p.MaxRetryAfter && why != stopServerWait {
				t.Fatalf("server wait %v above MaxRetryAfter not refused: %v", d, why)
			}
			if why != stopNone {
				if wait != 0 {
					t.Fatalf("no retry (%v), yet a wait of %v", why, wait)
				}
				continue
			}
			if wait > max(p.Waits[0], p.MaxRetryAfter) {
				t.Fatalf("wait %v above MaxRetryAfter", wait)
			}
			if hasDeadline && now.Add(wait).Add(p.Reserve).After(deadline) {
				t.Fatalf("wait %v breaks the deadline/reserve rule", wait)
			}
		}
	})
}

// netOpError stands in for a *net.OpError over a given errno, without a
// real socket.
type netOpError struct{ err error }

func (e *netOpError) Error() string { return "dial tcp 127.0.0.1:1: connect: " + e.err.Error() }
func (e *netOpError) Unwrap() error { return e.err }
