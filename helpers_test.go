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
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// gaveUp takes the answer of a call that gave up: no error, its body
// closed, and the record GaveUp finds on it.
func gaveUp(t *testing.T, resp *http.Response, err error) *Exhausted {
	t.Helper()
	require.NoError(t, err)
	resp.Body.Close()
	ex := GaveUp(resp)
	require.NotNil(t, ex, "the answer carries the record of giving up")
	return ex
}

// mustNew builds a Transport or fails the test.
func mustNew(t *testing.T, base http.RoundTripper, p Policy) *Transport {
	t.Helper()
	rt, err := New(base, p)
	require.NoError(t, err)
	return rt
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

// The record, and OnExhausted.

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

// asked records what OnExhausted was asked and answers from a script (the
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

// Close counts, and closes the Reader when it is an io.Closer (a pipe).
func (b *countingBody) Close() error {
	b.mu.Lock()
	b.closed++
	b.mu.Unlock()
	if c, ok := b.Reader.(io.Closer); ok {
		return c.Close()
	}
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

// lazyFailures is a base that answers every request (its body read to
// the end) with a 503 whose body is a lazyBody of size bytes, and keeps
// the bodies.
type lazyFailures struct {
	size   int64
	header http.Header
	mu     sync.Mutex
	bodies []*lazyBody
}

func (l *lazyFailures) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	b := &lazyBody{size: l.size}
	l.mu.Lock()
	l.bodies = append(l.bodies, b)
	l.mu.Unlock()
	return &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: l.header.Clone(), Body: b, ContentLength: l.size, Request: r}, nil
}

// all returns the bodies answered so far.
func (l *lazyFailures) all() []*lazyBody {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.bodies)
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

// Reset empties the buffer.
func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

// Request bodies.

// bigMessages returns a chat "messages" JSON array of at least size bytes,
// the bulk of a long agent conversation.
func bigMessages(size int) string {
	var b strings.Builder
	b.Grow(size + 2048)
	b.WriteString("[")
	content := strings.Repeat("lorem ipsum ", 85) // about 1 KiB
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"role":"user","content":%q}`, content)
	}
	b.WriteString("]")
	return b.String()
}

// readOnlyReader hides every method of its reader but Read (no
// io.WriterTo), like a body streamed from a file or a pipe.
type readOnlyReader struct{ r io.Reader }

func (r readOnlyReader) Read(p []byte) (int, error) { return r.r.Read(p) }

// countGetBody wraps req.GetBody and counts its calls.
func countGetBody(req *http.Request) func() int {
	var mu sync.Mutex
	n := 0
	inner := req.GetBody
	req.GetBody = func() (io.ReadCloser, error) {
		mu.Lock()
		n++
		mu.Unlock()
		return inner()
	}
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}
