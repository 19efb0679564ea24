package llmretry

// Helpers shared by the package's tests.
//
// The fake provider is provider: in memory, it answers each attempt with
// the next step of its script and records when each attempt arrived and
// what it carried; under testing/synctest its waits take no real time.
// What only a real connection shows (resets, cut headers, stalls,
// connection reuse, bodies hashed as they arrive) is tested over loopback,
// against chaosProvider and hashingProvider, on the real clock with waits
// of a few ms. A test with replies of its own builds its base from a
// function (roundTripFunc), or from a small type beside it when it
// records something of its own.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jarcoal/httpmock"
	"github.com/llmretry/llmretry/internal/coord"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testURL is where the tests' requests go: no provider's address.
const testURL = "https://api.example.test/v1/chat/completions"

// post sends a JSON POST through rt with ctx.
func post(t *testing.T, rt http.RoundTripper, ctx context.Context) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, testURL, strings.NewReader(`{"model":"m"}`))
	require.NoError(t, err)
	return rt.RoundTrip(req)
}

// mustNew builds a Transport or fails the test.
func mustNew(t *testing.T, base http.RoundTripper, p Policy) *Transport {
	t.Helper()
	rt, err := New(base, p)
	require.NoError(t, err)
	return rt
}

// coordOf returns the engine (coord.Coordinator) of rt, a Transport made by
// NewCoordinated.
func coordOf(rt *Transport) *coord.Coordinator { return rt.keepers.(coordinated).co }

// onlyKey returns the stats of the one key rt's coordinator knows.
func onlyKey(t *testing.T, rt *Transport) coord.KeyStats {
	t.Helper()
	st := coordOf(rt).Stats(time.Now())
	require.Len(t, st, 1)
	for _, k := range st {
		return k
	}
	return coord.KeyStats{}
}

// bodyOf reads and closes resp's body.
func bodyOf(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return string(b)
}

// withDeadline returns a context that ends d from now, or the background
// context for a zero d; it is canceled when the test ends.
func withDeadline(t testing.TB, d time.Duration) context.Context {
	if d <= 0 {
		return context.Background()
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// streamRequest returns a POST of the JSON body to url as the Stainless
// SDKs build it: with GetBody, and Accept: application/json.
func streamRequest(t *testing.T, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json") // what the Stainless SDKs send, streaming or not
	return req
}

// roundTripFunc adapts a function to an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The in-memory provider.

// step is one scripted reply of the fake provider: an error, or a status
// with headers and a body.
type step struct {
	status int
	header http.Header
	body   string
	err    error
}

// fail returns a step that answers status with a body naming it.
func fail(status int, kv ...string) step {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return step{status: status, header: h, body: "error " + strconv.Itoa(status)}
}

// ok is the provider's answer.
var ok = step{status: 200, body: `{"answer":42}`}

// refused is a failed connection.
var refused = step{err: &netOpError{syscall.ECONNREFUSED}}

// netOpError stands in for *net.OpError without a real socket.
type netOpError struct{ err error }

func (e *netOpError) Error() string { return "dial tcp 127.0.0.1:1: connect: " + e.err.Error() }
func (e *netOpError) Unwrap() error { return e.err }

// provider is an in-memory model provider built on httpmock: it answers
// each request with the next step of its script (the last step repeats)
// and records when each attempt arrived and what body it carried.
type provider struct {
	mock *httpmock.MockTransport

	mu     sync.Mutex
	script []step
	times  []time.Time
	bodies []string
	reqs   []*http.Request
}

// respond is the httpmock responder.
func (p *provider) respond(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
	}
	p.mu.Lock()
	i := len(p.times)
	p.times = append(p.times, time.Now())
	p.bodies = append(p.bodies, string(body))
	p.reqs = append(p.reqs, req)
	s := p.script[min(i, len(p.script)-1)]
	p.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	resp := httpmock.NewStringResponse(s.status, s.body)
	for k, v := range s.header {
		resp.Header[k] = append([]string(nil), v...)
	}
	resp.Request = req
	return resp, nil
}

// attempts returns how many requests reached the provider.
func (p *provider) attempts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.times)
}

// gaps returns the time between consecutive attempts.
func (p *provider) gaps() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var g []time.Duration
	for i := 1; i < len(p.times); i++ {
		g = append(g, p.times[i].Sub(p.times[i-1]))
	}
	return g
}

// newProvider returns a provider for any method and URL.
func newProvider(script ...step) *provider {
	p := &provider{mock: httpmock.NewMockTransport(), script: script}
	p.mock.RegisterNoResponder(p.respond)
	return p
}

