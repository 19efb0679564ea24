package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry/internal/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fbWall is failoverbench's fake provider (its wall.py) as an in-memory
// http.RoundTripper: an OpenAI-compatible chat completions endpoint that
// breaks on purpose, the fault chosen by the model named in the JSON body.
// It serves every host it is sent to alike, and records every attempt: its
// model, host, time since the wall's reset, prompt size, the Authorization
// it carried, and what the wall did with it. Its sleeps are time.Sleep's,
// so inside a testing/synctest bubble the full profile's minutes pass in
// virtual time. Safe for concurrent use.
type fbWall struct {
	mu     sync.Mutex
	start  time.Time
	log    []fbEntry
	counts map[string]int // attempts per model name since the reset
	seq    int            // completions started, for their ids
}

// fbEntry is one attempt as the wall saw it.
type fbEntry struct {
	at           time.Duration // since the wall's reset
	model        string
	host         string
	auth         string // the Authorization header, as received
	attempt      int    // this model's attempt number since the reset
	stream       bool
	lastRole     string
	promptTokens int
	action       string // what the wall did; "400 prefill…" marks a prefill rejection
	request      string // the request as received: URL, every header, body
}

// newFBWall returns a wall reset now.
func newFBWall() *fbWall {
	return &fbWall{start: time.Now(), counts: map[string]int{}}
}

// entries returns a copy of the log.
func (w *fbWall) entries() []fbEntry {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]fbEntry(nil), w.log...)
}

// since returns the time since the wall's reset.
func (w *fbWall) since() time.Duration { return time.Since(w.start) }

// record logs an attempt and returns its index and its model's attempt
// number.
func (w *fbWall) record(e fbEntry) (int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts[e.model]++
	w.seq++
	e.attempt = w.counts[e.model]
	e.at = time.Since(w.start)
	w.log = append(w.log, e)
	return len(w.log) - 1, e.attempt
}

// act records what the wall did with attempt i.
func (w *fbWall) act(i int, action string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.log[i].action = action
}

// fbBehaviours maps a model's tag (the part after "fb-", up to the next
// dash) to its fault, as wall.py's BEHAVIOURS.
var fbBehaviours = map[string]string{
	"ok": "ok", "ok-noprefill": "ok_noprefill",
	"s01": "429_retry_after_once", "s02": "429_persistent", "s03": "500_once", "s04": "503_persistent",
	"s05": "reset_once", "s06": "no_response", "s07": "slow_ttft", "s08": "stream_cut",
	"s09": "stream_stall", "s10": "malformed_chunk", "s11": "no_done", "s12": "context_length",
	"s13": "content_filter", "s14": "stream_cut", "s15": "flap", "s16": "503_persistent",
}

// fbTag returns a model's tag, keyed on the name after its last slash (a
// gateway may prefix a provider), or "" for a model the wall does not know.
func fbTag(model string) string {
	name := strings.ToLower(strings.TrimSpace(model[strings.LastIndex(model, "/")+1:]))
	rest, ok := strings.CutPrefix(name, "fb-")
	if !ok {
		return ""
	}
	if rest == "ok" || rest == "ok-noprefill" {
		return rest
	}
	tag, _, _ := strings.Cut(rest, "-")
	if _, known := fbBehaviours[tag]; !known {
		return ""
	}
	return tag
}

