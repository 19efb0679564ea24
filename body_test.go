package llmretry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stallBase answers every request with a 503 of content type ct whose body
// stalls after a few bytes, and records when each attempt arrived.
type stallBase struct {
	ct     string
	mu     sync.Mutex
	times  []time.Time
	bodies []*stallBody
}

func (b *stallBase) RoundTrip(r *http.Request) (*http.Response, error) {
	body := newStallBody(`{"error":`)
	b.mu.Lock()
	b.times = append(b.times, time.Now())
	b.bodies = append(b.bodies, body)
	b.mu.Unlock()
	h := http.Header{"Content-Type": {b.ct}}
	return &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: h, Body: body, ContentLength: 1000, Request: r}, nil
}

// The reserve holds while a failed reply's body is read: a 503 whose body
// starts and then stalls comes back when the bare transport's would (at
// once) if no retry fits before the deadline minus the reserve, and no
// later than the last moment a retry still fits if one does; the caller
// gets it with at least the reserve left and its body readable from the
// first byte. Both readers are bounded: the signal peek (JSON) and the
// drain of a discarded body (text/html).
func TestStalledErrorBodyKeepsTheReserve(t *testing.T) {
	const (
		deadline = 3 * time.Second
		reserve  = 2 * time.Second
	)
	cases := []struct {
		name     string
		ct       string
		wait     time.Duration
		returned time.Duration // when the caller gets the 503
		attempts int
	}{
		{"JSON, no retry fits", "application/json", 1500 * time.Millisecond, 0, 1},
		{"text/html, no retry fits", "text/html", 1500 * time.Millisecond, 0, 1},
		{"JSON, a retry fits: the peek ends when it no longer would", "application/json", 100 * time.Millisecond, time.Second, 2},
		{"text/html, a retry fits: the drain ends in time for it", "text/html", 100 * time.Millisecond, time.Second, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := &stallBase{ct: c.ct}
				rt := mustNew(t, base, Policy{Waits: []time.Duration{c.wait}, Reserve: reserve})
				ctx := withDeadline(t, deadline)
				start := time.Now()
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, testURL, strings.NewReader(`{}`))
				require.NoError(t, err)
				resp, err := rt.RoundTrip(req)
				require.NoError(t, err)
				assert.Equal(t, c.returned, time.Since(start), "when the caller gets it")
				assert.GreaterOrEqual(t, time.Until(start.Add(deadline)), reserve, "the reserve is left")
				assert.Equal(t, 503, resp.StatusCode)
				assert.Len(t, base.times, c.attempts)
				got := make([]byte, len(`{"error":`))
				_, err = io.ReadFull(resp.Body, got)
				require.NoError(t, err)
				assert.Equal(t, `{"error":`, string(got), "readable from the first byte")
				require.NoError(t, resp.Body.Close())
				for i, b := range base.bodies {
					select {
					case <-b.closed:
					default:
						t.Errorf("body %d not closed", i)
					}
				}
			})
		})
	}
}

