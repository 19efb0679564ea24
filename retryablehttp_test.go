package llmretry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sent is what a base received in one attempt, field by field.
type sent struct {
	Method           string
	URL              string
	User             *url.Userinfo
	Host             string
	Header           http.Header
	Trailer          http.Header
	Close            bool
	TransferEncoding []string
	ContentLength    int64
	HasGetBody       bool
	BodyIsNil        bool
	BodyIsNoBody     bool
	Body             string
	RequestURI       string
	Proto            string
}

// shapeBase records each attempt as it arrives and answers it from a
// script (the last reply repeats).
type shapeBase struct {
	mu      sync.Mutex
	got     []sent
	replies []func(*http.Request) *http.Response
}

func (b *shapeBase) RoundTrip(r *http.Request) (*http.Response, error) {
	s := sent{
		Method: r.Method, URL: r.URL.String(), User: r.URL.User, Host: r.Host,
		Header: r.Header.Clone(), Trailer: r.Trailer.Clone(), Close: r.Close,
		TransferEncoding: append([]string(nil), r.TransferEncoding...), ContentLength: r.ContentLength,
		HasGetBody: r.GetBody != nil, BodyIsNil: r.Body == nil, BodyIsNoBody: r.Body == http.NoBody,
		RequestURI: r.RequestURI, Proto: r.Proto,
	}
	if r.Body != nil {
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		s.Body = string(body)
	}
	b.mu.Lock()
	i := len(b.got)
	b.got = append(b.got, s)
	reply := b.replies[min(i, len(b.replies)-1)]
	b.mu.Unlock()
	return reply(r), nil
}

// answer returns a reply of status with the given headers and a body
// naming the status.
func answer(status int, kv ...string) func(*http.Request) *http.Response {
	return func(r *http.Request) *http.Response {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		body := "reply " + http.StatusText(status)
		return &http.Response{StatusCode: status, Status: http.StatusText(status), Header: h,
			Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: r}
	}
}

// bodyLedger hands out request bodies from GetBody and counts how often
// each one is closed.
type bodyLedger struct {
	mu     sync.Mutex
	data   string
	bodies []*countingBody
}

func (l *bodyLedger) getBody() (io.ReadCloser, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := &countingBody{Reader: strings.NewReader(l.data)}
	l.bodies = append(l.bodies, b)
	return b, nil
}

// closes returns how often each body GetBody returned was closed.
func (l *bodyLedger) closes() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n []int
	for _, b := range l.bodies {
		n = append(n, b.closes())
	}
	return n
}