// fbChatRequest is what the wall reads of a chat completions request.
type fbChatRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// RoundTrip answers one attempt as the wall would.
func (w *fbWall) RoundTrip(req *http.Request) (*http.Response, error) {
	var raw []byte
	if req.Body != nil {
		var err error
		raw, err = io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
	}
	if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/chat/completions") {
		return fbErrorReply(req, http.StatusNotFound, "No route for "+req.Method+" "+req.URL.Path, "invalid_request_error", "", nil), nil
	}
	var body fbChatRequest
	if err := json.Unmarshal(raw, &body); err != nil {
		return fbErrorReply(req, http.StatusBadRequest, "Request body is not valid JSON", "invalid_request_error", "", nil), nil
	}
	lastRole, lastContent := "", ""
	promptTokens := 0
	for _, m := range body.Messages {
		var text string
		_ = json.Unmarshal(m.Content, &text) // a string content; parts count as empty
		promptTokens += len(strings.Fields(text)) + 4
		lastRole, lastContent = m.Role, text
	}
	tag := fbTag(body.Model)
	i, attempt := w.record(fbEntry{
		model: body.Model, host: req.URL.Host, auth: req.Header.Get("Authorization"),
		stream: body.Stream, lastRole: lastRole, promptTokens: promptTokens, request: fbDump(req, raw),
	})
	if tag == "" {
		w.act(i, "404 model_not_found")
		return fbErrorReply(req, http.StatusNotFound, "The model `"+body.Model+"` does not exist", "invalid_request_error", "model_not_found", nil), nil
	}
	behaviour := fbBehaviours[tag]

	// A prefill (an assistant message last) whose text begins the canonical
	// answer gets the rest, as from a provider that supports prefill; the
	// no-prefill model refuses any.
	words := strings.Fields(fbCanonical)
	continuation := false
	if lastRole == "assistant" {
		if behaviour == "ok_noprefill" {
			w.act(i, "400 prefill_rejected")
			return fbErrorReply(req, http.StatusBadRequest,
				"This model does not support assistant message prefill. The conversation must end with a user message.",
				"invalid_request_error", "invalid_prefill", nil), nil
		}
		if partial := strings.TrimSpace(lastContent); partial != "" && strings.HasPrefix(fbCanonical, partial) {
			words = strings.Fields(fbCanonical[len(partial):])
			continuation = true
		}
	}

	switch behaviour {
	case "429_retry_after_once":
		if attempt == 1 {
			secs := int(fbTiming.retryAfter / time.Second)
			w.act(i, fmt.Sprintf("429 retry-after=%d", secs))
			return fbErrorReply(req, http.StatusTooManyRequests,
				fmt.Sprintf("Rate limit reached for %s. Please retry after %d seconds.", body.Model, secs),
				"rate_limit_error", "rate_limit_exceeded", http.Header{"Retry-After": {strconv.Itoa(secs)}}), nil
		}
	case "429_persistent":
		w.act(i, "429")
		return fbErrorReply(req, http.StatusTooManyRequests, "Rate limit reached for "+body.Model+".", "rate_limit_error", "rate_limit_exceeded", nil), nil
	case "500_once":
		if attempt == 1 {
			w.act(i, "500")
			return fbErrorReply(req, http.StatusInternalServerError, "The server had an error while processing your request.", "server_error", "", nil), nil
		}
	case "503_persistent":
		w.act(i, "503")
		return fbErrorReply(req, http.StatusServiceUnavailable, "The engine is currently overloaded. Please try again later.", "server_error", "overloaded", nil), nil
	case "reset_once":
		if attempt == 1 {
			w.act(i, "tcp-reset")
			return nil, fbConnReset()
		}
	case "no_response":
		w.act(i, fmt.Sprintf("no-response %s", fbTiming.noResponse))
		if err := clock.Sleep(req.Context(), fbTiming.noResponse); err != nil {
			return nil, err // the client gave up: as net/http, its context's error
		}
		return nil, io.EOF // the wall hung up without a response
	case "context_length":
		w.act(i, "400 context_length_exceeded")
		return fbErrorReply(req, http.StatusBadRequest,
			"This model's maximum context length is 8192 tokens. However, your messages resulted in 9631 tokens. Please reduce the length of the messages.",
			"invalid_request_error", "context_length_exceeded", nil), nil
	case "content_filter":
		w.act(i, "400 content_policy_violation")
		return fbErrorReply(req, http.StatusBadRequest, "Your request was rejected as a result of our safety system.",
			"invalid_request_error", "content_policy_violation", nil), nil
	case "flap":
		if w.since() < fbTiming.flapDown {
			w.act(i, "503 (down window)")
			return fbErrorReply(req, http.StatusServiceUnavailable, "The engine is currently overloaded. Please try again later.", "server_error", "overloaded", nil), nil
		}
		w.act(i, "200 (recovered)")
	}

	mode := map[string]string{
		"slow_ttft": "slow", "stream_cut": "cut", "stream_stall": "stall", "malformed_chunk": "malformed", "no_done": "no_done",
	}[behaviour]
	answer := fbAnswer{wall: w, entry: i, model: body.Model, id: fmt.Sprintf("chatcmpl-fb-%d", i+1), words: words,
		continuation: continuation, mode: mode, usage: body.StreamOptions.IncludeUsage, promptTokens: promptTokens}
	if body.Stream {
		return answer.stream(req), nil
	}
	return answer.plain(req), nil
}

// fbDump renders a request as received: its URL, every header and its
// body.
func fbDump(req *http.Request, body []byte) string {
	var b strings.Builder
	b.WriteString(req.Method + " " + req.URL.String() + "\n")
	_ = req.Header.Write(&b)
	b.Write(body)
	return b.String()
}

