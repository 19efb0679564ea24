package llmretry

// Providers and transports over loopback (httptest servers, real
// sockets), for the tests that need what only a connection shows: resets,
// half-written bodies, connection reuse.

import (
	"crypto/sha256"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

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
		stallErrorBody(w, r, "application/json", c.stop)
	}
}

// stallErrorBody answers 503 with a Content-Type of ct and a body that
// promises 1000 bytes, sends a few and stalls until the request's context
// or stop ends.
func stallErrorBody(w http.ResponseWriter, r *http.Request, ct string, stop <-chan struct{}) {
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", "1000")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = io.WriteString(w, `{"error":`)
	w.(http.Flusher).Flush()
	select {
	case <-r.Context().Done():
	case <-stop:
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
