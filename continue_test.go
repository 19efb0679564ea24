package llmretry

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chatChunk is one chat.completion.chunk event carrying text, with the
// stream's id.
func chatChunk(id, text string) string {
	b, _ := json.Marshal(text)
	return `data: {"id":"` + id + `","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":` + string(b) + `},"finish_reason":null}]}` + "\n\n"
}

// chatStream is a Chat Completions stream of parts: the role chunk, a
// chunk per part and, when complete, the finish chunk and [DONE].
func chatStream(id string, complete bool, parts ...string) string {
	s := `data: {"id":"` + id + `","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n"
	for _, p := range parts {
		s += chatChunk(id, p)
	}
	if complete {
		s += `data: {"id":"` + id + `","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" + "data: [DONE]\n\n"
	}
	return s
}

// cutBody is a stream body that hands over its events, then fails with
// err (io.EOF: it ends, cut short).
type cutBody struct {
	r   *strings.Reader
	err error
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.r.Len() > 0 {
		return b.r.Read(p)
	}
	return 0, b.err
}

func (b *cutBody) Close() error { return nil }

// streams answers each request with the next of its streams, each a body
// of events ending with an error (nil: cleanly), and records the bodies
// it was sent.
type streams struct {
	mu      sync.Mutex
	replies []func(r *http.Request) *http.Response
	bodies  []string
	seen    []Attempt // AttemptFromContext of each request, as it was sent
}

func (s *streams) RoundTrip(r *http.Request) (*http.Response, error) {
	b, _ := io.ReadAll(r.Body)
	a, _ := AttemptFromContext(r.Context())
	s.mu.Lock()
	i := len(s.bodies)
	s.bodies = append(s.bodies, string(b))
	s.seen = append(s.seen, a)
	s.mu.Unlock()
	return s.replies[min(i, len(s.replies)-1)](r), nil
}

func (s *streams) sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bodies...)
}

// stream returns a reply of events that ends with err (nil: io.EOF).
func stream(events string, err error) func(r *http.Request) *http.Response {
	return func(r *http.Request) *http.Response {
		if err == nil {
			err = io.EOF
		}
		h := http.Header{"Content-Type": {"text/event-stream"}}
		return &http.Response{StatusCode: 200, Status: "200 OK", Header: h, Body: &cutBody{r: strings.NewReader(events), err: err}, ContentLength: -1, Request: r}
	}
}

// status returns a reply of status with a JSON body.
func status(code int, body string) func(r *http.Request) *http.Response {
	return func(r *http.Request) *http.Response {
		h := http.Header{"Content-Type": {"application/json"}}
		return &http.Response{StatusCode: code, Status: strconv.Itoa(code) + " " + http.StatusText(code), Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: r}
	}
}

// chatText reads a Chat Completions stream as an SDK accumulates it: the
// content of every chunk, the ids seen, the finish reasons and [DONE]s.
func chatText(t *testing.T, body string) (text string, ids map[string]bool, finishes, dones int) {
	t.Helper()
	ids = map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			dones++
			continue
		}
		var c struct {
			ID      string `json:"id"`
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		require.NoError(t, json.Unmarshal([]byte(data), &c), data)
		ids[c.ID] = true
		for _, ch := range c.Choices {
			text += ch.Delta.Content
			if ch.FinishReason != nil {
				finishes++
			}
		}
	}
	return text, ids, finishes, dones
}

// readAll reads resp's body to its end or first error.
func readAll(resp *http.Response) (string, error) {
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return string(b), err
}