// The same stalled 503 over a real connection: the caller gets it within a
// few milliseconds of the bare transport, with the reserve left.
func TestStalledErrorBodyOverTheNetwork(t *testing.T) {
	for _, ct := range []string{"application/json", "text/html"} {
		t.Run(ct, func(t *testing.T) {
			stop := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				stallErrorBody(w, r, ct, stop)
			}))
			defer srv.Close()
			defer close(stop)
			tr := srv.Client().Transport.(*http.Transport)
			defer tr.CloseIdleConnections()
			send := func(rt http.RoundTripper) (time.Duration, time.Duration) {
				ctx := withDeadline(t, 3*time.Second)
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{}`))
				require.NoError(t, err)
				start := time.Now()
				resp, err := rt.RoundTrip(req)
				took := time.Since(start)
				require.NoError(t, err)
				assert.Equal(t, 503, resp.StatusCode)
				deadline, _ := ctx.Deadline()
				left := time.Until(deadline)
				resp.Body.Close()
				return took, left
			}
			bare, _ := send(tr)
			took, left := send(mustNew(t, tr, Policy{Waits: []time.Duration{1500 * time.Millisecond}, Reserve: 2 * time.Second}))
			t.Logf("bare %v, llmretry %v, %v left", bare, took, left)
			assert.Less(t, took, bare+timeBound(100*time.Millisecond, 500*time.Millisecond), "within a few ms of the bare transport")
			assert.GreaterOrEqual(t, left, 2*time.Second, "the reserve is left")
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
	ctx := withDeadline(t, deadline)
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

// Copying a body that has no GetBody honours the request's context: a body
// that blocks ends the call when the context does, not when the body
// unblocks, and nothing is sent.
func TestCopyBodyHonoursTheContext(t *testing.T) {
	for _, c := range []struct {
		name  string
		ended bool          // the context has ended before RoundTrip
		took  time.Duration // when RoundTrip returns
	}{
		{"ends while the copy waits", false, 500 * time.Millisecond},
		{"ended before", true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				pr, pw := io.Pipe()
				defer pw.Close()
				go func() { _, _ = pw.Write([]byte(`{"model":`)) }() // then nothing
				prov := testkit.NewProvider(testkit.OK())
				ctx := withDeadline(t, 500*time.Millisecond)
				if c.ended {
					ended, cancel := context.WithCancel(ctx)
					cancel()
					ctx = ended
				}
				body := &countingBody{Reader: pr}
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, testURL, body)
				require.NoError(t, err)
				start := time.Now()
				resp, err := mustNew(t, prov, Policy{}).RoundTrip(req)
				assert.Nil(t, resp)
				assert.Error(t, err)
				assert.ErrorIs(t, err, ctx.Err())
				assert.Equal(t, c.took, time.Since(start), "ends with the context")
				assert.Zero(t, prov.Attempts())
				synctest.Wait() // a close on the context's own goroutine is done
				assert.Equal(t, 1, body.closes(), "the caller's body is closed exactly once")
			})
		})
	}
}

// A body without GetBody (aws-sdk-go-v2's) costs one copy of its size on a
// first-try success when its ContentLength is known, not io.ReadAll's
// doubling.
func TestBodyWithoutGetBodyCostsOneCopy(t *testing.T) {
	const size = 4 << 20
	payload := bytes.Repeat([]byte("x"), size)
	rt := mustNew(t, memBase{}, Policy{})
	send := func(withLength bool) uint64 {
		req, err := http.NewRequest(http.MethodPost, "http://mem.test/model/m/converse", io.NopCloser(bytes.NewReader(payload)))
		require.NoError(t, err)
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261201/us-east-1/bedrock/aws4_request")
		if withLength {
			req.ContentLength = size
		}
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		resp, err := rt.RoundTrip(req)
		runtime.ReadMemStats(&after)
		require.NoError(t, err)
		resp.Body.Close()
		return after.TotalAlloc - before.TotalAlloc
	}
	known := send(true)
	unknown := send(false)
	t.Logf("allocated for a 4 MiB body: %d KiB with ContentLength, %d KiB without", known>>10, unknown>>10)
	assert.LessOrEqual(t, known, uint64(size+256<<10), "one copy, sized from ContentLength")
	assert.Greater(t, unknown, known, "without a length the copy grows")
}

// readAllSized reads exactly what the body holds, whatever ContentLength
// announced: shorter, longer, unknown.
func TestReadAllSized(t *testing.T) {
	for _, c := range []struct {
		body string
		n    int64
	}{{"hello", 5}, {"hello", 3}, {"hello", 10}, {"hello", -1}, {"", 0}, {"", 4}} {
		got, err := readAllSized(strings.NewReader(c.body), c.n)
		require.NoError(t, err)
		assert.Equal(t, c.body, string(got), "announced %d", c.n)
	}
	_, err := readAllSized(errBody{}, 10)
	assert.ErrorContains(t, err, "disk on fire")
}

// A request body's own fault is found from a fresh copy: GetBody failing,
// a read failing, a length other than the ContentLength announced.
func TestBodyFault(t *testing.T) {
	of := func(body string) func() (io.ReadCloser, error) {
		return func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(body)), nil }
	}
	assert.NoError(t, bodyFault(of("12345"), 5))
	assert.NoError(t, bodyFault(of("12345"), -1), "unknown length")
	assert.NoError(t, bodyFault(of("12345"), 0), "no length: sent chunked")
	assert.ErrorContains(t, bodyFault(of("12345"), 10), "body of 5 bytes, not its ContentLength 10")
	assert.ErrorContains(t, bodyFault(of("12345"), 3), "body of 5 bytes, not its ContentLength 3")
	assert.ErrorContains(t, bodyFault(func() (io.ReadCloser, error) { return errBody{}, nil }, 5), "disk on fire")
	assert.ErrorContains(t, bodyFault(func() (io.ReadCloser, error) { return nil, errors.New("gone") }, 5), "gone")
}

// The read-ahead of a peek that ran out of time hands over every byte in
// order once they arrive, then the rest of the body, and its goroutine
// ends when the body is closed.
func TestPeekThatRanOutOfTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pr, pw := io.Pipe()
		resp := &http.Response{Body: pr, ContentLength: -1}
		var wrote atomic.Bool
		go func() {
			_, _ = pw.Write([]byte("abc"))
			time.Sleep(time.Second) // the provider stalls
			wrote.Store(true)
			_, _ = pw.Write([]byte(strings.Repeat("d", 9000)))
			pw.Close()
		}()
		buf, ok := peekBody(resp, 8<<10, time.Now().Add(100*time.Millisecond))
		assert.False(t, ok, "the peek ran out of time")
		assert.Nil(t, buf)
		all, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.True(t, wrote.Load())
		assert.Equal(t, "abc"+strings.Repeat("d", 9000), string(all))
		require.NoError(t, resp.Body.Close())
	})
}

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

			ctx := withDeadline(t, 30*time.Second)
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
			base := &lazyFailures{size: size, header: http.Header{}}
			rt := mustNew(t, base, Policy{Waits: []time.Duration{0, 0, 0}})
			resp, err := post(t, rt, context.Background())
			require.NoError(t, err)
			bodies := base.all()
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

// A provider that answers with a 1 GiB error body, generated as it is read
// (served from memory, never held), is retried and its last answer
// returned: the discarded bodies are read only up to the bound and closed,
// memory stays far below the body's size, and the caller still reads the
// final body from its first byte.
func TestHugeErrorBodyBoundedMemory(t *testing.T) {
	const size = 1 << 30
	base := &lazyFailures{size: size, header: http.Header{"Content-Type": {"application/json"}}}
	rt := mustNew(t, base, Policy{Waits: []time.Duration{time.Millisecond, time.Millisecond}})

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	resp, err := post(t, rt, context.Background())
	require.NoError(t, err)
	// The caller reads the first MiB of the final body, then gives up.
	head := make([]byte, 1<<20)
	_, err = io.ReadFull(resp.Body, head)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	runtime.ReadMemStats(&after)

	assert.Equal(t, 503, resp.StatusCode)
	assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
	want := make([]byte, len(head))
	fillPattern(want, 0)
	assert.True(t, bytes.Equal(want, head), "the final body reads from its first byte")
	bodies := base.all()
	require.Len(t, bodies, 3, "retried, then returned")
	for i, b := range bodies[:2] {
		n, closes := b.read()
		assert.LessOrEqual(t, n, int64(discardReadBound), "discarded body %d drained only up to the bound", i)
		assert.Equal(t, 1, closes, "discarded body %d closed", i)
	}
	n, closes := bodies[2].read()
	assert.Equal(t, int64(len(head)), n, "the final body: what the caller read and no more")
	assert.Equal(t, 1, closes)

	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d KiB; heap in use %d → %d KiB", allocated>>10, before.HeapInuse>>10, after.HeapInuse>>10)
	assert.Less(t, allocated, uint64(16<<20), "allocations far below the body's size")
	assert.Less(t, int64(after.HeapInuse)-int64(before.HeapInuse), int64(16<<20))
}
