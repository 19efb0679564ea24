package llmretry

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Stream openings as providers send them.
const (
	anthropicPreamble = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
	anthropicGood = anthropicPreamble +
		"event: ping\ndata: {\"type\":\"ping\"}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	openAIGood = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"}}]}\n\n" +
		"data: [DONE]\n\n"
)

// guardedProvider answers each attempt with the next stream opening of its
// script (the last repeats) as a 200 text/event-stream, and records when
// each attempt came and whether its body was closed.
type guardedProvider struct {
	script []string

	mu     sync.Mutex
	times  []time.Time
	bodies []*countingBody
}

func (g *guardedProvider) RoundTrip(r *http.Request) (*http.Response, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.script[min(len(g.times), len(g.script)-1)]
	g.times = append(g.times, time.Now())
	body := &countingBody{Reader: strings.NewReader(s)}
	g.bodies = append(g.bodies, body)
	return sseResponse(r, body), nil
}

func (g *guardedProvider) attempts() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.times)
}

func (g *guardedProvider) gap(i int) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.times[i].Sub(g.times[i-1])
}

// A stream whose first deciding event is an error is retried, whatever the
// provider's shape, and the caller reads only the good attempt's bytes,
// from the first; a stream whose first deciding event is content is
// handed over even if an error follows.
func TestStreamGuard(t *testing.T) {
	cases := []struct {
		name     string
		first    string
		good     string
		attempts int
		gap      time.Duration // the least wait before attempt 2
	}{
		{"anthropic overloaded", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", anthropicGood, 2, 0},
		{"anthropic api_error", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal server error\"}}\n\n", anthropicGood, 2, 0},
		{"anthropic rate limit", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"Rate limited\"}}\n\n", anthropicGood, 2, 0},
		{"anthropic preamble then overloaded", anthropicPreamble + "event: ping\ndata: {\"type\":\"ping\"}\n\n: keep-alive\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", anthropicGood, 2, 0},
		{"openai chat error chunk", "data: {\"error\":{\"message\":\"The server had an error while processing your request.\",\"type\":\"server_error\",\"code\":null}}\n\n", openAIGood, 2, 0},
		{"openai chat rate limit with a stated wait", "data: {\"error\":{\"message\":\"Rate limit reached for gpt-4o. Please try again in 7.5s.\",\"type\":\"requests\",\"code\":\"rate_limit_exceeded\"}}\n\n", openAIGood, 2, 7500 * time.Millisecond},
		{"openai responses overloaded", "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\"}}\n\nevent: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"response\":{\"id\":\"resp_1\"}}\n\nevent: error\ndata: {\"type\":\"error\",\"code\":\"server_is_overloaded\",\"message\":\"Overloaded\"}\n\n", openAIGood, 2, 0},
		{"gemini unavailable", "data: {\"error\":{\"code\":503,\"message\":\"The model is overloaded.\",\"status\":\"UNAVAILABLE\"}}\n\n", openAIGood, 2, 0},
		{"content then error", anthropicPreamble + "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", anthropicGood, 1, 0},
		{"a healthy stream", anthropicGood, anthropicGood, 1, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := &guardedProvider{script: []string{c.first, c.good}}
				var rec recorder
				rt := mustNew(t, prov, Policy{Waits: []time.Duration{0}, MaxRetries: 3, RetryStreams: true, OnAttempt: rec.on})
				resp, err := rt.RoundTrip(streamRequest(t, testURL, `{"model":"m","stream":true}`))
				require.NoError(t, err)
				want := c.good
				if c.attempts == 1 {
					want = c.first
				}
				assert.Equal(t, want, bodyOf(t, resp), "exactly the handed-over attempt's bytes, from the first")
				require.Equal(t, c.attempts, prov.attempts())
				assert.Nil(t, GaveUp(resp))
				if c.attempts == 2 {
					assert.GreaterOrEqual(t, prov.gap(1), c.gap, "the wait the error states")
					assert.Equal(t, 200, rec.attempts[0].Response.StatusCode)
					_, closes := prov.bodies[0].stats()
					assert.Equal(t, 1, closes, "the failed attempt's stream is closed")
				}
			})
		})
	}
}

// An error no retry fixes, and a stream error when no retry is left: the
// caller gets the stream as the provider sent it, with the record.
func TestStreamGuardGivesUp(t *testing.T) {
	cases := []struct {
		name     string
		stream   string
		policy   Policy
		want     error
		attempts int
	}{
		{"invalid request", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"max_tokens too large\"}}\n\n", Policy{RetryStreams: true}, ErrNotRetryable, 1},
		{"retries spent", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", Policy{RetryStreams: true, Waits: []time.Duration{time.Second}}, ErrRetriesSpent, 2},
		{"spent quota", "data: {\"error\":{\"message\":\"You exceeded your current quota.\",\"type\":\"insufficient_quota\",\"code\":\"insufficient_quota\"}}\n\n", Policy{RetryStreams: true}, ErrProviderRefused, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := &guardedProvider{script: []string{c.stream}}
				var rec recorder
				c.policy.OnAttempt = rec.on
				resp, err := mustNew(t, prov, c.policy).RoundTrip(streamRequest(t, testURL, `{"stream":true}`))
				require.NoError(t, err)
				assert.Equal(t, 200, resp.StatusCode)
				assert.Equal(t, c.stream, bodyOf(t, resp), "the provider's bytes, from the first")
				assert.Equal(t, c.attempts, prov.attempts())
				ex := GaveUp(resp)
				require.NotNil(t, ex)
				assert.ErrorIs(t, ex.Reason, c.want)
				assert.ErrorIs(t, rec.attempts[len(rec.attempts)-1].Stop, c.want)
			})
		})
	}
}

