package llmretry

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIsStreamDetection(t *testing.T) {
	big := bigMessages(3 << 20) // several MiB of conversation
	require.Greater(t, len(big), 3<<20)
	bigNestedLast := big[:len(big)-1] + `,{"role":"user","content":"x","stream":true}]`
	gemini := "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash"

	cases := []struct {
		name string
		req  func(t *testing.T) *http.Request
		want bool
	}{
		{"openai-go: stream as the last key after MiB of messages", func(t *testing.T) *http.Request {
			return streamRequest(t, testURL, `{"messages":`+big+`,"model":"gpt-4o","stream":true}`)
		}, true},
		{"anthropic-sdk-go: stream as the last key after MiB of messages", func(t *testing.T) *http.Request {
			return streamRequest(t, "https://api.anthropic.com/v1/messages", `{"max_tokens":1024,"messages":`+big+`,"model":"claude-sonnet-4-5","stream":true}`)
		}, true},
		{"stream last, spaced and with a trailing newline (encoding/json)", func(t *testing.T) *http.Request {
			return streamRequest(t, testURL, `{"messages":`+big+`, "stream" : true }`+"\n")
		}, true},
		{"stream as the first key before MiB of messages", func(t *testing.T) *http.Request {
			return streamRequest(t, testURL, `{"stream":true,"model":"gpt-4o","messages":`+big+`}`)
		}, true},
		{"small body, stream in the middle", func(t *testing.T) *http.Request {
			return streamRequest(t, testURL, `{"model":"m","stream": true,"messages":[]}`)
		}, true},
		{"nested stream true inside a message does not count", func(t *testing.T) *http.Request {
			return streamRequest(t, testURL, `{"model":"m","messages":[{"role":"user","content":"hi","stream":true}]}`)
		}, false},
		{"nested stream true in the last message of MiB does not count", func(t *testing.T) *http.Request {
			return streamRequest(t, testURL, `{"model":"m","messages":`+bigNestedLast+`}`)
		}, false},
		{"nested stream true in a last-key object does not count", func(t *testing.T) *http.Request {
			return streamRequest(t, testURL, `{"messages":`+big+`,"options":{"stream":true}}`)
		}, false},
		{"stream true inside a string does not count", func(t *testing.T) *http.Request {
			return streamRequest(t, testURL, `{"messages":[{"role":"user","content":"send \"stream\": true please"}],"model":"m"}`)
		}, false},
		{"stream false as the last key", func(t *testing.T) *http.Request {
			return streamRequest(t, testURL, `{"messages":`+big+`,"model":"gpt-4o","stream":false}`)
		}, false},
		{"stream false as the first key", func(t *testing.T) *http.Request {
			return streamRequest(t, testURL, `{"stream":false,"messages":`+big+`}`)
		}, false},
		{"no stream key", func(t *testing.T) *http.Request {
			return streamRequest(t, testURL, `{"messages":`+big+`,"model":"gpt-4o"}`)
		}, false},
		{"Accept: text/event-stream", func(t *testing.T) *http.Request {
			req := streamRequest(t, testURL, `{"model":"m"}`)
			req.Header.Set("Accept", "text/event-stream")
			return req
		}, true},
		{"Accept lists text/event-stream, any case, no body", func(t *testing.T) *http.Request {
			req, err := http.NewRequest(http.MethodGet, testURL, nil)
			require.NoError(t, err)
			req.Header.Add("Accept", "application/json")
			req.Header.Add("Accept", "Text/Event-Stream; q=0.9")
			return req
		}, true},
		{"Gemini ?alt=sse (key in the query too)", func(t *testing.T) *http.Request {
			return streamRequest(t, gemini+":generateContent?key=K&alt=sse", `{"contents":[]}`)
		}, true},
		{"Gemini :streamGenerateContent", func(t *testing.T) *http.Request {
			return streamRequest(t, gemini+":streamGenerateContent", `{"contents":[]}`)
		}, true},
		{"Gemini :generateContent?alt=json", func(t *testing.T) *http.Request {
			return streamRequest(t, gemini+":generateContent?alt=json", `{"contents":[]}`)
		}, false},
		{"alt=sse only inside another parameter's value", func(t *testing.T) *http.Request {
			return streamRequest(t, gemini+":generateContent?q=alt=sse", `{"contents":[]}`)
		}, false},
		{"a body without GetBody cannot be looked at", func(t *testing.T) *http.Request {
			req := streamRequest(t, testURL, `{"stream":true}`)
			req.GetBody = nil
			return req
		}, false},
		{"GetBody failing", func(t *testing.T) *http.Request {
			req := streamRequest(t, testURL, `{"stream":true}`)
			req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("gone") }
			return req
		}, false},
		{"GetBody reader without io.WriterTo, stream last in a small body", func(t *testing.T) *http.Request {
			body := `{"messages":` + bigMessages(100<<10) + `,"stream":true}`
			req := streamRequest(t, testURL, body)
			req.GetBody = func() (io.ReadCloser, error) {
				return io.NopCloser(readOnlyReader{strings.NewReader(body)}), nil
			}
			return req
		}, true},
		{"GetBody reader without io.WriterTo, stream first in MiB", func(t *testing.T) *http.Request {
			body := `{"stream":true,"messages":` + big + `}`
			req := streamRequest(t, testURL, body)
			req.GetBody = func() (io.ReadCloser, error) {
				return io.NopCloser(readOnlyReader{strings.NewReader(body)}), nil
			}
			return req
		}, true},
		{"GetBody reader without io.WriterTo, stream last after MiB", func(t *testing.T) *http.Request {
			body := `{"messages":` + big + `,"stream":true}`
			req := streamRequest(t, testURL, body)
			req.GetBody = func() (io.ReadCloser, error) {
				return io.NopCloser(readOnlyReader{strings.NewReader(body)}), nil
			}
			return req
		}, true},
		{"langchaingo: stream in the middle, after MiB of messages, before other keys", func(t *testing.T) *http.Request {
			return streamRequest(t, testURL, `{"model":"gpt-4o","messages":`+big+`,"stream":true,"stream_options":{"include_usage":true},"temperature":0}`)
		}, true},
		{"go-openai: stream in the middle of a small body", func(t *testing.T) *http.Request {
			return streamRequest(t, testURL, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`)
		}, true},
		{"an escaped key spelling stream", func(t *testing.T) *http.Request {
			return streamRequest(t, testURL, `{"messages":`+big+`,"str\u0065am":true,"model":"m"}`)
		}, true},
		{"the last of duplicate stream keys counts, as encoding/json counts it", func(t *testing.T) *http.Request {
			return streamRequest(t, testURL, `{"stream":true,"messages":`+big+`,"stream":false}`)
		}, false},
		{"stream true as a string does not count", func(t *testing.T) *http.Request {
			return streamRequest(t, testURL, `{"stream":"true","messages":[]}`)
		}, false},
		{"a body that is not a JSON object", func(t *testing.T) *http.Request {
			return streamRequest(t, testURL, `["stream",true]`)
		}, false},
		{"Bedrock ConverseStream path", func(t *testing.T) *http.Request {
			return streamRequest(t, "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream", `{"messages":[]}`)
		}, true},
		{"Bedrock InvokeModelWithResponseStream path", func(t *testing.T) *http.Request {
			return streamRequest(t, "https://bedrock-runtime.us-east-1.amazonaws.com/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fus.m/invoke-with-response-stream", `{"prompt":"hi"}`)
		}, true},
		{"Bedrock Converse path is not a stream", func(t *testing.T) *http.Request {
			return streamRequest(t, "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse", `{"messages":[]}`)
		}, false},
		{"Accept: application/vnd.amazon.eventstream", func(t *testing.T) *http.Request {
			req := streamRequest(t, "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/invoke", `{}`)
			req.Header.Set("Accept", "application/vnd.amazon.eventstream")
			return req
		}, true},
		{"no body, no header", func(t *testing.T) *http.Request {
			req, err := http.NewRequest(http.MethodGet, testURL, nil)
			require.NoError(t, err)
			return req
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := c.req(t)
			var want []byte
			var rec *countingBody
			if req.Body != nil && req.Body != http.NoBody {
				// Keep what the caller would send, and watch req.Body.
				var err error
				want, err = io.ReadAll(req.Body)
				require.NoError(t, err)
				rec = &countingBody{Reader: bytes.NewReader(want)}
				req.Body = rec
			}
			assert.Equal(t, c.want, IsStream(req))
			assert.Equal(t, c.want, IsStream(req), "asking again gives the same answer")
			if rec != nil {
				reads, closes := rec.counts()
				assert.Zero(t, reads, "req.Body is never read")
				assert.Zero(t, closes, "req.Body is never closed")
				got, err := io.ReadAll(req.Body)
				require.NoError(t, err)
				assert.True(t, bytes.Equal(want, got), "the caller still sends the whole body")
			}
		})
	}
	assert.False(t, IsStream(nil))
}

// The first reply to a stream request is handed back as it is: a 503 is not
// retried unless RetryStreams is set, and its body reaches the caller.
func TestStreamNotRetriedByDefault(t *testing.T) {
	body := `{"messages":` + bigMessages(1<<20) + `,"model":"gpt-4o","stream":true}`
	for _, getBody := range []bool{true, false} {
		t.Run(fmt.Sprintf("GetBody %v", getBody), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(testkit.Fail(503), testkit.OK())
				var rec recorder
				req := streamRequest(t, testURL, body)
				if !getBody {
					// The Transport sniffs its own copy of the body.
					req.Body = io.NopCloser(readOnlyReader{strings.NewReader(body)})
					req.GetBody = nil
				}
				start := time.Now()
				resp, err := mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}, OnAttempt: rec.on}).RoundTrip(req)
				require.NoError(t, err)
				assert.Equal(t, 1, prov.Attempts())
				assert.Equal(t, 503, resp.StatusCode)
				assert.Equal(t, "error 503", bodyOf(t, resp), "the provider's body, intact")
				assert.Zero(t, time.Since(start), "no wait")
				require.Len(t, rec.attempts, 1)
				assert.Zero(t, rec.attempts[0].RetryIn)
				// The stop says why: not "not retryable", false of a 503.
				ex := GaveUp(resp)
				require.NotNil(t, ex)
				assert.ErrorIs(t, ex.Reason, ErrNotRetryable)
				assert.Contains(t, ex.Error(), "not retried: a stream is sent once without Policy.RetryStreams")
				assert.Equal(t, ex.Reason, rec.attempts[0].Stop)
			})
		})
	}
	t.Run("a refused connection", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.Refused())
			_, err := mustNew(t, prov, Policy{}).RoundTrip(streamRequest(t, testURL, `{"stream":true}`))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrNotRetryable)
			assert.ErrorContains(t, err, "not retried: a stream is sent once without Policy.RetryStreams")
			assert.Equal(t, 1, prov.Attempts())
		})
	})
	t.Run("a 400 is not retryable", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.Fail(400))
			resp, err := mustNew(t, prov, Policy{}).RoundTrip(streamRequest(t, testURL, `{"stream":true}`))
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, "llmretry: not retryable: 400 Bad Request", GaveUp(resp).Error())
		})
	})
}

func TestStreamRetriedWithRetryStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		body := `{"messages":` + bigMessages(64<<10) + `,"model":"gpt-4o","stream":true}`
		prov := testkit.NewProvider(testkit.Fail(503), testkit.OK())
		req := streamRequest(t, testURL, body)
		resp, err := mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}, RetryStreams: true}).RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, `{"answer":42}`, bodyOf(t, resp))
		assert.Equal(t, []time.Duration{time.Second}, prov.Gaps())
		assert.Equal(t, []string{body, body}, prov.Bodies(), "the retry carried the whole body")
	})
}

// A 2xx event stream is handed back untouched when the policy does not
// retry streams: the very body the base returned, not read or closed by
// the Transport. With RetryStreams its opening is read ahead (the stream
// guard), and the caller still reads every byte the provider sent, from
// the first, with or without a retry before it.
func TestStreamResponseHandedBackUntouched(t *testing.T) {
	for _, c := range []struct {
		retryStreams, failFirst bool
	}{{false, false}, {true, false}, {true, true}} {
		t.Run(fmt.Sprintf("retry streams %v, after a failure %v", c.retryStreams, c.failFirst), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// A stream that ends at its completion marker.
				const stream = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n" +
					"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
				sse := &countingBody{Reader: strings.NewReader(stream)}
				var calls int
				base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
					calls++
					if c.failFirst && calls == 1 {
						return &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: http.Header{}, Body: io.NopCloser(strings.NewReader("busy")), Request: r}, nil
					}
					h := http.Header{}
					h.Set("Content-Type", "text/event-stream")
					return &http.Response{StatusCode: 200, Status: "200 OK", Header: h, Body: sse, Request: r}, nil
				})
				req := streamRequest(t, testURL, `{"model":"m","stream":true}`)
				req.Header.Set("Accept", "text/event-stream")
				resp, err := mustNew(t, base, Policy{Waits: []time.Duration{time.Second}, RetryStreams: c.retryStreams}).RoundTrip(req)
				require.NoError(t, err)
				assert.Equal(t, 200, resp.StatusCode)
				reads, closes := sse.counts()
				if !c.retryStreams {
					assert.True(t, resp.Body == io.ReadCloser(sse), "the base's own body object")
					assert.Zero(t, reads, "not a byte of the stream read by the Transport")
				}
				assert.Zero(t, closes)
				assert.Empty(t, resp.Header.Values("X-Should-Retry"))
				assert.Nil(t, GaveUp(resp))
				assert.Equal(t, stream, bodyOf(t, resp))
				want := 1
				if c.failFirst {
					want = 2
				}
				assert.Equal(t, want, calls)
			})
		})
	}
}

// An error reply labelled text/event-stream (to a request that is not a
// stream) is decided by its status like any other: a 503 is retried, a 400
// is returned at once with its body.
func TestErrorReplyLabelledEventStreamIsDecidedByStatus(t *testing.T) {
	for _, c := range []struct {
		status   int
		attempts int
	}{{503, 2}, {400, 1}} {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(testkit.Fail(c.status, "Content-Type", "text/event-stream"), testkit.Fail(c.status, "Content-Type", "text/event-stream"))
				resp, err := post(t, mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}}), context.Background())
				require.NoError(t, err)
				assert.Equal(t, c.attempts, prov.Attempts())
				assert.Equal(t, c.status, resp.StatusCode)
				assert.Equal(t, fmt.Sprintf("error %d", c.status), bodyOf(t, resp))
			})
		})
	}
}

// Stream detection costs nothing on the success path: a request that
// succeeds first time never has its body fetched again. After a failure it
// is sniffed once per call, and not at all with RetryStreams.
func TestStreamDetectionCostsNothingOnSuccess(t *testing.T) {
	big := bigMessages(1 << 20)
	cases := []struct {
		name    string
		script  []testkit.Reply
		policy  Policy
		getBody int
	}{
		{"stream, first try succeeds", []testkit.Reply{testkit.OK()}, Policy{}, 0},
		{"stream, first try fails", []testkit.Reply{testkit.Fail(503), testkit.OK()}, Policy{}, 1},                                                    // one sniff, no retry
		{"stream with RetryStreams, two retries", []testkit.Reply{testkit.Fail(503), testkit.Fail(503), testkit.OK()}, Policy{RetryStreams: true}, 2}, // no sniff, two bodies
		{"not a stream, three retries", []testkit.Reply{testkit.Fail(503), testkit.Fail(503), testkit.Fail(503), testkit.OK()}, Policy{}, 4},          // one sniff, three bodies
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(c.script...)
				stream := `,"stream":true}`
				if strings.HasPrefix(c.name, "not") {
					stream = `}`
				}
				req := streamRequest(t, testURL, `{"messages":`+big+stream)
				count := countGetBody(req)
				c.policy.Waits = []time.Duration{time.Second, time.Second, time.Second}
				resp, err := mustNew(t, prov, c.policy).RoundTrip(req)
				require.NoError(t, err)
				bodyOf(t, resp)
				assert.Equal(t, c.getBody, count())
			})
		})
	}
}

// The detector on what real clients send (testdata/clients, captured by
// interop's TestClientRequestCaptures): go-openai, langchaingo's OpenAI
// and Anthropic LLMs with "stream":true in the middle of a 9 KiB body, and
// Bedrock's streaming paths. Each body is read through GetBody only, from
// an in-memory copy and piece by piece (as from a file), with the same
// answer; the file name says the right one.
func TestIsStreamOnRealClientRequests(t *testing.T) {
	files, err := filepath.Glob("testdata/clients/*.http")
	require.NoError(t, err)
	require.Len(t, files, 10, "the captures in testdata/clients")
	for _, name := range files {
		t.Run(filepath.Base(name), func(t *testing.T) {
			raw, err := os.ReadFile(name)
			require.NoError(t, err)
			req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
			require.NoError(t, err)
			body, err := io.ReadAll(req.Body)
			require.NoError(t, err)
			req.URL.Scheme, req.URL.Host = "https", req.Host
			want := strings.HasSuffix(name, "_stream.http")
			require.True(t, want || strings.HasSuffix(name, "_nostream.http"), "a capture says which it is")
			for _, piecewise := range []bool{false, true} {
				req.Body = untouchable{t}
				req.GetBody = func() (io.ReadCloser, error) {
					if piecewise {
						return io.NopCloser(readOnlyReader{bytes.NewReader(body)}), nil
					}
					return io.NopCloser(bytes.NewReader(body)), nil
				}
				assert.Equal(t, want, IsStream(req), "read piece by piece: %v", piecewise)
			}
		})
	}
}

// IsStream scans a 64 MiB in-memory body whole, handed over without a copy
// and in constant memory: it allocates next to nothing and never touches
// req.Body.
func TestIsStreamBoundedOnHugeBody(t *testing.T) {
	body := bytes.Repeat([]byte(`{"role":"user","content":"lorem ipsum"},`), (64<<20)/40)
	body = append(append([]byte(`{"messages":[`), body...), `{}],"stream":true}`...)
	req, err := http.NewRequest(http.MethodPost, testURL, bytes.NewReader(body))
	require.NoError(t, err)
	req.Body = untouchable{t}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got := IsStream(req)
	runtime.ReadMemStats(&after)
	assert.True(t, got, "the SDKs' trailing \"stream\":true is found")
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<10), "at most a few KiB, whatever the body's size")
}

// BenchmarkIsStream measures the stream detector on what SDKs send: a
// small body with "stream":true last, a 1 MiB conversation with it last
// (handed over whole), and the same read piece by piece (as from a file).
func BenchmarkIsStream(b *testing.B) {
	small := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true}`)
	big := []byte(`{"messages":` + bigMessages(1<<20) + `,"model":"gpt-4o","stream":true}`)
	for _, c := range []struct {
		name      string
		body      []byte
		piecewise bool
	}{{"small", small, false}, {"1MiB", big, false}, {"1MiB/piecewise", big, true}} {
		b.Run(c.name, func(b *testing.B) {
			req, err := http.NewRequest(http.MethodPost, "https://api.openai.com/v1/chat/completions", bytes.NewReader(c.body))
			if err != nil {
				b.Fatal(err)
			}
			if c.piecewise {
				req.GetBody = func() (io.ReadCloser, error) {
					return io.NopCloser(readOnlyReader{bytes.NewReader(c.body)}), nil
				}
			}
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				if !IsStream(req) {
					b.Fatal("not a stream")
				}
			}
		})
	}
}

