package coord_test

// Helpers shared by the engine's end-to-end tests (the *_e2e_test.go
// files): coordinated Transports built with llmretry.NewCoordinated, fake
// providers that start no goroutine (so that they run inside a
// testing/synctest bubble), and the records the tests read. A test reads
// the engine only through public means: the Store it passes in
// coordination.Config (its facts, loaded), OnHold and OnAttempt records,
// and what the providers saw.

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/internal/clock"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/llmretry/llmretry/store"
	"github.com/stretchr/testify/require"
)

// The defaults a zero coordination.Config stands for, as its field docs
// state them.
const (
	probeInterval = 5 * time.Second
	releaseSpread = time.Second
)

// hostWaits is the seed's host schedule.
var hostWaits = []time.Duration{15 * time.Second, 45 * time.Second, 2 * time.Minute, 4 * time.Minute}

// coordinated returns a Transport made by llmretry.NewCoordinated, or
// fails the test.
func coordinated(t *testing.T, base http.RoundTripper, p llmretry.Policy, c coordination.Config) *llmretry.Transport {
	t.Helper()
	rt, err := llmretry.NewCoordinated(base, p, c)
	require.NoError(t, err)
	return rt
}

// mustRequest returns a POST with a JSON body to api.example.com, under
// ctx.
func mustRequest(t *testing.T, ctx context.Context) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", "https://api.example.com/v1/chat", strings.NewReader(`{"q":1}`))
	require.NoError(t, err)
	return req
}

// roundTripFunc adapts a function to an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// answer is a provider's reply: a status with headers and a body, or an
// error.
type answer struct {
	status int
	header http.Header
	body   string
	err    error
}

// status returns the answer status, with headers from kv (name, value, …)
// and a body naming it.
func status(code int, kv ...string) answer {
	a := answer{status: code, header: http.Header{}, body: "error " + strconv.Itoa(code)}
	for i := 0; i+1 < len(kv); i += 2 {
		a.header.Set(kv[i], kv[i+1])
	}
	return a
}

// refused is a failed connection.
var refused = answer{err: &opError{syscall.ECONNREFUSED}}

// opError stands in for *net.OpError without a real socket.
type opError struct{ err error }

func (e *opError) Error() string { return "dial tcp 127.0.0.1:1: connect: " + e.err.Error() }
func (e *opError) Unwrap() error { return e.err }

// response returns a's response to req (or its error).
func (a answer) response(req *http.Request) (*http.Response, error) {
	if a.err != nil {
		return nil, a.err
	}
	h := a.header.Clone()
	if h == nil {
		h = http.Header{}
	}
	return &http.Response{StatusCode: a.status, Status: strconv.Itoa(a.status) + " " + http.StatusText(a.status), Header: h,
		Body: io.NopCloser(strings.NewReader(a.body)), ContentLength: -1, Request: req}, nil
}

// window is a span of provider time, since its start.
type window struct{ from, to time.Duration }

// flaky is an in-memory provider: inside any of its down windows it
// answers fault (slow after the request arrives); otherwise the answer,
// gen after it arrives. It records every request's arrival and end.
type flaky struct {
	start time.Time
	down  []window
	fault answer
	gen   time.Duration
	slow  time.Duration // how long a fault takes to come back

	mu    sync.Mutex
	spans []window // per request: arrival and end
}

// newFlaky starts a provider now.
func newFlaky(fault answer, gen time.Duration, down ...window) *flaky {
	return &flaky{start: time.Now(), down: down, fault: fault, gen: gen}
}