// Other in-memory bases.

// failOnceBase answers each request (told apart by X-Req-ID) with a 503 on
// its first attempt and with its own ID on the second, in memory. It
// samples the number of goroutines at every attempt.
type failOnceBase struct {
	seen     sync.Map // X-Req-ID → *atomic.Int32
	attempts atomic.Int64
	peak     atomic.Int64
}

func (b *failOnceBase) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	b.attempts.Add(1)
	for g := int64(runtime.NumGoroutine()); ; {
		p := b.peak.Load()
		if g <= p || b.peak.CompareAndSwap(p, g) {
			break
		}
	}
	id := r.Header.Get("X-Req-ID")
	v, _ := b.seen.LoadOrStore(id, new(atomic.Int32))
	resp := &http.Response{Header: http.Header{}, Request: r}
	if v.(*atomic.Int32).Add(1) == 1 {
		resp.StatusCode, resp.Status = 503, "503 Service Unavailable"
		resp.Body = io.NopCloser(strings.NewReader(`{"error":{"message":"overloaded"}}`))
	} else {
		resp.StatusCode, resp.Status = 200, "200 OK"
		resp.Body = io.NopCloser(strings.NewReader(id))
	}
	return resp, nil
}

// silentThen is a base whose first `silent` attempts accept the request
// and never answer (until their context ends); later attempts answer 200.
// It records each attempt's start and whether its context was canceled.
type silentThen struct {
	silent int

	mu       sync.Mutex
	starts   []time.Time
	canceled []bool
}