// Whatever the request's shape and whatever the provider answers next, the
// base receives on attempt 2 exactly what it received on attempt 1 — no
// Basic auth made from URL user information, no header, length or body
// of another request — and a reply the first attempt would return as it
// is (a redirect with a good, missing or unparsable Location) comes back
// as it is from a retry. Every body GetBody hands out is closed exactly
// once, and none is asked for but the stream check's and the retry's.
func TestRetryIsTheFirstAttemptAgain(t *testing.T) {
	const payload = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	type shape struct {
		name  string
		build func(t *testing.T, l *bodyLedger) *http.Request
	}
	post := func(t *testing.T, l *bodyLedger, rawURL string) *http.Request {
		req, err := http.NewRequest(http.MethodPost, rawURL, strings.NewReader(payload))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.GetBody = l.getBody
		return req
	}
	shapes := []shape{
		{"plain POST with GetBody", func(t *testing.T, l *bodyLedger) *http.Request { return post(t, l, testURL) }},
		{"URL user information, no Authorization", func(t *testing.T, l *bodyLedger) *http.Request {
			return post(t, l, "https://user:pw@api.example.test/v1/chat/completions")
		}},
		{"URL user information and an Authorization of its own", func(t *testing.T, l *bodyLedger) *http.Request {
			req := post(t, l, "https://user:pw@api.example.test/v1/chat/completions")
			req.Header.Set("Authorization", "Bearer sk-own")
			return req
		}},
		{"Host override", func(t *testing.T, l *bodyLedger) *http.Request {
			req := post(t, l, testURL)
			req.Host = "override.example.test"
			return req
		}},
		{"Close", func(t *testing.T, l *bodyLedger) *http.Request {
			req := post(t, l, testURL)
			req.Close = true
			return req
		}},
		{"TransferEncoding chunked, ContentLength -1", func(t *testing.T, l *bodyLedger) *http.Request {
			req := post(t, l, testURL)
			req.TransferEncoding = []string{"chunked"}
			req.ContentLength = -1
			return req
		}},
		{"trailers", func(t *testing.T, l *bodyLedger) *http.Request {
			req := post(t, l, testURL)
			req.Trailer = http.Header{"X-Checksum": {"abc"}}
			return req
		}},
		{"ContentLength 0 with a body", func(t *testing.T, l *bodyLedger) *http.Request {
			req := post(t, l, testURL)
			req.ContentLength = 0
			return req
		}},
		{"http.NoBody", func(t *testing.T, l *bodyLedger) *http.Request {
			req, err := http.NewRequest(http.MethodPost, testURL, http.NoBody)
			require.NoError(t, err)
			return req
		}},
		{"GET without a body", func(t *testing.T, l *bodyLedger) *http.Request {
			req, err := http.NewRequest(http.MethodGet, testURL+"?alt=json", nil)
			require.NoError(t, err)
			return req
		}},
		{"a body without GetBody (one in-memory copy)", func(t *testing.T, l *bodyLedger) *http.Request {
			req, err := http.NewRequest(http.MethodPost, testURL, io.NopCloser(strings.NewReader(payload)))
			require.NoError(t, err)
			req.ContentLength = int64(len(payload))
			return req
		}},
		{"a server request passed on (RequestURI set)", func(t *testing.T, l *bodyLedger) *http.Request {
			req := post(t, l, testURL)
			req.RequestURI = "/v1/chat/completions"
			return req
		}},
	}
	seconds := []struct {
		name   string
		reply  func(*http.Request) *http.Response
		status int
	}{
		{"200", answer(200), 200},
		{"301 to a good Location", answer(301, "Location", "https://elsewhere.test/v1"), 301},
		{"302 to a good Location", answer(302, "Location", "/v2/chat"), 302},
		{"303 to a good Location", answer(303, "Location", "https://elsewhere.test/v1"), 303},
		{"307 to a good Location", answer(307, "Location", "https://elsewhere.test/v1"), 307},
		{"308 to a good Location", answer(308, "Location", "https://elsewhere.test/v1"), 308},
		{"302 without a Location", answer(302), 302},
		{"307 without a Location", answer(307), 307},
		{"302 with an unparsable Location", answer(302, "Location", "http://[::1"), 302},
		{"308 with an unparsable Location", answer(308, "Location", "ht\ttp://x"), 308},
		{"400", answer(400), 400},
	}
	for _, sh := range shapes {
		for _, second := range seconds {
			t.Run(sh.name+"/then "+second.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ledger := &bodyLedger{data: payload}
					req := sh.build(t, ledger)
					base := &shapeBase{replies: []func(*http.Request) *http.Response{answer(503), second.reply}}
					rt := mustNew(t, base, Policy{Waits: []time.Duration{time.Second}})
					resp, err := rt.RoundTrip(req)
					require.NoError(t, err)
					assert.Equal(t, second.status, resp.StatusCode, "the reply comes back as it is")
					assert.Equal(t, "reply "+http.StatusText(second.status), bodyOf(t, resp))
					if loc := second.reply(req).Header.Get("Location"); loc != "" {
						assert.Equal(t, loc, resp.Header.Get("Location"))
					}
					require.Len(t, base.got, 2, "no third request, no redirect followed")
					assert.Equal(t, base.got[0], base.got[1], "attempt 2 is attempt 1")
					_, hadAuth := req.Header["Authorization"]
					if _, got := base.got[1].Header["Authorization"]; !hadAuth {
						assert.False(t, got, "no Authorization the caller did not send")
					}
					for i, n := range ledger.closes() {
						assert.Equal(t, 1, n, "body %d from GetBody closed once", i)
					}
					assert.LessOrEqual(t, len(ledger.closes()), 2, "GetBody called for the stream check and the one retry only")
				})
			})
		}
	}
}

// A retried request reaches the base through the same http.RoundTripper
// path as the first: no *url.Error wrapping (the inner http.Client's) on
// a retry's error, so the caller sees the base's own error.
func TestRetryErrorsAreTheBasesOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(503), testkit.Refused())
		_, err := post(t, mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}}), context.Background())
		var ex *Exhausted
		require.ErrorAs(t, err, &ex)
		var op *net.OpError
		require.ErrorAs(t, err, &op)
		var ue *url.Error
		assert.False(t, errors.As(ex.Err, &ue), "not wrapped by an inner http.Client: %v", ex.Err)
	})
}

// The first attempt's body and every retry's come from the same source: a
// body without GetBody is copied once and replayed byte for byte.
func TestBodyWithoutGetBodyReplaysTheCopy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		body := bytes.Repeat([]byte("0123456789abcdef"), 1<<12)
		base := &shapeBase{replies: []func(*http.Request) *http.Response{answer(503), answer(503), answer(200)}}
		req, err := http.NewRequest(http.MethodPost, testURL, io.NopCloser(bytes.NewReader(body)))
		require.NoError(t, err)
		req.ContentLength = int64(len(body))
		resp, err := mustNew(t, base, Policy{Waits: []time.Duration{time.Second, time.Second}}).RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Len(t, base.got, 3)
		for i, g := range base.got {
			assert.Equal(t, string(body), g.Body, "attempt %d", i+1)
			assert.True(t, g.HasGetBody, "attempt %d has the copy's GetBody", i+1)
		}
		assert.Equal(t, base.got[0], base.got[2])
	})
}

