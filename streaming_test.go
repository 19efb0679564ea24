package llmretry

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bigMessages returns a chat "messages" JSON array of at least size bytes,
// the bulk of a long agent conversation.
func bigMessages(size int) string {
	var b strings.Builder
	b.Grow(size + 2048)
	b.WriteString("[")
	content := strings.Repeat("lorem ipsum ", 85) // about 1 KiB
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"role":"user","content":%q}`, content)
	}
	b.WriteString("]")
	return b.String()
}

// readOnlyReader hides every method of its reader but Read (no
// io.WriterTo), like a body streamed from a file or a pipe.
type readOnlyReader struct{ r io.Reader }

func (r readOnlyReader) Read(p []byte) (int, error) { return r.r.Read(p) }

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
				prov := newProvider(fail(503), ok)
				var rec recorder
				req := streamRequest(t, testURL, body)
				if !getBody {
					// The Transport sniffs its own copy of the body.
					req.Body = io.NopCloser(readOnlyReader{strings.NewReader(body)})
					req.GetBody = nil
				}
				start := time.Now()
				resp, err := mustNew(t, prov.mock, Policy{Waits: []time.Duration{time.Second}, OnAttempt: rec.on}).RoundTrip(req)
				require.NoError(t, err)
				assert.Equal(t, 1, prov.attempts())
				assert.Equal(t, 503, resp.StatusCode)
				assert.Equal(t, "error 503", bodyOf(t, resp), "the provider's body, intact")
				assert.Zero(t, time.Since(start), "no wait")
				require.Len(t, rec.attempts, 1)
				assert.Zero(t, rec.attempts[0].RetryIn)
			})
		})
	}
}

func TestStreamRetriedWithRetryStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		body := `{"messages":` + bigMessages(64<<10) + `,"model":"gpt-4o","stream":true}`
		prov := newProvider(fail(503), ok)
		req := streamRequest(t, testURL, body)
		resp, err := mustNew(t, prov.mock, Policy{Waits: []time.Duration{time.Second}, RetryStreams: true}).RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, `{"answer":42}`, bodyOf(t, resp))
		assert.Equal(t, []time.Duration{time.Second}, prov.gaps())
		assert.Equal(t, []string{body, body}, prov.bodies, "the retry carried the whole body")
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
				const stream = "data: {\"delta\":\"hi\"}\n\ndata: {\"delta\":\" there\"}\n\n"
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
				prov := newProvider(fail(c.status, "Content-Type", "text/event-stream"), fail(c.status, "Content-Type", "text/event-stream"))
				resp, err := post(t, mustNew(t, prov.mock, Policy{Waits: []time.Duration{time.Second}}), context.Background())
				require.NoError(t, err)
				assert.Equal(t, c.attempts, prov.attempts())
				assert.Equal(t, c.status, resp.StatusCode)
				assert.Equal(t, fmt.Sprintf("error %d", c.status), bodyOf(t, resp))
			})
		})
	}
}

// countGetBody wraps req.GetBody and counts its calls.
func countGetBody(req *http.Request) func() int {
	var mu sync.Mutex
	n := 0
	inner := req.GetBody
	req.GetBody = func() (io.ReadCloser, error) {
		mu.Lock()
		n++
		mu.Unlock()
		return inner()
	}
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// Stream detection costs nothing on the success path: a request that
// succeeds first time never has its body fetched again. After a failure it
// is sniffed once per call, and not at all with RetryStreams.
func TestStreamDetectionCostsNothingOnSuccess(t *testing.T) {
	big := bigMessages(1 << 20)
	cases := []struct {
		name    string
		script  []step
		policy  Policy
		getBody int
	}{
		{"stream, first try succeeds", []step{ok}, Policy{}, 0},
		{"stream, first try fails", []step{fail(503), ok}, Policy{}, 1},                                            // one sniff, no retry
		{"stream with RetryStreams, two retries", []step{fail(503), fail(503), ok}, Policy{RetryStreams: true}, 2}, // no sniff, two bodies
		{"not a stream, three retries", []step{fail(503), fail(503), fail(503), ok}, Policy{}, 4},                  // one sniff, three bodies
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := newProvider(c.script...)
				stream := `,"stream":true}`
				if strings.HasPrefix(c.name, "not") {
					stream = `}`
				}
				req := streamRequest(t, testURL, `{"messages":`+big+stream)
				count := countGetBody(req)
				c.policy.Waits = []time.Duration{time.Second, time.Second, time.Second}
				resp, err := mustNew(t, prov.mock, c.policy).RoundTrip(req)
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

// sniffSource is a request body handed out by GetBody. Over an in-memory
// slice it implements io.WriterTo, as the readers http.NewRequest keeps do;
// otherwise it is read chunk bytes at a time, like a file or a pipe.
type sniffSource struct {
	data     []byte
	chunk    int
	writerTo bool

	mu     sync.Mutex
	read   int // bytes handed out by Read
	closed int
}

func (s *sniffSource) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.read >= len(s.data) {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), s.chunk)], s.data[s.read:])
	s.read += n
	return n, nil
}

func (s *sniffSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed++
	return nil
}

// memSource adds io.WriterTo: the whole slice in one Write, no copy.
type memSource struct{ *sniffSource }

func (m memSource) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(m.data)
	return int64(n), err
}

// sniff runs IsStream on req with a GetBody over body, and checks that
// req.Body is never touched, GetBody is called at most once, what it
// returned is closed, and an in-memory body is handed over, not read.
func sniff(t *testing.T, req *http.Request, body []byte, chunk int, writerTo bool) bool {
	t.Helper()
	req.Body = untouchable{t}
	var sources []*sniffSource
	req.GetBody = func() (io.ReadCloser, error) {
		s := &sniffSource{data: body, chunk: chunk, writerTo: writerTo}
		sources = append(sources, s)
		if writerTo {
			return memSource{s}, nil
		}
		return s, nil
	}
	got := IsStream(req)
	if len(sources) > 1 {
		t.Fatalf("GetBody called %d times", len(sources))
	}
	for _, s := range sources {
		if s.closed != 1 {
			t.Fatalf("the body from GetBody closed %d times", s.closed)
		}
		if writerTo && s.read != 0 {
			t.Fatalf("an in-memory body was copied through Read (%d bytes) instead of handed over", s.read)
		}
	}
	return got
}

// topLevelStream decodes a JSON object as encoding/json would and reports
// whether its top-level member "stream" is true (of duplicate keys, the
// last counts). ok is false when data is not a JSON object.
func topLevelStream(data []byte) (stream, ok bool) {
	if !json.Valid(data) {
		return false, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false, false
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return false, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return false, false
		}
		if key == "stream" {
			stream = string(v) == "true"
		}
	}
	return stream, true
}

// IsStream never panics, never reads req.Body, calls GetBody at most once
// and closes what it got, and hands an in-memory body over without copying
// it through Read. Read piece by piece or handed over whole, a body gets
// the same answer, and on a JSON object of any size it is encoding/json's:
// a top-level "stream": true, wherever it is. A body is built as head, pad
// spaces ×4, tail, so that large bodies are reached.
func FuzzIsStream(f *testing.F) {
	f.Add([]byte(`{"model":"gpt","stream":true}`), uint16(0), []byte(nil), "https://api.openai.com/v1/chat/completions", "application/json", uint16(7))
	f.Add([]byte(`{"model":"m","messages":[`), uint16(4000), []byte(`],"stream":true}`), "https://api.anthropic.com/v1/messages", "", uint16(512))
	f.Add([]byte(`{"messages":[{"content":"`), uint16(3000), []byte(`"}],"stream":true,"stream_options":{"include_usage":true},"temperature":0}`), "", "", uint16(100))
	f.Add([]byte(`{"a":{"stream":true}}`), uint16(0), []byte(nil), "", "", uint16(1))
	f.Add([]byte(`{"s":"\"stream\":true"}`), uint16(0), []byte(nil), "", "", uint16(3))
	f.Add([]byte(`{"str\u0065am" : true , "stream":false}`), uint16(0), []byte(nil), "", "", uint16(2))
	f.Add([]byte(`{"contents":[]}`), uint16(0), []byte(nil), "https://generativelanguage.googleapis.com/v1beta/models/g:streamGenerateContent?alt=sse&key=k", "", uint16(64))
	f.Add([]byte(`{"messages":[]}`), uint16(0), []byte(nil), "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse-stream", "", uint16(64))
	f.Add([]byte(nil), uint16(0), []byte(nil), "https://x.test/", "Text/Event-Stream", uint16(1))
	f.Fuzz(func(t *testing.T, head []byte, pad uint16, tail []byte, rawURL, accept string, chunk uint16) {
		body := make([]byte, 0, len(head)+4*int(pad)+len(tail))
		body = append(body, head...)
		body = append(body, bytes.Repeat([]byte(" "), 4*int(pad))...)
		body = append(body, tail...)
		u, err := url.Parse(rawURL)
		if err != nil {
			u = nil
		}
		header := http.Header{}
		if accept != "" {
			header.Set("Accept", accept)
		}
		size := max(1, int(chunk))

		// The headers and URL alone; the body alone; both.
		signals := IsStream(&http.Request{Method: http.MethodPost, URL: u, Header: header})
		bodyOnly := sniff(t, &http.Request{Method: http.MethodPost, Header: http.Header{}}, body, size, true)
		both := sniff(t, &http.Request{Method: http.MethodPost, URL: u, Header: header}, body, size, true)
		if both != (signals || bodyOnly) {
			t.Fatalf("with headers and URL %v, but %v alone and %v for the body alone", both, signals, bodyOnly)
		}
		if strings.Contains(strings.ToLower(accept), "text/event-stream") && !signals {
			t.Fatalf("Accept %q names text/event-stream", accept)
		}
		piecewise := sniff(t, &http.Request{Method: http.MethodPost, Header: http.Header{}}, body, size, false)
		if piecewise != bodyOnly {
			t.Fatalf("read %d bytes at a time: %v; handed over whole: %v", size, piecewise, bodyOnly)
		}
		if want, isObject := topLevelStream(body); isObject && bodyOnly != want {
			t.Fatalf("a %d-byte JSON object: got %v, want %v", len(body), bodyOnly, want)
		}
	})
}

// The scanner keeps a fixed state whatever the body, and cutting the body
// into writes of any size never changes its answer.
func FuzzStreamScanner(f *testing.F) {
	f.Add([]byte(`{"stream":true}`), uint16(5), uint16(0))
	f.Add([]byte(`{"messages":[],"stream":true}`), uint16(4096), uint16(3000))
	f.Add([]byte(`{"a":"x\"y","stream" : true }`), uint16(1), uint16(0))
	f.Add([]byte(`0123456789`), uint16(1), uint16(1000))
	f.Fuzz(func(t *testing.T, data []byte, chunk, repeat uint16) {
		body := bytes.Repeat(data, 1+int(repeat)%(1+(64<<10)/max(1, len(data))))
		size := max(1, int(chunk))
		var w streamScanner
		for off := 0; off < len(body); off += size {
			n, err := w.Write(body[off:min(len(body), off+size)])
			if err != nil || n != min(size, len(body)-off) {
				t.Fatalf("Write returned %d, %v", n, err)
			}
			if w.depth < 0 || w.keyLen > maxKeyBytes+1 || w.matched > len("true") {
				t.Fatalf("state out of bounds: depth %d, key %d, matched %d", w.depth, w.keyLen, w.matched)
			}
		}
		var whole streamScanner
		_, _ = whole.Write(body)
		if whole.stream() != w.stream() {
			t.Fatalf("one write says %v, writes of %d bytes say %v", whole.stream(), size, w.stream())
		}
		if want, isObject := topLevelStream(body); isObject && whole.stream() != want {
			t.Fatalf("a JSON object: got %v, want %v", whole.stream(), want)
		}
	})
}