// With RetryStreams, a stream that breaks before its completion marker
// reads as an error wrapping ErrStreamCut, whose record GaveUp returns;
// never io.EOF. Everything before the break reached the caller.
func TestStreamCutIsNeverACleanEnd(t *testing.T) {
	delivered := chatStream("c1", false, "Hello", " wor")
	for _, tc := range []struct {
		name  string
		err   error
		cause string
	}{
		{"ended early", nil, "the stream ended before its completion marker"},
		{"a reset", syscall.ECONNRESET, "connection reset by peer"},
		{"an unexpected EOF", io.ErrUnexpectedEOF, "unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := &streams{replies: []func(*http.Request) *http.Response{stream(delivered, tc.err)}}
				resp, err := mustNew(t, base, Policy{RetryStreams: true}).RoundTrip(testkit.StainlessPost(t, testURL, `{"model":"m","stream":true}`))
				require.NoError(t, err)
				got, err := readAll(resp)
				require.Error(t, err)
				assert.ErrorIs(t, err, ErrStreamCut)
				assert.NotErrorIs(t, err, io.EOF)
				assert.ErrorContains(t, err, tc.cause)
				ex := GaveUp(err)
				require.NotNil(t, ex, "the record, from the read's error")
				assert.Equal(t, ErrStreamCut, ex.Reason)
				assert.Equal(t, 1, ex.Attempts)
				assert.Equal(t, delivered, got, "every whole event before the break")
				assert.Len(t, base.sent(), 1, "nothing resent without ContinueStreams")
			})
		})
	}
	t.Run("a stall past StreamIdleTimeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.Reply{Status: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: delivered}.Stalled())
			resp, err := mustNew(t, prov, Policy{RetryStreams: true, StreamIdleTimeout: 10 * time.Second}).RoundTrip(testkit.StainlessPost(t, testURL, `{"model":"m","stream":true}`))
			require.NoError(t, err)
			start := time.Now()
			got, err := readAll(resp)
			assert.Equal(t, 10*time.Second, time.Since(start))
			assert.ErrorIs(t, err, ErrStreamCut)
			var timeout interface{ Timeout() bool }
			require.ErrorAs(t, err, &timeout)
			assert.True(t, timeout.Timeout())
			assert.Equal(t, delivered, got)
		})
	})
	t.Run("a whole stream ends cleanly", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			whole := chatStream("c1", true, "Hello", " world")
			for _, p := range []Policy{{RetryStreams: true}, {RetryStreams: true, ContinueStreams: true}} {
				base := &streams{replies: []func(*http.Request) *http.Response{stream(whole, nil)}}
				resp, err := mustNew(t, base, p).RoundTrip(testkit.StainlessPost(t, testURL, `{"model":"m","stream":true}`))
				require.NoError(t, err)
				got, err := readAll(resp)
				require.NoError(t, err)
				assert.Equal(t, whole, got, "the provider's bytes, unchanged (ContinueStreams %v)", p.ContinueStreams)
				assert.Len(t, base.sent(), 1)
			}
		})
	})
	t.Run("a stream of an API llmretry does not know ends as its provider ends it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			legacy := `data: {"id":"cmpl-1","object":"text_completion","created":1,"choices":[{"text":"Hi","index":0,"finish_reason":"stop"}],"model":"m"}` + "\n\n" + "data: [DONE]\n\n"
			for _, p := range []Policy{{RetryStreams: true}, {RetryStreams: true, ContinueStreams: true}} {
				base := &streams{replies: []func(*http.Request) *http.Response{stream(legacy, nil)}}
				resp, err := mustNew(t, base, p).RoundTrip(testkit.StainlessPost(t, "https://api.example.test/v1/completions", `{"model":"m","prompt":"Say hi","stream":true}`))
				require.NoError(t, err)
				got, err := readAll(resp)
				require.NoError(t, err, "no completion marker to miss (ContinueStreams %v)", p.ContinueStreams)
				assert.Equal(t, legacy, got)
			}
		})
	})
	t.Run("an error event is an explicit end, handed on as sent", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			events := chatStream("c1", false, "Hello") + `data: {"error":{"message":"The server had an error.","type":"server_error"}}` + "\n\n"
			base := &streams{replies: []func(*http.Request) *http.Response{stream(events, nil)}}
			resp, err := mustNew(t, base, Policy{RetryStreams: true}).RoundTrip(testkit.StainlessPost(t, testURL, `{"model":"m","stream":true}`))
			require.NoError(t, err)
			got, err := readAll(resp)
			require.NoError(t, err)
			assert.Equal(t, events, got)
		})
	})
	t.Run("the zero Policy leaves a stream alone", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			base := &streams{replies: []func(*http.Request) *http.Response{stream(delivered, nil)}}
			resp, err := mustNew(t, base, Policy{}).RoundTrip(testkit.StainlessPost(t, testURL, `{"model":"m","stream":true}`))
			require.NoError(t, err)
			got, err := readAll(resp)
			require.NoError(t, err, "a cut reads as the base's own end")
			assert.Equal(t, delivered, got)
		})
	})
}