// fbErrorReply is an OpenAI-style error response.
func fbErrorReply(req *http.Request, status int, message, typ, code string, extra http.Header) *http.Response {
	var c any
	if code != "" {
		c = code
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": message, "type": typ, "param": nil, "code": c}})
	h := http.Header{"Content-Type": {"application/json"}}
	for k, vs := range extra {
		h[k] = vs
	}
	return fbResponse(req, status, h, io.NopCloser(bytes.NewReader(b)), int64(len(b)))
}

// fbResponse is a response of the wall.
func fbResponse(req *http.Request, status int, h http.Header, body io.ReadCloser, length int64) *http.Response {
	return &http.Response{
		Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: body, ContentLength: length, Request: req,
	}
}

// fbConnReset is the error net/http returns for a connection the server
// reset before any response bytes.
func fbConnReset() error {
	return &net.OpError{Op: "read", Net: "tcp",
		Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 443},
		Err:  os.NewSyscallError("read", syscall.ECONNRESET)}
}

// fbSleep sleeps d while a body is sent, returning early with why ctx
// ended: the request's context error, or io.ErrClosedPipe when the client
// closed the body (fbBody.Close).
func fbSleep(ctx context.Context, d time.Duration) error {
	if clock.Sleep(ctx, d) != nil {
		return context.Cause(ctx)
	}
	return nil
}

// fbAnswer is one healthy or stream-shaped answer being sent.
type fbAnswer struct {
	wall         *fbWall
	entry        int
	model, id    string
	words        []string
	continuation bool
	mode         string // "", "slow", "cut", "stall", "malformed" or "no_done"
	usage        bool   // stream_options.include_usage
	promptTokens int
}

// fbDelta is a chunk's delta.
type fbDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// fbChunk is a chat.completion.chunk.
type fbChunk struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Choices []fbChunkChoice `json:"choices"`
	Usage   *fbUsage        `json:"usage,omitempty"`
}