func (f *flaky) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	at := time.Since(f.start)
	f.mu.Lock()
	i := len(f.spans)
	f.spans = append(f.spans, window{at, at})
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.spans[i].to = time.Since(f.start)
		f.mu.Unlock()
	}()
	for _, w := range f.down {
		if at >= w.from && at < w.to {
			if err := clock.Sleep(req.Context(), f.slow); err != nil {
				return nil, err
			}
			return f.fault.response(req)
		}
	}
	if err := clock.Sleep(req.Context(), f.gen); err != nil {
		return nil, err
	}
	return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"answer":42}`)), ContentLength: -1, Request: req}, nil
}

// arrivals returns when each request arrived.
func (f *flaky) arrivals() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	var at []time.Duration
	for _, s := range f.spans {
		at = append(at, s.from)
	}
	return at
}

// maxInFlight returns the most requests in flight at once among those
// that arrived within w.
func (f *flaky) maxInFlight(w window) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	most := 0
	for _, a := range f.spans {
		if a.from < w.from || a.from >= w.to {
			continue
		}
		n := 0
		for _, b := range f.spans {
			if b.from >= w.from && b.from < w.to && b.from <= a.from && (b.to > a.from || b == a) {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// during returns the arrivals in w.
func during(at []time.Duration, w window) []time.Duration {
	var in []time.Duration
	for _, a := range at {
		if a >= w.from && a < w.to {
			in = append(in, a)
		}
	}
	return in
}

// holds collects coordination.Config.OnHold records: pass its Add.
type holds struct {
	testkit.Log[coordination.Hold]
}

// ended returns the records of ended holds, by outcome.
func (h *holds) ended() map[coordination.HoldOutcome]int {
	m := map[coordination.HoldOutcome]int{}
	for _, x := range h.All() {
		if x.Outcome != coordination.HoldWaiting {
			m[x.Outcome]++
		}
	}
	return m
}

// open returns how many holds began and have not ended: the calls held
// now.
func (h *holds) open() int {
	n := 0
	for _, x := range h.All() {
		if x.Outcome == coordination.HoldWaiting {
			n++
		} else {
			n--
		}
	}
	return n
}

// keys returns the provider keys the holds were on.
func (h *holds) keys() map[string]bool {
	m := map[string]bool{}
	for _, x := range h.All() {
		m[x.Key] = true
	}
	return m
}

// callResult is what one call got, and when, since the provider started.
type callResult struct {
	err error
	at  time.Duration
}

// lastAnswer checks that every call of results was answered, and returns
// when the last answer came.
func lastAnswer(t *testing.T, results []callResult) time.Duration {
	t.Helper()
	var last time.Duration
	for _, r := range results {
		require.NoError(t, r.err)
		last = max(last, r.at)
	}
	return last
}

// callMany makes n calls through rt, the i-th starting at i*stagger, each
// under its own deadline, and returns their results once all have ended.
func callMany(t *testing.T, rt http.RoundTripper, start time.Time, n int, stagger, deadline time.Duration, prep func(i int, req *http.Request)) []callResult {
	t.Helper()
	results := make([]callResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * stagger)
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, "POST", "https://api.example.com/v1/chat", strings.NewReader(`{"q":1}`))
			if err != nil {
				results[i] = callResult{err: err}
				return
			}
			if prep != nil {
				prep(i, req)
			}
			resp, err := rt.RoundTrip(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = errors.New(resp.Status)
				}
			}
			results[i] = callResult{err: err, at: time.Since(start)}
		})
	}
	wg.Wait()
	return results
}

// keySet collects the names of the keys a store was asked about, for a
// testkit.Store's After.
type keySet struct {
	mu    sync.Mutex
	names map[string]bool
}

func (k *keySet) after(_ testkit.Op, key string, _ error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.names == nil {
		k.names = map[string]bool{}
	}
	k.names[key] = true
}

// list returns the names collected.
func (k *keySet) list() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for n := range k.names {
		out = append(out, n)
	}
	return out
}

// load returns what s holds of key at now, or fails the test.
func load(t *testing.T, s store.Store, key string) store.Facts {
	t.Helper()
	f, err := s.Load(context.Background(), key, time.Now())
	require.NoError(t, err)
	return f
}

// flappingProvider flips between down and up at random moments, per host:
// down answers one of several faults (502, 529, refused, 429 with a short
// Retry-After), up answers after a random generation time.
type flappingProvider struct {
	start time.Time
	flips map[string][]time.Duration // per host: the moments it flips, starting down
}

func (c *flappingProvider) down(host string, at time.Duration) bool {
	down := true
	for _, f := range c.flips[host] {
		if at < f {
			break
		}
		down = !down
	}
	return down
}

func (c *flappingProvider) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	at := time.Since(c.start)
	if c.down(req.URL.Host, at) {
		if err := clock.Sleep(req.Context(), time.Duration(rand.N(300))*time.Millisecond); err != nil {
			return nil, err
		}
		switch rand.N(4) {
		case 0:
			return nil, refused.err
		case 1:
			return &http.Response{StatusCode: 429, Status: "429 Too Many Requests", Header: http.Header{"Retry-After": {strconv.Itoa(1 + rand.N(5))}}, Body: http.NoBody, Request: req}, nil
		case 2:
			return &http.Response{StatusCode: 529, Status: "529 Overloaded", Header: http.Header{}, Body: http.NoBody, Request: req}, nil
		}
		return &http.Response{StatusCode: 502, Status: "502 Bad Gateway", Header: http.Header{}, Body: http.NoBody, Request: req}, nil
	}
	if err := clock.Sleep(req.Context(), time.Duration(100+rand.N(2900))*time.Millisecond); err != nil {
		return nil, err
	}
	return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), Request: req}, nil
}

// liveHeap returns the heap in use as of the latest garbage collection,
// without forcing one (runtime.GC inside a synctest bubble trips Go
// 1.26.8's race detector).
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// failingBody is a request body whose every read fails.
type failingBody struct{}

func (failingBody) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }
func (failingBody) Close() error             { return nil }