// With ContinueStreams, a stream cut mid-answer is continued: by prefill
// on a host whose API is not known to refuse one, the caller's reads
// carry one whole answer (one id, the text once, one finish and one
// Bedrock's binary event stream is handed over untouched by a policy that
// does not retry streams; with RetryStreams its bytes reach the caller as
// they come, and a cut (a failed read, an end inside a message, a stall)
// reads as an error wrapping ErrStreamCut that says how; it is never
// continued: the base sees one request.
func TestEventStreamCut(t *testing.T) {
	const converse = "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse-stream"
	whole := append(awsMessage(40), awsMessage(16)...)
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	tests := []struct {
		name  string
		p     Policy
		body  func() io.ReadCloser
		bytes []byte
		cause error  // what the read's error wraps beside ErrStreamCut; nil: a clean end
		says  string // in the error's text
	}{
		{"whole messages end cleanly", Policy{RetryStreams: true},
			func() io.ReadCloser { return io.NopCloser(bytes.NewReader(whole)) }, whole, nil, ""},
		{"an end inside a message", Policy{RetryStreams: true},
			func() io.ReadCloser { return io.NopCloser(bytes.NewReader(whole[:50])) }, whole[:50], errEndedInMessage, "inside a message"},
		{"a reset", Policy{RetryStreams: true},
			func() io.ReadCloser { return &failingAfter{data: whole[:40], err: reset} }, whole[:40], syscall.ECONNRESET, "reset"},
		{"a reset, with ContinueStreams", Policy{RetryStreams: true, ContinueStreams: true},
			func() io.ReadCloser { return &failingAfter{data: whole[:40], err: reset} }, whole[:40], syscall.ECONNRESET, "not continued: Bedrock's event stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sent atomic.Int32
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				sent.Add(1)
				return eventStreamResponse(r, tt.body()), nil
			})
			resp, err := mustNew(t, base, tt.p).RoundTrip(streamRequest(t, converse, `{}`))
			require.NoError(t, err)
			got, err := io.ReadAll(resp.Body)
			assert.Equal(t, tt.bytes, got, "every byte, as it came")
			assert.Equal(t, int32(1), sent.Load(), "never sent again")
			if tt.cause == nil {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, ErrStreamCut)
			assert.ErrorIs(t, err, tt.cause)
			assert.ErrorContains(t, err, tt.says)
			assert.NotNil(t, GaveUp(err), "the record is reachable")
		})
	}
	t.Run("without RetryStreams, the base's own body", func(t *testing.T) {
		body := io.NopCloser(bytes.NewReader(whole[:50]))
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) { return eventStreamResponse(r, body), nil })
		resp, err := mustNew(t, base, Policy{}).RoundTrip(streamRequest(t, converse, `{}`))
		require.NoError(t, err)
		assert.True(t, resp.Body == body, "the base's own body object")
	})
}

// A Bedrock event stream that stalls past StreamIdleTimeout, under
// RetryStreams, reads as ErrStreamCut too.
func TestEventStreamStallIsACut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return eventStreamResponse(r, newStallBody(string(awsMessage(16)))), nil
		})
		rt := mustNew(t, base, Policy{RetryStreams: true, StreamIdleTimeout: 5 * time.Second})
		resp, err := rt.RoundTrip(streamRequest(t, "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse-stream", `{}`))
		require.NoError(t, err)
		start := time.Now()
		got, err := io.ReadAll(resp.Body)
		assert.Equal(t, awsMessage(16), got)
		assert.ErrorIs(t, err, ErrStreamCut)
		assert.ErrorContains(t, err, "Policy.StreamIdleTimeout")
		assert.Equal(t, 5*time.Second, time.Since(start))
	})
}

// awsMessage returns an AWS event-stream message of total length size:
// its length, then filler (the Transport reads only the length).
func awsMessage(size uint32) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint32(b, size)
	return b
}

// eventStreamResponse is a 200 AWS event stream with body.
func eventStreamResponse(r *http.Request, body io.ReadCloser) *http.Response {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/vnd.amazon.eventstream"}}, Body: body, Request: r}
}

// failingAfter reads data, then fails with err.
type failingAfter struct {
	data []byte
	err  error
}

func (b *failingAfter) Read(p []byte) (int, error) {
	if len(b.data) == 0 {
		return 0, b.err
	}
	n := copy(p, b.data)
	b.data = b.data[n:]
	return n, nil
}

func (b *failingAfter) Close() error { return nil }