// fbChunkChoice is a chunk's choice.
type fbChunkChoice struct {
	Index        int     `json:"index"`
	Delta        fbDelta `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

// fbUsage is a usage block.
type fbUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// stream answers with server-sent events: headers at once, then (after
// S07's delay) the role chunk, a chunk per word every tokenInterval, the
// finish chunk, the usage chunk if asked for, and [DONE] — or the fault
// of its mode. A cut or stalled stream ends as net/http reports a
// connection closed inside a chunked body: io.ErrUnexpectedEOF. The body
// honours the request's context and the client's Close.
func (a fbAnswer) stream(req *http.Request) *http.Response {
	pr, pw := io.Pipe()
	ctx := req.Context()
	sending, leave := context.WithCancelCause(ctx)
	body := &fbBody{PipeReader: pr, leave: leave}
	stop := context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
	go func() {
		defer stop()
		defer leave(nil)
		pw.CloseWithError(a.send(sending, pw))
	}()
	h := http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}, "Cache-Control": {"no-cache"}, "X-Accel-Buffering": {"no"}}
	return fbResponse(req, http.StatusOK, h, body, -1)
}

// send writes the stream's events and returns how the body ends: nil for
// a clean end.
func (a fbAnswer) send(ctx context.Context, w io.Writer) error {
	created := time.Now().Unix()
	chunk := func(d fbDelta, finish *string, u *fbUsage, choices bool) fbChunk {
		c := fbChunk{ID: a.id, Object: "chat.completion.chunk", Created: created, Model: a.model, Choices: []fbChunkChoice{}, Usage: u}
		if choices {
			c.Choices = []fbChunkChoice{{Delta: d, FinishReason: finish}}
		}
		return c
	}
	event := func(c fbChunk) error {
		b, _ := json.Marshal(c)
		_, err := fmt.Fprintf(w, "data: %s\n\n", b)
		return err
	}
	if a.mode == "slow" {
		a.wall.act(a.entry, fmt.Sprintf("200 stream, first token after %s", fbTiming.slowTTFT))
		if err := fbSleep(ctx, fbTiming.slowTTFT); err != nil {
			return err
		}
	}
	empty := ""
	if err := event(chunk(fbDelta{Role: "assistant", Content: &empty}, nil, nil, true)); err != nil {
		return err
	}
	sent := 0
	for i, word := range a.words {
		switch {
		case a.mode == "cut" && i == fbTiming.cutAfter:
			a.wall.act(a.entry, fmt.Sprintf("200 stream cut after %d tokens (no terminating chunk)", i))
			return io.ErrUnexpectedEOF
		case a.mode == "stall" && i == fbTiming.stallAfter:
			a.wall.act(a.entry, fmt.Sprintf("200 stream stalled after %d tokens for %s then close", i, fbTiming.stall))
			if err := fbSleep(ctx, fbTiming.stall); err != nil {
				return err
			}
			return io.ErrUnexpectedEOF
		case a.mode == "malformed" && i == fbTiming.malformedAt:
			a.wall.act(a.entry, fmt.Sprintf("200 stream with malformed chunk at token %d", i))
			if _, err := fmt.Fprintf(w, "data: {\"id\": %q, \"object\": \"chat.completion.chunk\", \"choices\": [{\"delta\": {\"content\": \n\n", a.id); err != nil {
				return err
			}
		}
		text := word
		if i > 0 || a.continuation {
			text = " " + word
		}
		if err := event(chunk(fbDelta{Content: &text}, nil, nil, true)); err != nil {
			return err
		}
		sent++
		if err := fbSleep(ctx, fbTiming.tokenInterval); err != nil {
			return err
		}
	}
	stopped := "stop"
	if err := event(chunk(fbDelta{}, &stopped, nil, true)); err != nil {
		return err
	}
	if a.usage {
		u := &fbUsage{PromptTokens: a.promptTokens, CompletionTokens: sent, TotalTokens: a.promptTokens + sent}
		if err := event(chunk(fbDelta{}, nil, u, false)); err != nil {
			return err
		}
	}
	if a.mode == "no_done" {
		a.wall.act(a.entry, "200 stream complete, [DONE] omitted")
		return nil
	}
	// Recorded before [DONE] is read: a client that stops at [DONE] may
	// look at the log before this goroutine runs again.
	a.wall.mu.Lock()
	if a.wall.log[a.entry].action == "" {
		a.wall.log[a.entry].action = "200 stream"
	}
	a.wall.mu.Unlock()
	_, err := io.WriteString(w, "data: [DONE]\n\n")
	return err
}

// plain answers a request that does not stream with one chat.completion
// object, or the fault of its mode on a whole body: a late body (slow), a
// body cut at 60 % of its declared length, headers and then silence
// (stall), invalid JSON (malformed). The catalogue's scenarios all stream:
// this serves the runner's alive probe.
func (a fbAnswer) plain(req *http.Request) *http.Response {
	text := strings.Join(a.words, " ")
	if a.continuation {
		text = " " + text
	}
	stopped := "stop"
	obj := map[string]any{
		"id": a.id, "object": "chat.completion", "created": time.Now().Unix(), "model": a.model,
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "finish_reason": stopped}},
		"usage":   fbUsage{PromptTokens: a.promptTokens, CompletionTokens: len(a.words), TotalTokens: a.promptTokens + len(a.words)},
	}
	b, _ := json.Marshal(obj)
	h := http.Header{"Content-Type": {"application/json"}}
	ctx := req.Context()
	switch a.mode {
	case "slow":
		a.wall.act(a.entry, fmt.Sprintf("200 after %s", fbTiming.slowTTFT))
		if err := clock.Sleep(ctx, fbTiming.slowTTFT); err != nil {
			return fbResponse(req, http.StatusOK, h, io.NopCloser(&fbFailingReader{err: err}), int64(len(b)))
		}
	case "cut":
		n := len(b) * 6 / 10
		a.wall.act(a.entry, fmt.Sprintf("200 truncated body %d/%dB then close", n, len(b)))
		return fbResponse(req, http.StatusOK, h, io.NopCloser(io.MultiReader(bytes.NewReader(b[:n]), &fbFailingReader{err: io.ErrUnexpectedEOF})), int64(len(b)))
	case "stall":
		a.wall.act(a.entry, fmt.Sprintf("200 headers then silence %s then close", fbTiming.stall))
		pr, pw := io.Pipe()
		sending, leave := context.WithCancelCause(ctx)
		body := &fbBody{PipeReader: pr, leave: leave}
		go func() {
			defer leave(nil)
			err := fbSleep(sending, fbTiming.stall)
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			pw.CloseWithError(err)
		}()
		return fbResponse(req, http.StatusOK, h, body, int64(len(b)))
	case "malformed":
		a.wall.act(a.entry, "200 malformed JSON body")
		b = append(b[:len(b)/2:len(b)/2], `"oops`...)
	}
	a.wall.mu.Lock()
	if a.wall.log[a.entry].action == "" {
		a.wall.log[a.entry].action = "200"
	}
	a.wall.mu.Unlock()
	return fbResponse(req, http.StatusOK, h, io.NopCloser(bytes.NewReader(b)), int64(len(b)))
}