// idleCounter counts CloseIdleConnections calls.
type idleCounter struct {
	http.RoundTripper
	calls int
}

func (c *idleCounter) CloseIdleConnections() { c.calls++ }

// go-retryablehttp calls CloseIdleConnections on failures; that must not
// reach a shared base transport. The Transport's own method forwards.
func TestFailuresDoNotCloseIdleConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(503), testkit.Refused(), testkit.Fail(400))
		base := &idleCounter{RoundTripper: prov}
		rt := mustNew(t, base, Policy{Waits: []time.Duration{time.Second, time.Second}})
		_, err := post(t, rt, context.Background())
		require.NoError(t, err)
		assert.Equal(t, 3, prov.Attempts())
		assert.Zero(t, base.calls)
		rt.CloseIdleConnections()
		assert.Equal(t, 1, base.calls)
	})
}

// go-retryablehttp calls CloseIdleConnections on its client when a call
// gives up or is cancelled; that must never reach a shared http.Transport.
// A second client keeps its idle connection through every way a retried
// call can end.
func TestOtherClientsKeepTheirIdleConnections(t *testing.T) {
	shared := loopbackBase(t, 4)

	// Client B: its own provider, and one idle connection in the pool.
	hook, newConnsB := newConnCounter()
	provB := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "b")
	}))
	provB.Config.ConnState = hook
	provB.Start()
	t.Cleanup(provB.Close)
	clientB := &http.Client{Transport: shared}
	getB := func() {
		t.Helper()
		resp, err := clientB.Get(provB.URL)
		require.NoError(t, err)
		assert.Equal(t, "b", bodyOf(t, resp))
	}
	getB()
	require.Equal(t, 1, newConnsB())

	// Client A: llmretry over the same http.Transport, against a
	// provider that fails in every way that ends a call.
	provA := newChaosProvider(t, func(int) fault { return fault503 })
	send := func(p Policy, ctx context.Context, f fault) {
		t.Helper()
		provA.mu.Lock()
		provA.plan = func(int) fault { return f }
		provA.mu.Unlock()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, provA.srv.URL, strings.NewReader(`{}`))
		require.NoError(t, err)
		resp, err := mustNew(t, shared, p).RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
	}
	waits := Policy{Waits: []time.Duration{time.Millisecond, time.Millisecond}}
	send(waits, context.Background(), fault503)   // retries spent: a final 503
	send(waits, context.Background(), faultReset) // retries spent: an error
	send(waits, context.Background(), fault400)   // final status
	ctx, cancel := context.WithCancel(context.Background())
	send(Policy{Waits: []time.Duration{time.Hour}, OnAttempt: func(Attempt) { cancel() }}, ctx, fault503) // cancelled during the wait
	dl, cancelDL := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelDL()
	send(Policy{Waits: []time.Duration{time.Minute}, Reserve: time.Minute}, dl, fault503) // no time left before the deadline

	getB()
	assert.Equal(t, 1, newConnsB(), "client B reused its idle connection: nobody closed it")
}

// Behind httputil.ReverseProxy (an LLM gateway) the outgoing request is a
// clone of the incoming server request, RequestURI included: the retries
// must still be sent, with the whole body, and the answer reach the client.
func TestBehindReverseProxy(t *testing.T) {
	prov := newHashingProvider(t, []byte(`{"answer":42}`), nil)
	target, err := url.Parse(prov.srv.URL)
	require.NoError(t, err)
	base := loopbackBase(t, 2)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = mustNew(t, base, Policy{Waits: []time.Duration{time.Millisecond}})
	rp.ErrorLog = log.New(io.Discard, "", 0)
	gateway := httptest.NewServer(rp)
	t.Cleanup(gateway.Close)

	body := uniqueBytes(256<<10, 3)
	req, err := http.NewRequest(http.MethodPost, gateway.URL+"/v1/chat/completions?key=k", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-Req-ID", "via-gateway")
	client := &http.Client{Transport: loopbackBase(t, 1)}
	resp, err := client.Do(req)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, `{"answer":42}`, bodyOf(t, resp))
	sums := prov.sums()
	require.Len(t, sums, 2, "a 503, then the answer")
	for i, s := range sums {
		assert.Equal(t, sha256.Sum256(body), s.sum, "attempt %d carried the whole body", i+1)
	}
}
