package llmretry

// Nothing lost: request bodies reach the provider whole on every attempt,
// the caller's request is left as it was, discarded responses are drained
// and closed so connections are reused, and the final response is the
// caller's to read in full.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A 32 MiB body (with GetBody, as http.NewRequest sets for in-memory
// readers), an empty one, and a 32 MiB one without GetBody (a stream the
// Transport must buffer, reading it exactly once) reach the provider
// byte-identical on every attempt over a real connection. The caller's
// request is unchanged afterwards, its body is closed exactly once, and the
// final response reads in full.
func TestBodyReachesProviderIntactOnEveryAttempt(t *testing.T) {
	const big = 32 << 20
	data := uniqueBytes(big, 1)
	answer := uniqueBytes(1<<20, 2)
	cases := []struct {
		name    string
		body    []byte
		getBody bool
	}{
		{"32 MiB with GetBody", data, true},
		{"empty", nil, true},
		{"32 MiB without GetBody", data, false},
		{"empty without GetBody", []byte{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prov := newHashingProvider(t, answer, nil)
			base := loopbackBase(t, 2)
			rt := mustNew(t, base, Policy{Waits: []time.Duration{time.Millisecond}, Reserve: time.Millisecond})

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			body := &countingBody{Reader: bytes.NewReader(c.body)}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, prov.srv.URL+"/v1/chat/completions?key=k", body)
			require.NoError(t, err)
			req.ContentLength = int64(len(c.body))
			if c.getBody {
				req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(c.body)), nil }
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Req-ID", c.name)
			before := snapshot(req)

			resp, err := rt.RoundTrip(req)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			got, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			assert.Equal(t, sha256.Sum256(answer), sha256.Sum256(got), "the final response reads in full (%d bytes)", len(got))

			want := bodySum{n: int64(len(c.body)), sum: sha256.Sum256(c.body)}
			sums := prov.sums()
			require.Len(t, sums, 2, "a 503, then the answer")
			for i, s := range sums {
				assert.Equal(t, want.n, s.n, "attempt %d: length", i+1)
				assert.Equal(t, want.sum, s.sum, "attempt %d: SHA-256", i+1)
			}

			assertUnchanged(t, before, req)
			n, closes := body.stats()
			assert.Equal(t, 1, closes, "the caller's body is closed exactly once")
			assert.Equal(t, int64(len(c.body)), n, "the caller's body is read once, not once per attempt")
		})
	}
}

// Discarded response bodies are drained (up to the bound) and closed
// exactly once; the final body is neither read ahead of the caller beyond
// the bound nor closed for them.
func TestDiscardedBodiesDrainedAndClosed(t *testing.T) {
	for _, size := range []int64{0, 100, 4 << 10, 64 << 10, 4 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			var mu sync.Mutex
			var bodies []*lazyBody
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				_, _ = io.Copy(io.Discard, r.Body)
				b := &lazyBody{size: size}
				mu.Lock()
				bodies = append(bodies, b)
				mu.Unlock()
				return &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: http.Header{}, Body: b, ContentLength: size, Request: r}, nil
			})
			rt := mustNew(t, base, Policy{Waits: []time.Duration{0, 0, 0}})
			resp, err := post(t, rt, context.Background())
			require.NoError(t, err)
			require.Len(t, bodies, 4)
			for i, b := range bodies[:3] {
				n, closes := b.read()
				assert.Equal(t, 1, closes, "discarded body %d closed once", i)
				assert.Equal(t, min(size, discardReadBound), n, "discarded body %d drained, up to the bound", i)
			}
			final := bodies[3]
			n, closes := final.read()
			assert.Zero(t, closes, "the final body is the caller's to close")
			assert.LessOrEqual(t, n, int64(discardReadBound))
			got, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Len(t, got, int(size), "the caller reads the whole final body")
			want := make([]byte, size)
			fillPattern(want, 0)
			assert.True(t, bytes.Equal(want, got), "from its first byte, in order")
			_, closes = final.read()
			assert.Equal(t, 1, closes)
		})
	}
}

// 1,000 requests over one shared http.Transport, each failing once before
// it is answered (2,000 attempts), open about as many connections as the
// pool keeps: discarded bodies are drained and closed, so connections go
// back to the pool instead of being abandoned.
func TestConnectionsReusedAcrossRetries(t *testing.T) {
	const (
		pool     = 8
		workers  = 8
		requests = 1000
	)
	hook, newConns := newConnCounter()
	prov := newHashingProvider(t, []byte(`{"answer":42}`), hook)
	base := loopbackBase(t, pool)
	rt := mustNew(t, base, Policy{Waits: []time.Duration{time.Millisecond}})

	var next atomic.Int64
	var failures atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > requests {
					return
				}
				req, err := http.NewRequest(http.MethodPost, prov.srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
				if err != nil {
					failures.Add(1)
					return
				}
				req.Header.Set("X-Req-ID", fmt.Sprint(i))
				resp, err := rt.RoundTrip(req)
				if err != nil {
					failures.Add(1)
					continue
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 || string(b) != `{"answer":42}` {
					failures.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d new connections for %d attempts", newConns(), 2*requests)
	assert.Zero(t, failures.Load())
	assert.Len(t, prov.sums(), 2*requests, "every request failed once, then was answered")
	assert.LessOrEqual(t, newConns(), pool+workers/2, "connections are reused, not abandoned: %d new for %d attempts", newConns(), 2*requests)
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
