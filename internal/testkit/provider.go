package testkit

import (
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Provider is a fake model provider: it answers the i-th request with the
// i-th Reply of its script (the last one repeats forever), or with the
// Reply its function computes, and records every request as a Call.
//
// It is two things at once:
//
//   - an http.RoundTripper (RoundTrip), to be used as llmretry's base
//     transport. It never touches the network and starts no goroutine: a
//     Reply's Delay is a timer or the request's context ending, a stalled
//     body blocks on channels only, so it works inside a testing/synctest
//     bubble, where waits of minutes pass at once. Use it for anything
//     timed.
//   - an http.Handler (ServeHTTP), to be put behind an httptest.Server
//     where the real wire is wanted: each stream event is flushed, a
//     scripted error drops the connection. httptest servers cannot run
//     inside synctest bubbles.
//
// Make one with NewProvider or NewProviderFunc; the zero Provider has no
// script and panics on its first request. A Provider is safe for
// concurrent use; it owns what it records (Received returns copies).
type Provider struct {
	mu     sync.Mutex
	script []Reply
	answer func(c Call, n int) Reply // n counts from 1
	calls  []Call
}

// NewProvider returns a Provider that answers with script, in order; the
// last Reply repeats. It keeps a copy of script. It panics on an empty
// script.
func NewProvider(script ...Reply) *Provider {
	if len(script) == 0 {
		panic("testkit.NewProvider: empty script")
	}
	return &Provider{script: slices.Clone(script)}
}

// NewProviderFunc returns a Provider whose reply to the n-th request
// (counting from 1) is answer(c, n), c being what reached it: a provider
// whose answer depends on its clock or on the request itself. answer runs
// with the Provider locked, one request at a time, and must not call the
// Provider.
func NewProviderFunc(answer func(c Call, n int) Reply) *Provider {
	return &Provider{answer: answer}
}

// Call is what reached the provider in one attempt, as a value: the
// Calls that Received returns are the caller's, Header included. The zero
// Call is a request that never reached anyone.
type Call struct {
	At      time.Time
	Method  string
	Path    string // the URL path, as the provider saw it
	RawPath string // the escaped path, when it differs from Path's encoding
	Query   string // the raw query, without '?'
	Host    string // the Host header, or the URL's host when it is empty
	Header  http.Header
	Body    string

	// How the client built the request (RoundTrip only; over the wire
	// the server sees its own).
	GetBody       bool   // GetBody was set
	BodyType      string // the Go type of Body ("<nil>" for none)
	ContentLength int64
}

// Request returns a new request made from c, as a server would rebuild
// the one that reached it (an https URL on c's Host): for the functions
// that look at a request, such as llmretry.IsStream.
func (c Call) Request(t testing.TB) *http.Request {
	t.Helper()
	u := "https://" + c.Host + c.Path
	if c.Query != "" {
		u += "?" + c.Query
	}
	req, err := http.NewRequest(c.Method, u, strings.NewReader(c.Body))
	if err != nil {
		t.Fatalf("testkit: rebuilding %s %s: %v", c.Method, u, err)
	}
	req.Header = c.Header.Clone()
	return req
}

// next records the request and returns the reply for it.
func (p *Provider) next(r *http.Request) Reply {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body.Close()
	}
	c := Call{
		At:            time.Now(),
		Method:        r.Method,
		Path:          r.URL.Path,
		RawPath:       r.URL.RawPath,
		Query:         r.URL.RawQuery,
		Host:          r.Host,
		Header:        r.Header.Clone(),
		Body:          string(body),
		GetBody:       r.GetBody != nil,
		BodyType:      bodyType(r.Body),
		ContentLength: r.ContentLength,
	}
	if c.Host == "" {
		c.Host = r.URL.Host
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, c)
	if p.answer != nil {
		return p.answer(c, len(p.calls))
	}
	if len(p.script) == 0 {
		panic("testkit: a Provider without a script (make it with NewProvider or NewProviderFunc)")
	}
	return p.script[min(len(p.calls)-1, len(p.script)-1)]
}

