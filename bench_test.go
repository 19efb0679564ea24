package llmretry

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmretry/llmretry/coordination"
)

// memBase answers every request in memory, reading the request body as a
// server would, so the benchmark measures the transport and not a network.
type memBase struct{}

func (memBase) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

var benchBody = []byte(`{"model":"gpt","messages":[{"role":"user","content":"hello"}]}`)

// benchRequest is a realistic model request: a JSON body and an API key.
func benchRequest(url string) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(benchBody))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-bench-0123456789abcdefghijklmnopqrstuvwxyz")
	return req, nil
}

// benchmarkSuccess sends requests that succeed on the first try through rt.
func benchmarkSuccess(b *testing.B, rt http.RoundTripper, url string) {
	client := &http.Client{Transport: rt}
	b.ReportAllocs()
	for b.Loop() {
		req, err := benchRequest(url)
		if err != nil {
			b.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// BenchmarkSuccessPath compares a first-try success through the bare base
// transport and through llmretry, in memory and over loopback, in one run.
func BenchmarkSuccessPath(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte(`{"answer":42}`))
	}))
	defer srv.Close()
	loop := srv.Client().Transport
	wrapped := func(base http.RoundTripper) http.RoundTripper {
		rt, err := New(base, Policy{})
		if err != nil {
			b.Fatal(err)
		}
		return rt
	}
	coordinated := func(base http.RoundTripper) http.RoundTripper {
		rt, err := NewCoordinated(base, Policy{}, coordination.Config{})
		if err != nil {
			b.Fatal(err)
		}
		return rt
	}
	// A policy with a fallback route: what routes cost a request that
	// works the first time (nothing, but a bool in its admission).
	routed := func(base http.RoundTripper) http.RoundTripper {
		route, err := RouteTo("http://mem.test/v1", "http://fallback.mem.test/v1", http.Header{"Authorization": {"Bearer fb"}})
		if err != nil {
			b.Fatal(err)
		}
		rt, err := New(base, Policy{Fallback: []Route{route}})
		if err != nil {
			b.Fatal(err)
		}
		return rt
	}
	b.Run("memory/bare", func(b *testing.B) { benchmarkSuccess(b, memBase{}, "http://mem.test/v1") })
	b.Run("memory/llmretry", func(b *testing.B) { benchmarkSuccess(b, wrapped(memBase{}), "http://mem.test/v1") })
	b.Run("memory/fallback", func(b *testing.B) { benchmarkSuccess(b, routed(memBase{}), "http://mem.test/v1") })
	b.Run("memory/coordinated", func(b *testing.B) { benchmarkSuccess(b, coordinated(memBase{}), "http://mem.test/v1") })
	b.Run("loopback/bare", func(b *testing.B) { benchmarkSuccess(b, loop, srv.URL) })
	b.Run("loopback/llmretry", func(b *testing.B) { benchmarkSuccess(b, wrapped(loop), srv.URL) })
	b.Run("loopback/coordinated", func(b *testing.B) { benchmarkSuccess(b, coordinated(loop), srv.URL) })
}

// rateBase answers like memBase, with the rate-limit headers OpenAI sends
// on every response (a limit far from spent).
type rateBase struct{}

func (rateBase) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := memBase{}.RoundTrip(req)
	resp.Header = http.Header{
		"X-Ratelimit-Limit-Requests":     {"500"},
		"X-Ratelimit-Remaining-Requests": {"499"},
		"X-Ratelimit-Reset-Requests":     {"120ms"},
		"X-Ratelimit-Limit-Tokens":       {"30000"},
		"X-Ratelimit-Remaining-Tokens":   {"29980"},
		"X-Ratelimit-Reset-Tokens":       {"40ms"},
	}
	return resp, err
}