func (s *silentThen) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		req.Body.Close()
	}
	s.mu.Lock()
	i := len(s.starts)
	s.starts = append(s.starts, time.Now())
	s.canceled = append(s.canceled, false)
	s.mu.Unlock()
	if i < s.silent {
		<-req.Context().Done()
		s.mu.Lock()
		s.canceled[i] = true
		s.mu.Unlock()
		return nil, req.Context().Err()
	}
	go func() {
		<-req.Context().Done()
		s.mu.Lock()
		s.canceled[i] = true
		s.mu.Unlock()
	}()
	return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{"answer":42}`)), Request: req}, nil
}

func (s *silentThen) attempts() (starts []time.Time, canceled []bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.starts...), append([]bool(nil), s.canceled...)
}

// sseResponse is a 200 text/event-stream response with body.
func sseResponse(r *http.Request, body io.ReadCloser) *http.Response {
	h := http.Header{}
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	return &http.Response{StatusCode: 200, Status: "200 OK", Header: h, Body: body, Request: r}
}

// The record, and the Asker.

// recorder collects the record.
type recorder struct {
	mu       sync.Mutex
	attempts []Attempt
}

// on is a Policy.OnAttempt.
func (r *recorder) on(a Attempt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts = append(r.attempts, a)
}

// retryIns returns each recorded attempt's RetryIn.
func (r *recorder) retryIns() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var d []time.Duration
	for _, a := range r.attempts {
		d = append(d, a.RetryIn)
	}
	return d
}

// last returns the last recorded attempt.
func (r *recorder) last() Attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.attempts) == 0 {
		return Attempt{}
	}
	return r.attempts[len(r.attempts)-1]
}

// count returns the number of recorded attempts.
func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.attempts)
}

// assertFinalIsLastAttempt checks that what RoundTrip returned is exactly
// what the last attempt produced: the same *http.Response, or an
// *Exhausted wrapping the same error.
func assertFinalIsLastAttempt(t *testing.T, rec *recorder, resp *http.Response, err error) {
	t.Helper()
	last := rec.last()
	if last.Err != nil {
		assert.Nil(t, resp, "an error, never a response and an error")
		var ex *Exhausted
		if assert.ErrorAs(t, err, &ex) {
			assert.True(t, ex.Err == last.Err, "the Exhausted error wraps the last attempt's own error: %v vs %v", ex.Err, last.Err)
			assert.Equal(t, last.N, ex.Attempts)
		}
		return
	}
	assert.NoError(t, err)
	assert.Same(t, last.Response, resp, "the last attempt's own response")
}

// asked records what an Asker was asked and answers from a script (the
// last answer repeats).
type asked struct {
	mu      sync.Mutex
	answers []bool
	got     []Exhausted // copies of what was asked
	at      []time.Time
}

func (a *asked) Ask(_ context.Context, e *Exhausted) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, *e)
	a.at = append(a.at, time.Now())
	return a.answers[min(len(a.got)-1, len(a.answers)-1)]
}

func (a *asked) questions() []Exhausted {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Exhausted(nil), a.got...)
}

// Bodies.

// countingBody is a body, a request's or a response's, that counts its
// Read calls, the bytes read from it and its Close calls. It has only Read
// and Close (no io.WriterTo), so a request body of it without GetBody is a
// stream the Transport can read only once.
type countingBody struct {
	io.Reader

	mu     sync.Mutex
	reads  int
	n      int64
	closed int
}

func (b *countingBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	b.reads++
	b.mu.Unlock()
	n, err := b.Reader.Read(p)
	b.mu.Lock()
	b.n += int64(n)
	b.mu.Unlock()
	return n, err
}

func (b *countingBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed++
	return nil
}

// closes returns the number of Close calls.
func (b *countingBody) closes() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// stats returns the bytes read and the number of closes.
func (b *countingBody) stats() (int64, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n, b.closed
}

// counts returns the number of Read calls and of closes.
func (b *countingBody) counts() (reads, closes int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reads, b.closed
}

// errBody is a request body whose reads fail.
type errBody struct{}

func (errBody) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }
func (errBody) Close() error             { return nil }

// stallBody is a response body that delivers prefix, then blocks until it
// is closed: a reply whose body starts and then stalls.
type stallBody struct {
	prefix string
	mu     sync.Mutex
	off    int
	closed chan struct{}
	once   sync.Once
}

func (b *stallBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.off < len(b.prefix) {
		n := copy(p, b.prefix[b.off:])
		b.off += n
		b.mu.Unlock()
		return n, nil
	}
	b.mu.Unlock()
	<-b.closed
	return 0, errors.New("stallBody: closed")
}

func (b *stallBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

func newStallBody(prefix string) *stallBody {
	return &stallBody{prefix: prefix, closed: make(chan struct{})}
}

// lazyBody is a response body of size bytes that are generated as they are
// read, never held: a 1 GiB body costs nothing until someone reads it. It
// counts what was read and how often it was closed.
type lazyBody struct {
	size int64

	mu     sync.Mutex
	off    int64
	closed int
}

func (b *lazyBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed > 0 {
		return 0, errors.New("lazyBody: read after close")
	}
	if b.off >= b.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), b.size-b.off))
	fillPattern(p[:n], b.off)
	b.off += int64(n)
	return n, nil
}

func (b *lazyBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed++
	return nil
}

// read returns how many bytes were read and how many times it was closed.
func (b *lazyBody) read() (int64, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.off, b.closed
}

// patternByte is byte i of every generated body: a sequence with a prime
// period, so a byte read from the wrong offset shows.
func patternByte(i int64) byte { return byte(i % 251) }

// patternBlock is the pattern from offset 0, long enough to fill reads by
// copying instead of byte by byte (which the race detector would make slow).
var patternBlock = func() []byte {
	b := make([]byte, 251*256)
	for i := range b {
		b[i] = patternByte(int64(i))
	}
	return b
}()

// fillPattern writes the pattern for offsets off … off+len(p)-1 into p.
func fillPattern(p []byte, off int64) {
	for len(p) > 0 {
		n := copy(p, patternBlock[off%251:])
		p = p[n:]
		off += int64(n)
	}
}

// uniqueBytes returns n bytes in which every 4 KiB block is different (a
// random 64 KiB block repeated, each 4 KiB stamped with its offset), so a
// lost, repeated or reordered chunk changes the body's hash.
func uniqueBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	block := make([]byte, 64<<10)
	r := rand.New(rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}))
	for i := range block {
		block[i] = byte(r.Uint32())
	}
	for off := 0; off < n; {
		off += copy(b[off:], block)
	}
	for off := 0; off+8 <= n; off += 4 << 10 {
		binary.BigEndian.PutUint64(b[off:], uint64(off))
	}
	return b
}

// discardReadBound is the most the Transport may read of a response body
// it discards: the provider-signal peek (signalPeek) and go-retryablehttp's
// drain (4 KiB) read the same first bytes, so the larger of the two bounds
// what is read from the wire.
const discardReadBound = max(signalPeek, 4<<10)

// reqSnapshot is what a caller can see of its *http.Request; RoundTrip must
// leave all of it as it was.
type reqSnapshot struct {
	method        string
	url           string
	urlPtr        *url.URL
	header        http.Header
	body          io.ReadCloser
	getBody       uintptr // the function's code pointer; 0 for nil
	contentLength int64
	host          string
	ctx           context.Context
	close         bool
	trailer       http.Header
	te            []string
}

// snapshot records req's visible state.
func snapshot(req *http.Request) reqSnapshot {
	s := reqSnapshot{
		method:        req.Method,
		url:           req.URL.String(),
		urlPtr:        req.URL,
		header:        req.Header.Clone(),
		body:          req.Body,
		contentLength: req.ContentLength,
		host:          req.Host,
		ctx:           req.Context(),
		close:         req.Close,
		trailer:       req.Trailer.Clone(),
		te:            append([]string(nil), req.TransferEncoding...),
	}
	if req.GetBody != nil {
		s.getBody = reflect.ValueOf(req.GetBody).Pointer()
	}
	return s
}

// assertUnchanged checks that req looks as it did when before was taken.
func assertUnchanged(t *testing.T, before reqSnapshot, req *http.Request) {
	t.Helper()
	after := snapshot(req)
	assert.Equal(t, before.method, after.method, "method")
	assert.Equal(t, before.url, after.url, "URL")
	assert.Same(t, before.urlPtr, after.urlPtr, "URL pointer")
	assert.Equal(t, before.header, after.header, "headers")
	assert.True(t, before.body == after.body, "body")
	assert.Equal(t, before.getBody, after.getBody, "GetBody")
	assert.Equal(t, before.contentLength, after.contentLength, "ContentLength")
	assert.Equal(t, before.host, after.host, "Host")
	assert.True(t, before.ctx == after.ctx, "context")
	assert.Equal(t, before.close, after.close, "Close")
	assert.Equal(t, before.trailer, after.trailer, "Trailer")
	assert.Equal(t, before.te, after.te, "TransferEncoding")
}

// Over loopback.

// loopbackBase returns an http.Transport for tests against httptest
// servers, whose idle connections are closed when the test ends (so no
// goroutine outlives it).
func loopbackBase(t *testing.T, maxIdlePerHost int) *http.Transport {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: maxIdlePerHost, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// newConnCounter returns a ConnState hook that counts new connections, and
// a function that reads the count.
func newConnCounter() (func(net.Conn, http.ConnState), func() int) {
	var mu sync.Mutex
	n := 0
	hook := func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			n++
			mu.Unlock()
		}
	}
	return hook, func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// chaosProvider is a model provider on loopback, a real HTTP server that
// fails the way providers and the networks in front of them fail: it
// applies plan to each attempt it receives (numbered from 0 across the
// server; see fault), after reading the whole request body. Tests against
// it run on the real clock, with waits of a few ms (chaosWaits).
type chaosProvider struct {
	srv  *httptest.Server
	stop chan struct{} // closed at cleanup: stalled handlers return

	mu   sync.Mutex
	plan func(n int) fault
	log  []hit
}

func (c *chaosProvider) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	c.mu.Lock()
	f := c.plan(len(c.log))
	c.log = append(c.log, hit{req: r.Header.Get(chaosReqHeader), fault: f})
	c.mu.Unlock()

	switch f {
	case faultOK:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, chaosOKBody)
	case fault503:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, chaos503Body)
	case fault400:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, chaos400Body)
	case faultReset:
		if conn := hijack(w); conn != nil {
			if tcp, ok := conn.(*net.TCPConn); ok {
				_ = tcp.SetLinger(0) // close sends RST, not FIN
			}
			_ = conn.Close()
		}
	case faultPartialHeaders:
		if conn := hijack(w); conn != nil {
			_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: applic")
			_ = conn.Close()
		}
	case faultTruncated, fault503Truncated:
		status := http.StatusOK
		if f == fault503Truncated {
			status = http.StatusServiceUnavailable
		}
		// net/http closes the connection when the handler writes less
		// than the Content-Length it declared.
		w.Header().Set("Content-Length", strconv.Itoa(len(chaosOKBody)))
		w.WriteHeader(status)
		_, _ = io.WriteString(w, chaosOKBody[:len(chaosOKBody)/2])
	case faultStall:
		// The client gives up (ResponseHeaderTimeout) and closes the
		// connection, which ends the request's context.
		select {
		case <-r.Context().Done():
		case <-c.stop:
		}
	case fault503StallBody:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":`)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-c.stop:
		}
	}
}