// fbBody is a streamed body: closing it tells the wall the client left.
type fbBody struct {
	*io.PipeReader
	leave context.CancelCauseFunc // ends the sender's context
}

// Close closes the pipe and lets the wall's sender go.
func (b *fbBody) Close() error {
	b.leave(io.ErrClosedPipe)
	return b.PipeReader.Close()
}

// fbFailingReader fails every read with err.
type fbFailingReader struct{ err error }

// Read returns the reader's error.
func (r *fbFailingReader) Read([]byte) (int, error) { return 0, r.err }

// TestFailoverBenchWall checks the wall's shapes against wall.py's: a
// healthy stream is the canonical answer, a word every 15 ms, then the
// finish chunk, the usage chunk and [DONE]; S05's reset is the error
// net/http gives; S06's silence ends with the request's context; a fault
// selected by the model counts attempts per model.
func TestFailoverBenchWall(t *testing.T) {
	post := func(ctx context.Context, w *fbWall, model string, stream bool) (*http.Response, error) {
		body := fmt.Sprintf(`{"model":%q,"stream":%t,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":%q}]}`, model, stream, fbPrompt)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, fbPrimaryBase+"/chat/completions", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+fbPrimaryKey)
		return w.RoundTrip(req)
	}

	t.Run("a healthy stream", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w := newFBWall()
			resp, err := post(context.Background(), w, "fb-ok", true)
			require.NoError(t, err)
			assert.Equal(t, "text/event-stream; charset=utf-8", resp.Header.Get("Content-Type"))
			raw, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, 60*fbTiming.tokenInterval, w.since(), "sixty words, 15 ms apart")
			events := strings.Split(strings.TrimSuffix(string(raw), "\n\n"), "\n\n")
			require.Len(t, events, 1+60+1+1+1, "role, words, finish, usage, [DONE]")
			var text strings.Builder
			for _, e := range events[1:61] {
				var c fbChunk
				require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(e, "data: ")), &c))
				text.WriteString(*c.Choices[0].Delta.Content)
			}
			assert.Equal(t, fbCanonical, text.String())
			assert.JSONEq(t, `{"id":"chatcmpl-fb-1","object":"chat.completion.chunk","created":946684800,"model":"fb-ok","choices":[],"usage":{"prompt_tokens":21,"completion_tokens":60,"total_tokens":81}}`,
				strings.TrimPrefix(events[62], "data: "))
			assert.Equal(t, "data: [DONE]", events[63])
			e := w.entries()
			require.Len(t, e, 1)
			assert.Equal(t, "200 stream", e[0].action)
			assert.Equal(t, "Bearer "+fbPrimaryKey, e[0].auth)
			assert.Equal(t, 21, e[0].promptTokens)
		})
	})

	t.Run("S05's reset is net/http's", func(t *testing.T) {
		w := newFBWall()
		_, err := post(context.Background(), w, "fb-s05-reset", true)
		var op *net.OpError
		require.ErrorAs(t, err, &op)
		assert.ErrorIs(t, err, syscall.ECONNRESET)
		assert.Contains(t, err.Error(), "read: connection reset by peer")
		resp, err := post(context.Background(), w, "fb-s05-reset", false)
		require.NoError(t, err, "only the model's first attempt is reset")
		resp.Body.Close()
		assert.Equal(t, []int{1, 2}, []int{w.entries()[0].attempt, w.entries()[1].attempt})
	})

	t.Run("S06's silence ends with the request's context", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w := newFBWall()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := post(ctx, w, "fb-s06-no-response", true)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Equal(t, 30*time.Second, w.since())
			_, err = post(context.Background(), w, "fb-s06-no-response", true)
			assert.ErrorIs(t, err, io.EOF, "after 120 s the wall hangs up")
			assert.Equal(t, 150*time.Second, w.since())
		})
	})

	t.Run("S08's cut is an unexpected EOF after 40 words", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w := newFBWall()
			resp, err := post(context.Background(), w, "fb-s08-stream-cut", true)
			require.NoError(t, err)
			raw, err := io.ReadAll(resp.Body)
			assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
			assert.Equal(t, 1+40, strings.Count(string(raw), "data: "))
			assert.Equal(t, "200 stream cut after 40 tokens (no terminating chunk)", w.entries()[0].action)
		})
	})
}