// [DONE]), and the continuation's record says how and from where.
func TestContinueStreamsByPrefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &streams{replies: []func(*http.Request) *http.Response{
			stream(chatStream("c1", false, "Hello", " wor"), io.ErrUnexpectedEOF),
			stream(chatStream("c2", true, "ld!"), nil),
		}}
		var rec recorder
		var log syncBuffer
		rt := mustNew(t, base, Policy{RetryStreams: true, ContinueStreams: true, OnAttempt: func(a Attempt) {
			rec.on(a)
			LogAttempts(textLogger(&log))(a)
		}})
		resp, err := rt.RoundTrip(testkit.StainlessPost(t, testURL, `{"model":"m","messages":[{"role":"user","content":"Say hello"}],"stream":true}`))
		require.NoError(t, err)
		got, err := readAll(resp)
		require.NoError(t, err)
		text, ids, finishes, dones := chatText(t, got)
		assert.Equal(t, "Hello world!", text)
		assert.Equal(t, map[string]bool{"c1": true}, ids, "the first message's id throughout")
		assert.Equal(t, 1, finishes)
		assert.Equal(t, 1, dones)

		sent := base.sent()
		require.Len(t, sent, 2)
		var prefill struct {
			Messages []struct{ Role, Content string } `json:"messages"`
		}
		require.NoError(t, json.Unmarshal([]byte(sent[1]), &prefill))
		require.Len(t, prefill.Messages, 2)
		assert.Equal(t, "assistant", prefill.Messages[1].Role)
		assert.Equal(t, "Hello wor", prefill.Messages[1].Content, "the delivered text as the last assistant turn")

		require.Equal(t, 2, rec.count())
		assert.Equal(t, "prefill", rec.attempts[1].Continued)
		assert.Equal(t, int64(len("Hello wor")), rec.attempts[1].From)
		assert.Equal(t, 2, rec.attempts[1].N)
		assert.Contains(t, rec.attempts[1].String(), "(continued by prefill from 9 bytes)")
		assert.Empty(t, rec.attempts[0].Continued)

		// What the continuation's request carries while it is under way,
		// for a layer below (otelretry), and what LogAttempts writes.
		require.Len(t, base.seen, 2)
		assert.Equal(t, Attempt{N: 1}, base.seen[0])
		assert.Equal(t, Attempt{N: 2, Continued: "prefill", From: 9}, base.seen[1])
		lines := strings.Split(strings.TrimSpace(log.String()), "\n")
		require.Len(t, lines, 2)
		assert.NotContains(t, lines[0], "continued=")
		assert.Contains(t, lines[1], "continued=prefill from=9")
	})
}