// untouchable is a request body that fails the test when used.
type untouchable struct{ t *testing.T }

func (u untouchable) Read([]byte) (int, error) {
	u.t.Error("req.Body was read")
	return 0, io.EOF
}

func (u untouchable) Close() error {
	u.t.Error("req.Body was closed")
	return nil
}

// Stream openings as providers send them.
const (
	anthropicPreamble = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
	anthropicGood = anthropicPreamble +
		"event: ping\ndata: {\"type\":\"ping\"}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	openAIGood = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"}}]}\n\n" +
		"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
		"data: [DONE]\n\n"
	// feOverloaded is Anthropic's overloaded error event.
	feOverloaded = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
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
// call at deadline − reserve with ErrNoTimeLeft; one whose headers come
// after that line is not read ahead (no retry could follow) but handed
// over, as it is without RetryStreams.
func TestStreamGuardKeepsTheReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return sseResponse(r, newStallBody(": keep-alive\n\n")), nil
		})
		ctx := withDeadline(t, 30*time.Second)
		req := streamRequest(t, testURL, `{"stream":true}`).WithContext(ctx)
		start := time.Now()
		_, err := mustNew(t, base, Policy{RetryStreams: true, Reserve: 10 * time.Second}).RoundTrip(req)
		assert.ErrorIs(t, err, ErrNoTimeLeft)
		assert.Equal(t, 20*time.Second, time.Since(start))
	})
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.OpenAIChatStream("hello").After(25 * time.Second))
		req := streamRequest(t, testURL, `{"model":"m","stream":true}`).WithContext(withDeadline(t, 30*time.Second))
		resp, err := mustNew(t, prov, Policy{RetryStreams: true, Reserve: 10 * time.Second}).RoundTrip(req)
		require.NoError(t, err, "the stream that came is handed over")
		b, err := readAll(resp)
		assert.NoError(t, err)
		assert.Contains(t, b, "[DONE]")
	})
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
	ctx := withDeadline(t, time.Minute)
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

