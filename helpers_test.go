package llmretry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jarcoal/httpmock"
)

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

// newProvider returns a provider for any method and URL.
func newProvider(script ...step) *provider {
	p := &provider{mock: httpmock.NewMockTransport(), script: script}
	p.mock.RegisterNoResponder(p.respond)
	return p
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

// countingBody is a request body that counts its Close calls.
type countingBody struct {
	io.Reader
	mu     sync.Mutex
	closed int
}

func (b *countingBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed++
	return nil
}

func (b *countingBody) closes() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// errBody is a request body whose reads fail.
type errBody struct{}

func (errBody) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }
func (errBody) Close() error             { return nil }

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