// A first event that never comes costs one FirstEventTimeout: the attempt
// is abandoned (its body closed) and retried.
func TestFirstEventTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stalled := newStallBody(": keep-alive\n\n")
		calls := 0
		var times []time.Time
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			calls++
			times = append(times, time.Now())
			if calls == 1 {
				// headers, a keep-alive comment, then nothing
				return sseResponse(r, stalled), nil
			}
			return sseResponse(r, io.NopCloser(strings.NewReader(openAIGood))), nil
		})
		var rec recorder
		resp, err := mustNew(t, base, Policy{RetryStreams: true, Waits: []time.Duration{time.Second}, FirstEventTimeout: 10 * time.Second, OnAttempt: rec.on}).RoundTrip(streamRequest(t, testURL, `{"stream":true}`))
		require.NoError(t, err)
		assert.Equal(t, openAIGood, bodyOf(t, resp))
		require.Equal(t, 2, calls)
		assert.Equal(t, 11*time.Second, times[1].Sub(times[0]))
		assert.Contains(t, rec.attempts[0].Err.Error(), "no first event within Policy.FirstEventTimeout (10s)")
		select {
		case <-stalled.closed:
		default:
			t.Fatal("the stalled stream was not closed")
		}
	})
}

// The read-ahead never passes the call's limits: under a deadline whose
// reserve leaves 20 s, a stream that never sends its first event ends the
// call at deadline − reserve with ErrNoTimeLeft.
func TestStreamGuardKeepsTheReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return sseResponse(r, newStallBody(": keep-alive\n\n")), nil
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req := streamRequest(t, testURL, `{"stream":true}`).WithContext(ctx)
		start := time.Now()
		_, err := mustNew(t, base, Policy{RetryStreams: true, Reserve: 10 * time.Second}).RoundTrip(req)
		assert.ErrorIs(t, err, ErrNoTimeLeft)
		assert.Equal(t, 20*time.Second, time.Since(start))
	})
}

// Bedrock's binary event stream is handed over untouched.
func TestStreamGuardLeavesEventStreamAlone(t *testing.T) {
	body := io.NopCloser(bytes.NewReader([]byte{0, 0, 0, 42, 0, 0, 0, 0}))
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/vnd.amazon.eventstream"}}, Body: body, Request: r}, nil
	})
	resp, err := mustNew(t, base, Policy{RetryStreams: true}).RoundTrip(streamRequest(t, "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse-stream", `{}`))
	require.NoError(t, err)
	assert.True(t, resp.Body == body, "the base's own body object")
}

// Over a real loopback connection: attempt 1 opens with Anthropic's
// overloaded_error after its preamble, attempt 2 streams 200 events
// flushed one by one; the caller reads exactly attempt 2's bytes.
func TestStreamGuardOverLoopback(t *testing.T) {
	var mu sync.Mutex
	attempts := 0
	var good bytes.Buffer
	good.WriteString(anthropicPreamble)
	for i := 0; i < 200; i++ {
		fmt.Fprintf(&good, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"word %d \"}}\n\n", i)
	}
	good.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		attempts++
		n := attempts
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		fl := w.(http.Flusher)
		if n == 1 {
			io.WriteString(w, anthropicPreamble)
			fl.Flush()
			io.WriteString(w, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n")
			return
		}
		b := good.Bytes()
		for len(b) > 0 {
			k := min(len(b), 97) // odd-sized writes, each flushed
			w.Write(b[:k])
			fl.Flush()
			b = b[k:]
		}
	}))
	defer srv.Close()
	rt := mustNew(t, srv.Client().Transport, Policy{RetryStreams: true, Waits: []time.Duration{10 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := streamRequest(t, srv.URL+"/v1/messages", `{"model":"m","stream":true}`).WithContext(ctx)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	got := bodyOf(t, resp)
	assert.Equal(t, good.String(), got)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 2, attempts)
}

// The guard waits for the first event that decides and not a byte more:
// a stream whose first delta comes at once and the rest 10 s later is
// handed over at once.
func TestStreamGuardAddsNoLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pr, pw := io.Pipe()
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) { return sseResponse(r, pr), nil })
		go func() {
			io.WriteString(pw, anthropicPreamble+"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n")
			time.Sleep(10 * time.Second)
			io.WriteString(pw, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
			pw.Close()
		}()
		start := time.Now()
		resp, err := mustNew(t, base, Policy{RetryStreams: true, FirstEventTimeout: time.Minute}).RoundTrip(streamRequest(t, testURL, `{"stream":true}`))
		require.NoError(t, err)
		assert.Zero(t, time.Since(start), "handed over at its first delta")
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.True(t, strings.HasSuffix(string(b), "message_stop\"}\n\n"))
		assert.Equal(t, 10*time.Second, time.Since(start))
		resp.Body.Close()
	})
}