// faultsOf returns the faults the provider applied to request id, in order.
func (c *chaosProvider) faultsOf(id string) []fault {
	c.mu.Lock()
	defer c.mu.Unlock()
	var fs []fault
	for _, h := range c.log {
		if h.req == id {
			fs = append(fs, h.fault)
		}
	}
	return fs
}

// newChaosProvider starts a chaos provider that the test closes on cleanup.
func newChaosProvider(t *testing.T, plan func(n int) fault) *chaosProvider {
	t.Helper()
	c := &chaosProvider{stop: make(chan struct{}), plan: plan}
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(func() {
		close(c.stop)
		c.srv.Close()
	})
	return c
}

// hit is one attempt as the chaos provider saw it.
type hit struct {
	req   string
	fault fault
}

// fault is what the chaos provider does with one request.
type fault int

func (f fault) String() string {
	return [...]string{"ok", "503", "400", "reset", "partial-headers", "truncated", "503-truncated", "stall", "503-stall-body"}[f]
}

// retryable says whether the Transport must send the request again after f.
func (f fault) retryable() bool {
	switch f {
	case fault503, fault503Truncated, faultReset, faultPartialHeaders, faultStall:
		return true
	}
	return false
}

const (
	faultOK             fault = iota // 200 with the whole body
	fault503                         // 503 with a short JSON error body
	fault400                         // 400: the request is wrong, never retried
	faultReset                       // the connection is reset (RST) before any header
	faultPartialHeaders              // part of the headers, then the connection closes
	faultTruncated                   // 200 whose Content-Length promises more than is sent
	fault503Truncated                // 503 whose Content-Length promises more than is sent
	faultStall                       // no header until the client gives up
	fault503StallBody                // 503 headers and a few bytes, then nothing until the client gives up
)

