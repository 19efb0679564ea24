package llmretry

// A chaos provider on loopback: a real HTTP server that fails the way
// providers and the networks in front of them fail, and tests that under
// each fault the Transport retries what is retryable, returns what is not,
// and that what the caller gets is exactly what the last attempt produced.
// These run on the real clock (outside synctest) with waits of a few ms.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fault is what the chaos provider does with one request.
type fault int

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

// hit is one attempt as the chaos provider saw it.
type hit struct {
	req   string
	fault fault
}

// chaosProvider is an httptest server that applies plan to each attempt it
// receives (numbered from 0 across the server), after reading the whole
// request body.
type chaosProvider struct {
	srv  *httptest.Server
	stop chan struct{} // closed at cleanup: stalled handlers return

	mu   sync.Mutex
	plan func(n int) fault
	log  []hit
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

// script returns a plan that follows faults, repeating the last one.
func script(faults ...fault) func(int) fault {
	return func(n int) fault { return faults[min(n, len(faults)-1)] }
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

// chaosBase is the http.Transport under the Transport in chaos tests: a
// short ResponseHeaderTimeout bounds each stall.
func chaosBase(t *testing.T) *http.Transport {
	tr := loopbackBase(t, 4)
	tr.ResponseHeaderTimeout = chaosHeaderTimeout
	return tr
}

// chaosWaits is the schedule of the chaos tests: 3 retries, 4 attempts.
var chaosWaits = []time.Duration{2 * time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond}

// chaosSend sends request id through a fresh Transport over base, with its
// own record.
func chaosSend(t *testing.T, base http.RoundTripper, url, id string) (*recorder, *http.Response, error) {
	t.Helper()
	rec := &recorder{}
	rt := mustNew(t, base, Policy{Waits: chaosWaits, OnAttempt: rec.on})
	req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(chaosReqHeader, id)
	resp, err := rt.RoundTrip(req)
	return rec, resp, err
}

// checkChaosOutcome checks one request against what the provider did to
// it: every attempt but the last met a retryable fault, the last met a
// final one or was the last the schedule allows, and the caller got
// exactly the last attempt's result, with a body that reads as the provider
// sent it.
func checkChaosOutcome(t *testing.T, faults []fault, rec *recorder, resp *http.Response, err error) {
	t.Helper()
	maxAttempts := len(chaosWaits) + 1
	require.NotEmpty(t, faults, "the provider saw the request")
	require.LessOrEqual(t, len(faults), maxAttempts)
	for i, f := range faults[:len(faults)-1] {
		assert.True(t, f.retryable(), "attempt %d met %v and was retried", i+1, f)
	}
	last := faults[len(faults)-1]
	if len(faults) < maxAttempts {
		assert.False(t, last.retryable(), "the last attempt met %v: retries remained, so it was final", last)
	}
	require.Equal(t, len(faults), rec.count(), "one record per attempt the provider saw")
	assertFinalIsLastAttempt(t, rec, resp, err)

	switch last {
	case faultOK:
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, chaosOKBody, bodyOf(t, resp), "the whole answer")
	case faultTruncated, fault503Truncated:
		// The headers arrived: a response, not an error. The truncation
		// shows when the caller reads, as with a bare http.Transport.
		require.NoError(t, err)
		want := http.StatusOK
		if last == fault503Truncated {
			want = http.StatusServiceUnavailable
		}
		assert.Equal(t, want, resp.StatusCode)
		got, rerr := io.ReadAll(resp.Body)
		assert.ErrorIs(t, rerr, io.ErrUnexpectedEOF)
		assert.Equal(t, chaosOKBody[:len(chaosOKBody)/2], string(got), "every byte sent, from the first")
		assert.NoError(t, resp.Body.Close())
	case fault503:
		require.NoError(t, err)
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"), "retries spent: SDKs above must not resend")
		assert.Equal(t, chaos503Body, bodyOf(t, resp))
	case fault400:
		require.NoError(t, err)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		assert.Empty(t, resp.Header.Get("X-Should-Retry"), "a final status is returned as the provider sent it")
		assert.Equal(t, chaos400Body, bodyOf(t, resp))
	case faultReset, faultPartialHeaders, faultStall:
		assert.Nil(t, resp)
		var ex *Exhausted
		require.ErrorAs(t, err, &ex)
		assert.Equal(t, len(faults), ex.Attempts)
		switch last {
		case faultReset:
			assert.True(t, errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF),
				"a reset connection: %v", err)
		case faultPartialHeaders:
			assert.True(t, errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF), "cut headers: %v", err)
		case faultStall:
			assert.ErrorContains(t, err, "timeout awaiting response headers")
		}
	}
}