// bodyType names the Go type of a request body, and the type of the reader
// it wraps when it is a wrapper struct (io.NopCloser's, say): what decides
// whether the body can be handed over without a copy.
func bodyType(body io.ReadCloser) string {
	name := fmt.Sprintf("%T", body)
	v := reflect.ValueOf(body)
	for v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct || v.NumField() == 0 {
		return name
	}
	if f := v.Field(0); (f.Kind() == reflect.Interface || f.Kind() == reflect.Pointer) && !f.IsNil() {
		inner := f.Type().String()
		if f.Kind() == reflect.Interface {
			inner = f.Elem().Type().String()
		}
		return name + " wrapping " + inner
	}
	return name
}

// RoundTrip answers req in memory, reading and closing its body as a
// server would: after the Reply's Delay (or with the context's error if
// req's context ends first), its Err, or its Response.
func (p *Provider) RoundTrip(req *http.Request) (*http.Response, error) {
	rep := p.next(req)
	if rep.Delay > 0 {
		t := time.NewTimer(rep.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	if rep.Err != nil {
		return nil, rep.Err
	}
	return rep.Response(req), nil
}

// ServeHTTP answers over a real connection, flushing each stream event
// (and a stalled body's bytes). A scripted error is answered by dropping
// the connection; a stalled reply stays silent until the client goes. The
// Reply's Delay is not applied.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rep := p.next(r)
	if rep.Err != nil {
		panic(http.ErrAbortHandler)
	}
	for k, v := range rep.Header {
		w.Header()[k] = append([]string(nil), v...)
	}
	w.WriteHeader(rep.Status)
	if rep.Events == nil {
		_, _ = io.WriteString(w, rep.Body)
		if rep.Stall {
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			<-r.Context().Done()
		}
		return
	}
	f, _ := w.(http.Flusher)
	for _, ev := range rep.Events {
		_, _ = io.WriteString(w, ev)
		if f != nil {
			f.Flush()
		}
	}
	if rep.Stall {
		<-r.Context().Done() // silent until the client goes
	}
}

// Attempts returns how many requests reached the provider.
func (p *Provider) Attempts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.calls)
}

// Received returns a copy of what reached the provider, in order.
func (p *Provider) Received() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	calls := slices.Clone(p.calls)
	for i := range calls {
		calls[i].Header = calls[i].Header.Clone()
	}
	return calls
}

// Bodies returns the body of every attempt, in order.
func (p *Provider) Bodies() []string {
	var bs []string
	for _, c := range p.Received() {
		bs = append(bs, c.Body)
	}
	return bs
}

// Gaps returns the time between consecutive attempts (nil for fewer than
// two). Inside a synctest bubble these are exact.
func (p *Provider) Gaps() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var g []time.Duration
	for i := 1; i < len(p.calls); i++ {
		g = append(g, p.calls[i].At.Sub(p.calls[i-1].At))
	}
	return g
}

// HeaderValues returns header k of every attempt, in order ("" where it
// was not set).
func (p *Provider) HeaderValues(k string) []string {
	var vs []string
	for _, c := range p.Received() {
		vs = append(vs, c.Header.Get(k))
	}
	return vs
}

// Hosts is a base transport of providers by host: each request goes to
// the Provider of its URL's host, in memory (a primary and its fallbacks
// under one base); a host it has not is a transport error that names it.
// It is safe for concurrent use as its Providers are; the map is the
// test's, not changed while in use.
type Hosts map[string]*Provider

// RoundTrip sends req to the Provider of its host.
func (h Hosts) RoundTrip(req *http.Request) (*http.Response, error) {
	p, found := h[req.URL.Host]
	if !found {
		return nil, fmt.Errorf("testkit: no provider at %s", req.URL.Host)
	}
	return p.RoundTrip(req)
}