// script returns a plan that follows faults, repeating the last one.
func script(faults ...fault) func(int) fault {
	return func(n int) fault { return faults[min(n, len(faults)-1)] }
}

// hijack takes over the connection, or returns nil.
func hijack(w http.ResponseWriter) net.Conn {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return nil
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return nil
	}
	return conn
}

// chaosOKBody is the provider's answer: longer than a socket read, so that
// reading it in full means something.
var chaosOKBody = `{"answer":42,"padding":"` + strings.Repeat("0123456789abcdef", 1024) + `"}`

const (
	chaos503Body = `{"error":{"message":"overloaded"}}`
	chaos400Body = `{"error":{"message":"bad request"}}`
	// chaosReqHeader names each logical request, so the provider's log can
	// be split by request.
	chaosReqHeader = "X-Chaos-Req"
	// chaosHeaderTimeout is how long the client waits for headers
	// (http.Transport.ResponseHeaderTimeout): the length of a stall.
	chaosHeaderTimeout = 100 * time.Millisecond
)

// chaosBase is the http.Transport under the Transport in chaos tests: a
// short ResponseHeaderTimeout bounds each stall.
func chaosBase(t *testing.T) *http.Transport {
	tr := loopbackBase(t, 4)
	tr.ResponseHeaderTimeout = chaosHeaderTimeout
	return tr
}

// chaosWaits is the schedule of the chaos tests: 3 retries, 4 attempts.
var chaosWaits = []time.Duration{2 * time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond}

// hashingProvider answers 503 to each request's first attempt and then
// 200 with answer, and records the length and SHA-256 of every request body
// it receives. Requests are told apart by their X-Req-ID header.
type hashingProvider struct {
	srv    *httptest.Server
	answer []byte

	mu     sync.Mutex
	seen   map[string]int
	bodies []bodySum
}

func (p *hashingProvider) sums() []bodySum {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]bodySum(nil), p.bodies...)
}

type bodySum struct {
	n   int64
	sum [32]byte
}

// newHashingProvider starts one; connState, if not nil, is its server's
// ConnState hook.
func newHashingProvider(t *testing.T, answer []byte, connState func(net.Conn, http.ConnState)) *hashingProvider {
	t.Helper()
	p := &hashingProvider{answer: answer, seen: map[string]int{}}
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var s bodySum
		s.n = n
		h.Sum(s.sum[:0])
		p.mu.Lock()
		p.bodies = append(p.bodies, s)
		id := r.Header.Get("X-Req-ID")
		p.seen[id]++
		first := p.seen[id] == 1
		p.mu.Unlock()
		if first {
			http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write(p.answer)
	}))
	p.srv.Config.ConnState = connState
	p.srv.Start()
	t.Cleanup(p.srv.Close)
	return p
}

// Timing and logs.

// onCI reports whether the tests run under CI (CI=true), where timing
// bounds are looser: the machine is shared and slower.
func onCI() bool { return os.Getenv("CI") != "" }

// timeBound returns local, or ci when running under CI.
func timeBound(local, ci time.Duration) time.Duration {
	if onCI() {
		return ci
	}
	return local
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