// A committed stream that goes silent ends with an error from Body.Read
// within StreamIdleTimeout, never a clean end; a stream that keeps coming
// is read to its end.
func TestStreamIdleTimeout(t *testing.T) {
	for _, retryStreams := range []bool{false, true} {
		t.Run(map[bool]string{false: "committed at once", true: "after the guard"}[retryStreams], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				pr, pw := io.Pipe()
				base := roundTripFunc(func(r *http.Request) (*http.Response, error) { return sseResponse(r, pr), nil })
				go func() {
					for i := 0; i < 5; i++ { // 4 s apart: under the bound
						pw.Write([]byte("data: {\"delta\":\"x\"}\n\n"))
						time.Sleep(4 * time.Second)
					}
					// then silence, with the connection open
				}()
				req := streamRequest(t, testURL, `{"model":"m","stream":true}`)
				resp, err := mustNew(t, base, Policy{RetryStreams: retryStreams, StreamIdleTimeout: 5 * time.Second}).RoundTrip(req)
				require.NoError(t, err)
				start := time.Now()
				b, err := io.ReadAll(resp.Body)
				assert.Equal(t, strings.Repeat("data: {\"delta\":\"x\"}\n\n", 5), string(b))
				require.Error(t, err, "a stall is never a clean end")
				assert.NotErrorIs(t, err, io.EOF)
				var ne net.Error
				require.ErrorAs(t, err, &ne)
				assert.True(t, ne.Timeout())
				assert.Contains(t, err.Error(), "Policy.StreamIdleTimeout (5s)")
				assert.Equal(t, 16*time.Second+5*time.Second, time.Since(start), "the last bytes at 16 s, then 5 s of silence")
				require.NoError(t, resp.Body.Close())
				pw.Close()
			})
		})
	}
	t.Run("a stream that keeps coming", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			pr, pw := io.Pipe()
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) { return sseResponse(r, pr), nil })
			go func() {
				for i := 0; i < 10; i++ {
					time.Sleep(4 * time.Second)
					pw.Write([]byte("data: {\"delta\":\"x\"}\n\n"))
				}
				pw.Close()
			}()
			resp, err := mustNew(t, base, Policy{StreamIdleTimeout: 5 * time.Second}).RoundTrip(streamRequest(t, testURL, `{"stream":true}`))
			require.NoError(t, err)
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, strings.Repeat("data: {\"delta\":\"x\"}\n\n", 10), string(b))
			require.NoError(t, resp.Body.Close())
		})
	})
	// The bound runs while a read waits: a caller that takes longer than
	// it between two reads of a stream whose bytes had all arrived reads
	// the whole answer, followed or not.
	for _, retryStreams := range []bool{false, true} {
		t.Run(fmt.Sprintf("a caller's pause, RetryStreams %v", retryStreams), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				whole := chatStream("c1", true, "Hello", " world!")
				base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
					return sseResponse(r, io.NopCloser(strings.NewReader(whole))), nil
				})
				resp, err := mustNew(t, base, Policy{RetryStreams: retryStreams, StreamIdleTimeout: 5 * time.Second}).RoundTrip(streamRequest(t, testURL, `{"model":"m","stream":true}`))
				require.NoError(t, err)
				defer resp.Body.Close()
				buf := make([]byte, 16)
				_, err = io.ReadFull(resp.Body, buf)
				require.NoError(t, err)
				time.Sleep(6 * time.Second) // the caller is busy with what it read
				rest, err := io.ReadAll(resp.Body)
				assert.NoError(t, err, "the provider was not silent")
				assert.Equal(t, whole, string(buf)+string(rest))
			})
		})
	}
	// A 2xx stream the guard gave up on (its first event an error no
	// retry fixes) is handed over as it is, and bounded like any other.
	t.Run("a stream the guard gave up on", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			body := newStallBody("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"max_tokens too large\"}}\n\n")
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) { return sseResponse(r, body), nil })
			resp, err := mustNew(t, base, Policy{RetryStreams: true, StreamIdleTimeout: 5 * time.Second}).RoundTrip(streamRequest(t, testURL, `{"model":"m","stream":true}`))
			require.NoError(t, err)
			require.NotNil(t, GaveUp(resp))
			start := time.Now()
			_, err = io.ReadAll(resp.Body)
			assert.ErrorContains(t, err, "Policy.StreamIdleTimeout (5s)")
			assert.Equal(t, 5*time.Second, time.Since(start))
			require.NoError(t, resp.Body.Close())
		})
	})
	t.Run("not a stream", func(t *testing.T) {
		body := io.NopCloser(strings.NewReader("{}"))
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: body, Request: r}, nil
		})
		resp, err := post(t, mustNew(t, base, Policy{StreamIdleTimeout: time.Second}), context.Background())
		require.NoError(t, err)
		assert.True(t, resp.Body == body, "a JSON answer is handed over as it is")
	})
}

func TestHasMediaType(t *testing.T) {
	for _, c := range []struct {
		ct   string
		want bool
	}{
		{"text/event-stream", true},
		{"text/event-stream; charset=utf-8", true},
		{" Text/Event-Stream", true},
		{"text/event-streams", false},
		{"application/json", false},
		{"", false},
	} {
		assert.Equal(t, c.want, hasMediaType(c.ct, "text/event-stream"), c.ct)
	}
	assert.False(t, errors.Is(&boundError{}, context.DeadlineExceeded), "a bound of the policy is not the caller's deadline")
}