// BenchmarkSuccessPathRateHeaders is the in-memory success path when every
// response carries rate-limit headers, which a coordinated Transport reads
// for a spent limit: its cost against the bare base and New in one run.
func BenchmarkSuccessPathRateHeaders(b *testing.B) {
	rt, err := New(rateBase{}, Policy{})
	if err != nil {
		b.Fatal(err)
	}
	co, err := NewCoordinated(rateBase{}, Policy{}, coordination.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("bare", func(b *testing.B) { benchmarkSuccess(b, rateBase{}, "http://mem.test/v1") })
	b.Run("llmretry", func(b *testing.B) { benchmarkSuccess(b, rt, "http://mem.test/v1") })
	b.Run("coordinated", func(b *testing.B) { benchmarkSuccess(b, co, "http://mem.test/v1") })
}

// getBodyCounter counts GetBody calls.
type getBodyCounter struct{ calls int }

func (g *getBodyCounter) getBody() (io.ReadCloser, error) {
	g.calls++
	return io.NopCloser(bytes.NewReader(benchBody)), nil
}

// The success path's cost is a test, not only a benchmark, with a
// realistic request (a JSON body and an Authorization header): at most 2
// allocations more than the bare transport for New, at most 4 with
// coordination (3 today), and no copy of a body that has GetBody (GetBody
// is never called).
func TestSuccessPathCost(t *testing.T) {
	rt, err := New(memBase{}, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	co, err := NewCoordinated(memBase{}, Policy{}, coordination.Config{})
	if err != nil {
		t.Fatal(err)
	}
	route, err := RouteTo("http://mem.test/v1", "http://fallback.mem.test/v1", http.Header{"Authorization": {"Bearer fb"}})
	if err != nil {
		t.Fatal(err)
	}
	routed, err := New(memBase{}, Policy{Fallback: []Route{route}})
	if err != nil {
		t.Fatal(err)
	}
	var g getBodyCounter
	send := func(rt http.RoundTripper) func() {
		return func() {
			req, _ := benchRequest("http://mem.test/v1")
			req.GetBody = g.getBody
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	bare := testing.AllocsPerRun(200, send(memBase{}))
	wrapped := testing.AllocsPerRun(200, send(rt))
	coordinated := testing.AllocsPerRun(200, send(co))
	withRoutes := testing.AllocsPerRun(200, send(routed))
	if withRoutes != wrapped {
		t.Errorf("a policy with a fallback route costs %.0f allocations on the success path, one without %.0f: routes must cost nothing until used", withRoutes, wrapped)
	}
	if extra := wrapped - bare; extra > 2 {
		t.Errorf("success path costs %.0f allocations more than the bare transport; the target is at most 2", extra)
	}
	if extra := coordinated - bare; extra > 4 {
		t.Errorf("coordinated success path costs %.0f allocations more than the bare transport; the target is at most 4", extra)
	}
	if g.calls != 0 {
		t.Errorf("GetBody called %d times on the success path; want 0 (no body copies)", g.calls)
	}
	t.Logf("allocs/op: bare %.0f, llmretry %.0f, with a fallback route %.0f, coordinated %.0f", bare, wrapped, withRoutes, coordinated)
}

// BenchmarkSuccessPathParallel compares the success path of New and of
// NewCoordinated under RunParallel, for one busy provider key and for 64
// keys (64 API keys to one host), in memory: what coordination costs when
// many goroutines share a Transport.
func BenchmarkSuccessPathParallel(b *testing.B) {
	for _, keys := range []int{1, 64} {
		auth := make([]string, keys)
		for i := range auth {
			auth[i] = "Bearer sk-bench-" + strconv.Itoa(i) + "-0123456789abcdefghijklmnopqrstuvwxyz"
		}
		for _, mode := range []string{"llmretry", "coordinated"} {
			var rt http.RoundTripper
			var err error
			if mode == "llmretry" {
				rt, err = New(memBase{}, Policy{})
			} else {
				rt, err = NewCoordinated(memBase{}, Policy{}, coordination.Config{})
			}
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("keys=%d/%s", keys, mode), func(b *testing.B) {
				var next atomic.Uint32
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for i := next.Add(1); pb.Next(); i++ {
						req, err := benchRequest("http://mem.test/v1")
						if err != nil {
							b.Fatal(err)
						}
						req.Header.Set("Authorization", auth[int(i)%keys])
						resp, err := rt.RoundTrip(req)
						if err != nil {
							b.Fatal(err)
						}
						resp.Body.Close()
					}
				})
			})
		}
	}
}

// sseMemBase answers every request in memory with a healthy Anthropic
// stream: its preamble, a ping, the first text delta and the end.
type sseMemBase struct{}

func (sseMemBase) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	h := http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}}
	return &http.Response{StatusCode: 200, Status: "200 OK", Header: h, Body: io.NopCloser(strings.NewReader(anthropicGood)), Request: req}, nil
}

// streamPolicies are the policies a healthy stream is measured under.
var streamPolicies = []struct {
	name string
	p    Policy
}{
	{"New", Policy{}},
	{"RetryStreams", Policy{RetryStreams: true}},
	{"RetryStreams+timeouts", Policy{RetryStreams: true, AttemptTimeout: time.Minute, FirstEventTimeout: time.Minute, StreamIdleTimeout: time.Minute}},
	{"ContinueStreams", Policy{RetryStreams: true, ContinueStreams: true}},
}

// BenchmarkHealthyStream compares a healthy stream read to its end through
// the bare base and through llmretry with and without the stream guard.
func BenchmarkHealthyStream(b *testing.B) {
	b.Run("bare", func(b *testing.B) { benchmarkSuccess(b, sseMemBase{}, "http://mem.test/v1/messages") })
	for _, sp := range streamPolicies {
		rt, err := New(sseMemBase{}, sp.p)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(sp.name, func(b *testing.B) { benchmarkSuccess(b, rt, "http://mem.test/v1/messages") })
	}
}

// TestHealthyStreamCost holds the stream guard to a few allocations over
// the bare transport for a healthy stream read to its end: RetryStreams
// costs its read-ahead buffer and the body that replays it and follows
// the stream (2 over New; following the events allocates nothing);
// each opt-in timeout costs its timer, and AttemptTimeout the attempt's
// own context and a body that ends it. ContinueStreams keeps what a
// continuation needs, the first message's id and the delivered text,
// each in one buffer that grows by doubling (2 more here; a longer
// answer's text grows in a few more).
func TestHealthyStreamCost(t *testing.T) {
	send := func(rt http.RoundTripper) func() {
		return func() {
			req, _ := benchRequest("http://mem.test/v1/messages")
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	bare := testing.AllocsPerRun(200, send(sseMemBase{}))
	limits := map[string]float64{"New": 2, "RetryStreams": 4, "RetryStreams+timeouts": 16, "ContinueStreams": 6}
	for _, sp := range streamPolicies {
		rt, err := New(sseMemBase{}, sp.p)
		if err != nil {
			t.Fatal(err)
		}
		got := testing.AllocsPerRun(200, send(rt))
		if extra := got - bare; extra > limits[sp.name] {
			t.Errorf("%s: a healthy stream costs %.0f allocations more than bare; the target is at most %.0f", sp.name, extra, limits[sp.name])
		}
		t.Logf("allocs/op: bare %.0f, %s %.0f", bare, sp.name, got)
	}
}