// On api.openai.com, whose Chat Completions starts a prefilled answer
// over, a cut stream is regenerated and matched: the request again as it
// was; its text is handed on past what was delivered; one that departs
// from it is never handed on, and the read fails with ErrStreamCut.
func TestContinueStreamsByRegeneration(t *testing.T) {
	const openaiURL = "https://api.openai.com/v1/chat/completions"
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"Say hello"}],"stream":true}`
	t.Run("matched", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			base := &streams{replies: []func(*http.Request) *http.Response{
				stream(chatStream("c1", false, "Hello", " wor"), syscall.ECONNRESET),
				stream(chatStream("c2", true, "Hel", "lo world!"), nil),
			}}
			var rec recorder
			resp, err := mustNew(t, base, Policy{RetryStreams: true, ContinueStreams: true, OnAttempt: rec.on}).RoundTrip(testkit.StainlessPost(t, openaiURL, body))
			require.NoError(t, err)
			got, err := readAll(resp)
			require.NoError(t, err)
			text, ids, finishes, dones := chatText(t, got)
			assert.Equal(t, "Hello world!", text)
			assert.Len(t, ids, 1)
			assert.Equal(t, 1, finishes)
			assert.Equal(t, 1, dones)
			assert.Equal(t, []string{body, body}, base.sent(), "the request again, as it was")
			assert.Equal(t, "regenerate", rec.attempts[1].Continued)
		})
	})
	t.Run("diverged", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			base := &streams{replies: []func(*http.Request) *http.Response{
				stream(chatStream("c1", false, "Hello", " wor"), syscall.ECONNRESET),
				stream(chatStream("c2", true, "Hi there!"), nil),
			}}
			resp, err := mustNew(t, base, Policy{RetryStreams: true, ContinueStreams: true}).RoundTrip(testkit.StainlessPost(t, openaiURL, body))
			require.NoError(t, err)
			got, err := readAll(resp)
			assert.ErrorIs(t, err, ErrStreamCut)
			assert.ErrorContains(t, err, "does not begin with what was delivered")
			assert.Equal(t, 1, strings.Count(err.Error(), "llmretry:"), "one prefix: %s", err)
			text, _, _, _ := chatText(t, got)
			assert.Equal(t, "Hello wor", text, "not a byte of the diverging answer")
		})
	})
}

// A stream committed on a fallback route is continued as that route's
// host allows, not the primary's: cut on api.openai.com (which starts a
// prefill over), it is regenerated, though the primary's host would take
// a prefill.
func TestContinueStreamsOnTheRouteItWasCutOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		body := `{"model":"gpt-4o","messages":[{"role":"user","content":"Say hello"}],"stream":true}`
		route, err := RouteTo("https://llm.example.test/v1", "https://api.openai.com/v1", http.Header{"Authorization": {"Bearer fallback"}})
		require.NoError(t, err)
		base := &streams{replies: []func(*http.Request) *http.Response{
			status(503, `{"error":{"message":"down"}}`),
			status(503, `{"error":{"message":"down"}}`),
			stream(chatStream("c1", false, "Hello", " wor"), syscall.ECONNRESET),
			stream(chatStream("c2", true, "Hel", "lo world!"), nil),
		}}
		var rec recorder
		rt := mustNew(t, base, Policy{RetryStreams: true, ContinueStreams: true, Waits: []time.Duration{time.Second, time.Second, time.Second}, Fallback: []Route{route}, OnAttempt: rec.on})
		resp, err := rt.RoundTrip(testkit.StainlessPost(t, "https://llm.example.test/v1/chat/completions", body))
		require.NoError(t, err)
		got, err := readAll(resp)
		require.NoError(t, err)
		text, _, _, _ := chatText(t, got)
		assert.Equal(t, "Hello world!", text)
		assert.Equal(t, []string{body, body, body, body}, base.sent(), "regenerated: the request again, as it was")
		require.Equal(t, 4, rec.count())
		assert.Equal(t, 1, rec.attempts[3].Route, "on the route it was cut on")
		assert.Equal(t, "regenerate", rec.attempts[3].Continued)
	})
}

// A route that refuses prefill is remembered as refusing, for its host and
// model: the cut is regenerated instead, and no prefill is sent it again.
func TestContinueStreamsRefusedPrefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refusal := `{"type":"error","error":{"type":"invalid_request_error","message":"This model does not support assistant message prefill. The conversation must end with a user message."}}`
		var mu sync.Mutex
		prefills := 0
		calls := 0
		seq := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			b, _ := io.ReadAll(r.Body)
			calls++
			if strings.Contains(string(b), `"assistant"`) {
				mu.Lock()
				prefills++
				mu.Unlock()
				return status(400, refusal)(r), nil
			}
			if calls%2 == 1 {
				return stream(chatStream("c1", false, "Hello", " wor"), syscall.ECONNRESET)(r), nil
			}
			return stream(chatStream("c2", true, "Hello world!"), nil)(r), nil
		})
		var rec recorder
		var log syncBuffer
		rt := mustNew(t, seq, Policy{RetryStreams: true, ContinueStreams: true, OnAttempt: func(a Attempt) {
			rec.on(a)
			LogAttempts(textLogger(&log))(a)
		}})
		for range 2 {
			calls = 0
			resp, err := rt.RoundTrip(testkit.StainlessPost(t, testURL, `{"model":"m","messages":[{"role":"user","content":"Say hello"}],"stream":true}`))
			require.NoError(t, err)
			got, err := readAll(resp)
			require.NoError(t, err)
			text, _, _, _ := chatText(t, got)
			assert.Equal(t, "Hello world!", text)
		}
		assert.Equal(t, 1, prefills, "one prefill in the whole test: the refusal is remembered")

		// The refused prefill's record says so, and that the call goes on
		// by regenerating: it is not the call's last word.
		require.Equal(t, 6, rec.count(), "the first call: cut, prefill, regeneration (cut again: this base cuts every other stream), regeneration; the second: cut, regeneration")
		refused := rec.attempts[1]
		assert.Equal(t, "prefill", refused.Continued)
		assert.Equal(t, 400, refused.Response.StatusCode)
		assert.Equal(t, "prefill refused, regenerating", refused.Moved)
		assert.NoError(t, refused.Stop, "a regeneration follows")
		assert.Contains(t, refused.String(), "(moved: prefill refused, regenerating)")
		assert.NotContains(t, refused.String(), "stop:")
		assert.Equal(t, "regenerate", rec.attempts[2].Continued)
		assert.Empty(t, rec.attempts[2].Moved)
		assert.Equal(t, "regenerate", rec.attempts[5].Continued, "the second call sends no prefill")
		lines := strings.Split(strings.TrimSpace(log.String()), "\n")
		require.Len(t, lines, 6)
		assert.Contains(t, lines[1], `moved="prefill refused, regenerating" continued=prefill`)
		assert.NotContains(t, lines[1], "stop=")
	})
}

// A stream cut inside a tool call is never continued: no request is
// sent, and the read fails with ErrStreamCut, saying why.
func TestContinueStreamsNeverInAToolCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tool := `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"write_file","arguments":""}}]},"finish_reason":null}]}` + "\n\n" +
			`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"pa"}}]},"finish_reason":null}]}` + "\n\n"
		base := &streams{replies: []func(*http.Request) *http.Response{stream(tool, io.ErrUnexpectedEOF)}}
		resp, err := mustNew(t, base, Policy{RetryStreams: true, ContinueStreams: true}).RoundTrip(testkit.StainlessPost(t, testURL, `{"model":"m","stream":true}`))
		require.NoError(t, err)
		_, err = readAll(resp)
		assert.ErrorIs(t, err, ErrStreamCut)
		assert.ErrorContains(t, err, "not continued: a tool call")
		assert.Len(t, base.sent(), 1, "no second request")
	})
}

// With ContinueStreams, an error event or a line that is not JSON after
// content breaks the stream: it never reaches the caller, and the rest is
// continued.
func TestContinueStreamsBreakingEvents(t *testing.T) {
	for _, tc := range []struct{ name, bad string }{
		{"an error event", `data: {"error":{"message":"The server had an error.","type":"server_error"}}` + "\n\n"},
		{"a line that is not JSON", `data: {"id": "c1", "choices": [{"delta": {"content": ` + "\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := &streams{replies: []func(*http.Request) *http.Response{
					stream(chatStream("c1", false, "Hello", " wor")+tc.bad+chatChunk("c1", "never"), nil),
					stream(chatStream("c2", true, "ld!"), nil),
				}}
				resp, err := mustNew(t, base, Policy{RetryStreams: true, ContinueStreams: true}).RoundTrip(testkit.StainlessPost(t, testURL, `{"model":"m","messages":[],"stream":true}`))
				require.NoError(t, err)
				got, err := readAll(resp)
				require.NoError(t, err)
				assert.NotContains(t, got, tc.bad)
				text, _, _, _ := chatText(t, got)
				assert.Equal(t, "Hello world!", text)
			})
		})
	}
}

// A continuation is an attempt of the call: a stream cut again and again
// is continued while the schedule allows, then the read fails with
// ErrStreamCut; its waits are the schedule's.
func TestContinueStreamsKeepsTheSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &streams{replies: []func(*http.Request) *http.Response{
			stream(chatStream("c1", false, "Hello"), io.ErrUnexpectedEOF),
			status(503, `{"error":{"message":"overloaded"}}`),
		}}
		var rec recorder
		rt := mustNew(t, base, Policy{RetryStreams: true, ContinueStreams: true, Waits: []time.Duration{time.Second, time.Second}, OnAttempt: rec.on})
		resp, err := rt.RoundTrip(testkit.StainlessPost(t, testURL, `{"model":"m","messages":[],"stream":true}`))
		require.NoError(t, err)
		start := time.Now()
		_, err = readAll(resp)
		assert.ErrorIs(t, err, ErrStreamCut)
		assert.Equal(t, time.Second, time.Since(start), "the continuation at once, its retry after the schedule's wait")
		assert.Equal(t, 3, rec.count(), "the call's retries, spent")
		ex := GaveUp(err)
		require.NotNil(t, ex)
		assert.Equal(t, 3, ex.Attempts)
		assert.Equal(t, 2, ex.Continued, "the two attempts after the cut continued the stream")
		assert.Contains(t, ex.Error(), "its continuation got 503 Service Unavailable (2 of the attempts continued the stream)")
	})
}

// A continuation is an attempt: none is sent past the deadline less the
// reserve. A stream cut when its caller reads on at 5 s of a 60-s deadline
// with a 10-s reserve is continued; at 55 s the read says why it was not.
func TestContinueStreamsKeepsTheReserve(t *testing.T) {
	for _, c := range []struct {
		pause time.Duration // the caller reads on after this (a tool ran)
		sent  int
	}{{5 * time.Second, 2}, {55 * time.Second, 1}} {
		t.Run(c.pause.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := &streams{replies: []func(*http.Request) *http.Response{
					stream(chatStream("c1", false, "Hello"), io.ErrUnexpectedEOF),
					stream(chatStream("c2", true, " world"), nil),
				}}
				rt := mustNew(t, base, Policy{RetryStreams: true, ContinueStreams: true, Waits: []time.Duration{time.Second}, Reserve: 10 * time.Second})
				req := testkit.StainlessPost(t, testURL, `{"model":"m","messages":[],"stream":true}`).WithContext(withDeadline(t, time.Minute))
				resp, err := rt.RoundTrip(req)
				require.NoError(t, err)
				time.Sleep(c.pause)
				_, err = readAll(resp)
				assert.Len(t, base.sent(), c.sent)
				if c.sent == 1 {
					assert.ErrorIs(t, err, ErrStreamCut)
					assert.ErrorIs(t, err, ErrNoTimeLeft, "the cut says no time was left")
				} else {
					assert.NoError(t, err)
				}
			})
		})
	}
}

// The caller closes the body while its stream's continuation waits for a
// retry (a 503 answered the first): the Read that waits ends with an
// error at once, and nothing more is sent for a body nobody reads.
func TestContinuationEndsWithClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &streams{replies: []func(*http.Request) *http.Response{
			stream(chatStream("c1", false, "Hello"), io.ErrUnexpectedEOF),
			status(503, `{"error":{"message":"overloaded"}}`),
			stream(chatStream("c2", true, " world"), nil),
		}}
		rt := mustNew(t, base, Policy{RetryStreams: true, ContinueStreams: true, Waits: []time.Duration{30 * time.Second, 30 * time.Second}})
		resp, err := rt.RoundTrip(testkit.StainlessPost(t, testURL, `{"model":"m","messages":[],"stream":true}`))
		require.NoError(t, err)
		read := make(chan error)
		go func() {
			_, err := io.ReadAll(resp.Body)
			read <- err
		}()
		time.Sleep(time.Second)
		require.Len(t, base.sent(), 2, "the continuation was sent and answered 503")
		start := time.Now()
		resp.Body.Close()
		assert.Error(t, <-read)
		assert.Zero(t, time.Since(start), "the read ends when the body is closed")
		assert.Len(t, base.sent(), 2, "nothing is sent after the caller closed the body")
	})
}

// ContinueStreams needs RetryStreams; ContinueBy's values are known ones.
func TestContinueStreamsValidate(t *testing.T) {
	assert.ErrorContains(t, Policy{ContinueStreams: true}.Validate(), "ContinueStreams needs RetryStreams")
	assert.ErrorContains(t, Policy{ContinueBy: map[string]string{"x.test": "maybe"}}.Validate(), `Policy.ContinueBy["x.test"] is "maybe"`)
	assert.NoError(t, Policy{RetryStreams: true, ContinueStreams: true, ContinueBy: map[string]string{"api.deepseek.com": "prefix"}}.Validate())
}

// messagesStream is an Anthropic Messages stream: its message_start, a
// signed thinking block if thought is not empty, a text block of parts
// and, when complete, its end.
func messagesStream(id, thought string, complete bool, parts ...string) string {
	ev := func(typ, data string) string { return "event: " + typ + "\ndata: " + data + "\n\n" }
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	s := ev("message_start", `{"type":"message_start","message":{"id":"`+id+`","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1}}}`)
	at := 0
	if thought != "" {
		s += ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`) +
			ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":`+q(thought)+`}}`) +
			ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"c2lnbmVk"}}`) +
			ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
		at = 1
	}
	idx := strconv.Itoa(at)
	s += ev("content_block_start", `{"type":"content_block_start","index":`+idx+`,"content_block":{"type":"text","text":""}}`)
	for _, p := range parts {
		s += ev("content_block_delta", `{"type":"content_block_delta","index":`+idx+`,"delta":{"type":"text_delta","text":`+q(p)+`}}`)
	}
	if complete {
		s += ev("content_block_stop", `{"type":"content_block_stop","index":`+idx+`}`) +
			ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}`) +
			ev("message_stop", `{"type":"message_stop"}`)
	}
	return s
}

// messagesText reads a Messages stream's text as an SDK accumulates it,
// and counts its message_stop events.
func messagesText(t *testing.T, body string) (text string, stops int) {
	t.Helper()
	for line := range strings.Lines(body) {
		data, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type  string
			Delta struct{ Type, Text string }
		}
		require.NoError(t, json.Unmarshal([]byte(data), &ev))
		switch {
		case ev.Type == "message_stop":
			stops++
		case ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta":
			text += ev.Delta.Text
		}
	}
	return text, stops
}

