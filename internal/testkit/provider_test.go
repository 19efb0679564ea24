package testkit

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testURL = "https://api.openai.test/v1/chat/completions"

// send posts body to testURL through rt and returns the response's status
// and whole body, or "refused" for a refused connection.
func send(t *testing.T, rt http.RoundTripper, body string) string {
	t.Helper()
	resp, err := rt.RoundTrip(Post(t, testURL, body))
	if err != nil {
		require.ErrorIs(t, err, syscall.ECONNREFUSED)
		return "refused"
	}
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, int64(len(b)), resp.ContentLength)
	return resp.Status
}

// The script runs in order, its last reply repeats, a scripted error drops
// the connection over the wire, and the in-memory form returns it as is.
func TestProviderScript(t *testing.T) {
	script := []Reply{BadGateway(), Refused(), OpenAIChatCompletion("Hi")}

	t.Run("in memory", func(t *testing.T) {
		prov := NewProvider(script...)
		var got []string
		for i := range 4 {
			got = append(got, send(t, prov, `{"n":`+string(rune('1'+i))+`}`))
		}
		assert.Equal(t, []string{"502 Bad Gateway", "refused", "200 OK", "200 OK"}, got)
		assert.Equal(t, 4, prov.Attempts())
		assert.Equal(t, []string{`{"n":1}`, `{"n":2}`, `{"n":3}`, `{"n":4}`}, prov.Bodies())
	})

	t.Run("over the wire", func(t *testing.T) {
		prov := NewProvider(script...)
		srv := httptest.NewServer(prov)
		defer srv.Close()
		var got []string
		for range 3 {
			resp, err := srv.Client().Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{}`))
			if err != nil {
				got = append(got, "dropped")
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			got = append(got, resp.Status)
		}
		assert.Equal(t, []string{"502 Bad Gateway", "dropped", "200 OK"}, got)
		assert.Equal(t, "/v1/chat/completions", prov.Received()[0].Path)
		assert.Equal(t, 3, prov.Attempts())
	})
}

// A computed provider's function sees each call, numbered from 1.
func TestProviderFunc(t *testing.T) {
	var seen []int
	prov := NewProviderFunc(func(c Call, n int) Reply {
		seen = append(seen, n)
		if c.Body == "down" {
			return Fail(http.StatusServiceUnavailable)
		}
		return OK()
	})
	assert.Equal(t, "503 Service Unavailable", send(t, prov, "down"))
	assert.Equal(t, "200 OK", send(t, prov, "up"))
	assert.Equal(t, []int{1, 2}, seen)
}

// A provider without a script is a mistake in the test: it says so.
func TestProviderWithoutScript(t *testing.T) {
	assert.PanicsWithValue(t, "testkit.NewProvider: empty script", func() { NewProvider() })
	assert.Panics(t, func() { _, _ = new(Provider).RoundTrip(Post(t, testURL, `{}`)) })
}

// Every call is recorded as the client built it: the request's own header
// (a clone: the client may reuse its map), the body read in full, and how
// the body came.
func TestProviderRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := NewProvider(Fail(http.StatusTooManyRequests), OK())
		start := time.Now()

		req := StainlessPost(t, "https://api.anthropic.test/v1/a%2Fb?beta=true", `{"stream":true}`)
		req.Header.Set("X-Api-Key", "k1")
		_, err := prov.RoundTrip(req)
		require.NoError(t, err)
		req.Header.Set("X-Api-Key", "changed after")

		time.Sleep(3 * time.Second)
		req2, err := http.NewRequest(http.MethodGet, "https://api.anthropic.test/v1/models", nil)
		require.NoError(t, err)
		req2.Host = "proxy.test"
		_, err = prov.RoundTrip(req2)
		require.NoError(t, err)

		calls := prov.Received()
		require.Len(t, calls, 2)
		assert.Equal(t, Call{
			At: start, Method: http.MethodPost, Path: "/v1/a/b", RawPath: "/v1/a%2Fb", Query: "beta=true", Host: "api.anthropic.test",
			Header:  http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json"}, "X-Api-Key": {"k1"}},
			Body:    `{"stream":true}`,
			GetBody: true, BodyType: "io.nopCloserWriterTo wrapping *bytes.Reader", ContentLength: 15,
		}, calls[0])
		assert.Equal(t, Call{
			At: start.Add(3 * time.Second), Method: http.MethodGet, Path: "/v1/models", Host: "proxy.test",
			Header: http.Header{}, BodyType: "<nil>",
		}, calls[1])
		assert.Equal(t, []time.Duration{3 * time.Second}, prov.Gaps())
		assert.Equal(t, []string{"k1", ""}, prov.HeaderValues("X-Api-Key"))
		assert.Equal(t, []string{`{"stream":true}`, ""}, prov.Bodies())

		calls[0].Body = "mine"
		calls[0].Header.Set("X-Api-Key", "mine")
		assert.Equal(t, `{"stream":true}`, prov.Received()[0].Body, "Received returns copies")
		assert.Equal(t, "k1", prov.Received()[0].Header.Get("X-Api-Key"), "headers included")

		script := []Reply{OK(), Fail(503)}
		scripted := NewProvider(script...)
		script[0] = Fail(500)
		assert.Equal(t, "200 OK", send(t, scripted, `{}`), "the provider keeps its own script")
	})
}

// A recorded call makes a request again, for the functions that look at
// one (llmretry.IsStream).
func TestCallRequest(t *testing.T) {
	prov := NewProvider(OK())
	_, err := prov.RoundTrip(StainlessPost(t, "https://generativelanguage.googleapis.test/v1beta/models/m:streamGenerateContent?alt=sse", `{"contents":[]}`))
	require.NoError(t, err)
	req := prov.Received()[0].Request(t)
	assert.Equal(t, http.MethodPost, req.Method)
	assert.Equal(t, "https://generativelanguage.googleapis.test/v1beta/models/m:streamGenerateContent?alt=sse", req.URL.String())
	assert.Equal(t, "application/json", req.Header.Get("Accept"))
	b, err := io.ReadAll(req.Body)
	require.NoError(t, err)
	assert.Equal(t, `{"contents":[]}`, string(b))
}

// Inside a synctest bubble a delayed reply comes exactly when it is due,
// and a request whose context ends first gets the context's error then.
func TestProviderDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := NewProvider(OK().After(10 * time.Minute))
		start := time.Now()
		assert.Equal(t, "200 OK", send(t, prov, `{}`))
		assert.Equal(t, 10*time.Minute, time.Since(start))

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start = time.Now()
		resp, err := prov.RoundTrip(Post(t, testURL, `{}`).WithContext(ctx))
		assert.Nil(t, resp)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 30*time.Second, time.Since(start))
		assert.Equal(t, 2, prov.Attempts(), "the request reached the provider")
	})
}

// A stalled body sends its bytes, then nothing: a Read blocks until the
// body is closed or the request's context ends, on channels only, so the
// bubble's clock moves on.
func TestProviderStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stalled := AnthropicStream("Hel", "lo")
		stalled.Events = stalled.Events[:1]
		prov := NewProvider(stalled.Stalled())

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := prov.RoundTrip(Post(t, testURL, `{}`).WithContext(ctx))
		require.NoError(t, err)
		assert.Equal(t, int64(-1), resp.ContentLength, "a stream of unknown length")
		start := time.Now()
		b, err := io.ReadAll(resp.Body)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, stalled.Events[0], string(b), "the bytes, then silence")
		assert.Equal(t, time.Minute, time.Since(start))

		resp, err = prov.RoundTrip(Post(t, testURL, `{}`))
		require.NoError(t, err)
		go func() {
			time.Sleep(5 * time.Second)
			resp.Body.Close()
		}()
		start = time.Now()
		b, err = io.ReadAll(resp.Body)
		assert.EqualError(t, err, "http: read on closed response body")
		assert.Equal(t, stalled.Events[0], string(b))
		assert.Equal(t, 5*time.Second, time.Since(start))
		_, err = resp.Body.Read(make([]byte, 1))
		assert.EqualError(t, err, "http: read on closed response body", "closed stays closed")
	})
}

// Over the wire each event is flushed as it is written: a client reads
// the events of a stalled stream although the handler never ends.
func TestProviderServeHTTPFlushes(t *testing.T) {
	stalled := OpenAIChatStream("Hel", "lo")
	prov := NewProvider(stalled.Stalled())
	srv := httptest.NewServer(prov)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound, should flushing break
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(`{}`))
	require.NoError(t, err)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	want := stalled.payload()
	got := make([]byte, len(want))
	_, err = io.ReadFull(resp.Body, got)
	require.NoError(t, err, "every event arrived before the silence")
	assert.Equal(t, want, string(got))
	assert.Equal(t, "text/event-stream; charset=utf-8", resp.Header.Get("Content-Type"))
}

// Hosts sends a request to its host's provider, and refuses an unknown
// host with an error that names it.
func TestHosts(t *testing.T) {
	primary, fallback := NewProvider(BadGateway()), NewProvider(OK())
	h := Hosts{"api.openai.test": primary, "fallback.test": fallback}
	assert.Equal(t, "502 Bad Gateway", send(t, h, `{}`))
	resp, err := h.RoundTrip(Post(t, "https://fallback.test/v1/chat/completions", `{}`))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, 1, primary.Attempts())
	assert.Equal(t, 1, fallback.Attempts())
	_, err = h.RoundTrip(Post(t, "https://elsewhere.test/v1", `{}`))
	assert.ErrorContains(t, err, "elsewhere.test")
}
