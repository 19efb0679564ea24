package testkit

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With, After and Stalled change a copy: a Reply in one script is never
// changed by another's.
func TestReplyCopies(t *testing.T) {
	base := Fail(http.StatusServiceUnavailable, "Retry-After", "3")
	changed := base.With("Retry-After", "9").With("X-Should-Retry", "true").After(time.Second).Stalled()
	assert.Equal(t, Fail(http.StatusServiceUnavailable, "Retry-After", "3"), base)
	assert.Equal(t, "9", changed.Header.Get("Retry-After"))
	assert.Equal(t, "true", changed.Header.Get("X-Should-Retry"))
	assert.Equal(t, time.Second, changed.Delay)
	assert.True(t, changed.Stall)

	assert.Equal(t, http.Header{"A": {"b"}}, OK().With("a", "b").Header, "a Reply without headers gets some")
}

// Response renders a reply as net/http's client returns one: the status
// text, HTTP/1.1, a header and a body of its own, the length, the request.
func TestReplyResponse(t *testing.T) {
	rep := Fail(http.StatusServiceUnavailable, "Retry-After", "3")
	req := Post(t, testURL, `{}`)
	resp := rep.Response(req)
	assert.Equal(t, "503 Service Unavailable", resp.Status)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "HTTP/1.1", resp.Proto)
	assert.Equal(t, 1, resp.ProtoMajor)
	assert.Equal(t, 1, resp.ProtoMinor)
	assert.Equal(t, int64(len("error 503")), resp.ContentLength)
	assert.Same(t, req, resp.Request)
	resp.Header.Set("Retry-After", "mine")
	assert.Equal(t, "3", rep.Header.Get("Retry-After"), "the response's header is a clone")

	again := rep.Response(req)
	for _, r := range []*http.Response{resp, again} {
		b, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		assert.Equal(t, "error 503", string(b), "each response has a body of its own")
	}

	stream := AnthropicStream("Hi")
	b, err := io.ReadAll(stream.Response(req).Body)
	require.NoError(t, err)
	assert.Equal(t, strings.Join(stream.Events, ""), string(b), "events are sent concatenated")
	assert.Equal(t, int64(len(b)), stream.Response(req).ContentLength)
	assert.Equal(t, int64(-1), stream.Stalled().Response(req).ContentLength)
}

// The replies anyone in front of a provider sends.
func TestGenericReplies(t *testing.T) {
	assert.Equal(t, Reply{Status: 200, Body: `{"answer":42}`}, OK())
	assert.Equal(t, Reply{Status: 429, Header: http.Header{"Retry-After": {"20"}}, Body: "error 429"}, Fail(429, "Retry-After", "20", "odd"))
	assert.Equal(t, Reply{Status: 500, Header: http.Header{}, Body: "error 500"}, Fail(500))

	err := Refused().Err
	assert.EqualError(t, err, "dial tcp 127.0.0.1:1: connect: connection refused")
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	var op *net.OpError
	assert.True(t, errors.As(err, &op) && op.Op == "dial", "a *net.OpError, as net/http's dial returns")

	bg := BadGateway()
	assert.Equal(t, http.StatusBadGateway, bg.Status)
	assert.Equal(t, "text/html", bg.Header.Get("Content-Type"))
	assert.Contains(t, bg.Body, "<center><h1>502 Bad Gateway</h1></center>")

	assert.Equal(t, `"a \"b\" \\ c\nd"`, Quote("a \"b\" \\ c\nd"))
	assert.Equal(t, "null", nullable(""))
	assert.Equal(t, `"x"`, nullable("x"))
}

// What a reply renders to is the same in memory and over the wire: the
// status, the reply's headers, the body's bytes; a scripted error is an
// error both ways.
func TestRoundTripAndServeHTTPAgree(t *testing.T) {
	replies := map[string]Reply{
		"ok":            OK(),
		"503":           Fail(503, "Retry-After", "3"),
		"bad gateway":   BadGateway(),
		"openai chat":   OpenAIChatCompletion("Hi"),
		"openai stream": OpenAIChatStream("Hel", "lo"),
		"openai 429":    OpenAIRateLimited("20"),
		"responses":     OpenAIResponsesStream("Hel", "lo"),
		"anthropic":     AnthropicStream("Hel", "lo"),
		"anthropic 529": AnthropicOverloaded(),
		"gemini":        GeminiStream("Hel", "lo"),
		"gemini quota":  GeminiQuota("q", "10", "20s"),
		"bedrock":       BedrockThrottled(),
		"refused":       Refused(),
	}
	for name, rep := range replies {
		t.Run(name, func(t *testing.T) {
			mem, memErr := render(t, NewProvider(rep), "https://api.openai.test")
			srv := httptest.NewServer(NewProvider(rep))
			defer srv.Close()
			wire, wireErr := render(t, srv.Client().Transport, srv.URL)
			if rep.Err != nil {
				assert.Error(t, memErr)
				assert.Error(t, wireErr, "the connection dropped")
				return
			}
			require.NoError(t, memErr)
			require.NoError(t, wireErr)
			assert.Equal(t, mem.code, wire.code)
			if http.StatusText(rep.Status) != "" {
				assert.Equal(t, mem.status, wire.status)
			}
			assert.Equal(t, mem.body, wire.body)
			for k := range rep.Header {
				assert.Equal(t, mem.header.Values(k), wire.header.Values(k), k)
			}
			want := rep.Header
			if want == nil {
				want = http.Header{}
			}
			assert.Equal(t, want, mem.header, "in memory, exactly the reply's headers")
		})
	}
}

// rendered is what a client reads of a response.
type rendered struct {
	code   int
	status string
	header http.Header
	body   string
}

// render sends a POST to base through rt and reads the answer.
func render(t *testing.T, rt http.RoundTripper, base string) (rendered, error) {
	t.Helper()
	resp, err := rt.RoundTrip(Post(t, base+"/v1/chat/completions", `{}`))
	if err != nil {
		return rendered{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return rendered{resp.StatusCode, resp.Status, resp.Header, string(b)}, nil
}