// Where no prefill can be built of what was delivered or of the request
// (extended thinking, whitespace alone, an assistant turn of the caller's
// that cannot be extended), the cut stream is regenerated and matched
// instead, and no prefill is sent; a request that asks for several
// choices is still never continued.
func TestContinueStreamsRegeneratesWithoutAPrefill(t *testing.T) {
	const messagesURL = "https://api.anthropic.com/v1/messages"
	for _, tc := range []struct {
		name, url, body string
		cut, rest       string // the cut stream and its regeneration; rest "": never continued
		text            func(*testing.T, string) string
		want            string
	}{
		{
			name: "thinking delivered", url: messagesURL,
			body: `{"model":"claude-sonnet-4-5","max_tokens":9,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"Say hello"}],"stream":true}`,
			cut:  messagesStream("msg_1", "Let me think.", false, "Hel"),
			rest: messagesStream("msg_2", "Thinking again.", true, "Hello!"),
			want: "Hello!",
		},
		{
			name: "whitespace alone", url: messagesURL,
			body: `{"model":"claude-sonnet-4-5","max_tokens":9,"messages":[{"role":"user","content":"Say hello"}],"stream":true}`,
			cut:  messagesStream("msg_1", "", false, "\n\n"),
			rest: messagesStream("msg_2", "", true, "\n\nHello!"),
			want: "\n\nHello!",
		},
		{
			name: "an assistant turn that cannot be extended", url: testURL,
			body: `{"model":"m","messages":[{"role":"user","content":"Say hello"},{"role":"assistant","content":null,"tool_calls":[]}],"stream":true}`,
			cut:  chatStream("c1", false, "Hello", " wor"),
			rest: chatStream("c2", true, "Hello world!"),
			want: "Hello world!",
		},
		{
			name: "several choices asked", url: testURL,
			body: `{"model":"m","n":2,"messages":[{"role":"user","content":"Say hello"}],"stream":true}`,
			cut:  chatStream("c1", false, "Hello", " wor"),
			want: "Hello wor",
		},
		{
			name: "several choices asked, where the route regenerates", url: "https://api.openai.com/v1/chat/completions",
			body: `{"model":"gpt-4o","n":2,"messages":[{"role":"user","content":"Say hello"}],"stream":true}`,
			cut:  chatStream("c1", false, "Hello", " wor"),
			want: "Hello wor",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := &streams{replies: []func(*http.Request) *http.Response{stream(tc.cut, syscall.ECONNRESET), stream(tc.rest, nil)}}
				var rec recorder
				resp, err := mustNew(t, base, Policy{RetryStreams: true, ContinueStreams: true, OnAttempt: rec.on}).RoundTrip(testkit.StainlessPost(t, tc.url, tc.body))
				require.NoError(t, err)
				got, err := readAll(resp)
				text, _, _, _ := chatText(t, got)
				if tc.url == messagesURL {
					var stops int
					text, stops = messagesText(t, got)
					assert.Equal(t, 1, stops)
				}
				assert.Equal(t, tc.want, text)
				if tc.rest == "" {
					assert.ErrorIs(t, err, ErrStreamCut)
					assert.ErrorContains(t, err, "not continued: the request asks for several choices")
					assert.Len(t, base.sent(), 1, "no second request")
					return
				}
				require.NoError(t, err)
				assert.Equal(t, []string{tc.body, tc.body}, base.sent(), "the request again, as it was: no prefill")
				require.Len(t, rec.attempts, 2)
				assert.Equal(t, "regenerate", rec.attempts[1].Continued)
			})
		})
	}
}

// A continuation whose 200 opens with a final error event (a spent quota)
// ends the stream at once, and the read's error says the provider
// refused: it is not sent again for each retry left.
func TestContinuationStopsAtAFinalFirstEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		quota := "data: {\"error\":{\"message\":\"You exceeded your current quota.\",\"type\":\"insufficient_quota\",\"code\":\"insufficient_quota\"}}\n\n"
		base := &streams{replies: []func(*http.Request) *http.Response{
			stream(chatStream("c1", false, "Hello", " wor"), io.ErrUnexpectedEOF),
			stream(quota, nil),
		}}
		rt := mustNew(t, base, Policy{RetryStreams: true, ContinueStreams: true})
		resp, err := rt.RoundTrip(testkit.StainlessPost(t, testURL, `{"model":"m","messages":[{"role":"user","content":"Say hello"}],"stream":true}`))
		require.NoError(t, err)
		_, err = readAll(resp)
		assert.ErrorIs(t, err, ErrStreamCut)
		assert.ErrorIs(t, err, ErrProviderRefused, "the stop says why")
		assert.Len(t, base.sent(), 2, "one continuation")
	})
}