// Each fault alone, and in the sequences that matter.
func TestChaosFaults(t *testing.T) {
	cases := []struct {
		name   string
		script []fault
	}{
		{"reset then answer", []fault{faultReset, faultOK}},
		{"partial headers then answer", []fault{faultPartialHeaders, faultOK}},
		{"stall then answer", []fault{faultStall, faultOK}},
		{"503 three times then answer", []fault{fault503, fault503, fault503, faultOK}},
		{"503 truncated then answer", []fault{fault503Truncated, faultOK}},
		{"503 until retries are spent", []fault{fault503}},
		{"503 truncated until retries are spent", []fault{fault503Truncated}},
		{"reset until retries are spent", []fault{faultReset}},
		{"partial headers until retries are spent", []fault{faultPartialHeaders}},
		{"stall until retries are spent", []fault{faultStall}},
		{"truncated answer is returned", []fault{faultTruncated, faultOK}},
		{"reset then truncated answer", []fault{faultReset, faultTruncated, faultOK}},
		{"400 is returned", []fault{fault400, faultOK}},
		{"mixed then 400", []fault{fault503, faultReset, fault400, faultOK}},
		{"every retryable fault then answer", []fault{faultPartialHeaders, faultStall, faultReset, faultOK}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plan := script(c.script...)
			prov := newChaosProvider(t, plan)
			rec, resp, err := chaosSend(t, chaosBase(t), prov.srv.URL, "r")
			checkChaosOutcome(t, prov.faultsOf("r"), rec, resp, err)
			want := 0 // attempts: up to the first final fault, within the schedule
			for want < len(chaosWaits)+1 {
				want++
				if !plan(want - 1).retryable() {
					break
				}
			}
			assert.Len(t, prov.faultsOf("r"), want, "attempts")
		})
	}
}

// The provider flips between every fault at random (seeded, so a failure
// can be replayed), over connections that the shared base pools and
// reuses: each request must still end as its attempts say.
func TestChaosRandomFaults(t *testing.T) {
	// Weights: stalls are rare because each costs a header timeout.
	weighted := []fault{
		faultOK, faultOK, faultOK, faultOK,
		fault503, fault503, fault503, fault503Truncated,
		faultReset, faultReset, faultPartialHeaders, faultPartialHeaders,
		faultTruncated, fault400, faultStall,
	}
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x11a7e7))
			prov := newChaosProvider(t, func(int) fault { return weighted[rng.IntN(len(weighted))] })
			base := chaosBase(t)
			seen := map[fault]int{}
			for i := range 25 {
				id := strconv.Itoa(i)
				rec, resp, err := chaosSend(t, base, prov.srv.URL, id)
				faults := prov.faultsOf(id)
				for _, f := range faults {
					seen[f]++
				}
				checkChaosOutcome(t, faults, rec, resp, err)
				if t.Failed() {
					t.Fatalf("request %s (seed %d) met %v", id, seed, faults)
				}
			}
			assert.Greater(t, len(seen), 4, "the seed exercised several faults: %v", seen)
		})
	}
}

// A 503 whose body stalls after a few bytes: reading it (the signal peek)
// blocks, but never past the request's deadline, and the deadline/reserve
// rule counts from when the read ended: the 503 is returned as it is, its
// record promises no retry, and its body reports the cut when read.
func TestChaosStalledErrorBodyEndsWithTheDeadline(t *testing.T) {
	prov := newChaosProvider(t, script(fault503StallBody))
	rec := &recorder{}
	rt := mustNew(t, chaosBase(t), Policy{Waits: chaosWaits, Reserve: time.Millisecond, OnAttempt: rec.on})
	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, prov.srv.URL, strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set(chaosReqHeader, "r")
	start := time.Now()
	resp, err := rt.RoundTrip(req)
	took := time.Since(start)
	t.Logf("returned after %v: %v", took, err)
	assert.Less(t, took, deadline+timeBound(100*time.Millisecond, time.Second), "not held past the deadline")
	assert.Len(t, prov.faultsOf("r"), 1, "no time for another attempt")
	assertFinalIsLastAttempt(t, rec, resp, err)
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, []time.Duration{0}, rec.retryIns(), "no retry promised: no time was left")
	got, rerr := io.ReadAll(resp.Body)
	assert.Error(t, rerr, "the body never completes")
	assert.Equal(t, `{"error":`, string(got), "what did arrive, from the first byte")
	assert.NoError(t, resp.Body.Close())
}
