package interop

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"testing/synctest"

	"github.com/anthropics/anthropic-sdk-go/v2"
	antoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/llmretry/llmretry/internal/wire"
	"github.com/openai/openai-go/v3"
	oaoption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Continued streams (issue 29) through the real SDKs: fakes cut their
// streams after content reached the caller, and with ContinueStreams the
// SDK's own accumulator reads one whole answer, the first message's id
// kept (resumed, prefilled or regenerated and matched, as
// Policy.ContinueStreams says per API); a cut that is not continued reads
// as an error wrapping llmretry.ErrStreamCut. Every fake is in memory,
// each test in a synctest bubble.

// cutHeader marks a reply whose connection closes after its events,
// before its completion marker; cutting strips it.
const cutHeader = "X-Test-Cut"

// cut returns r's first n events, the connection then closed.
func cut(r testkit.Reply, n int) testkit.Reply {
	r.Events = slices.Clone(r.Events[:n])
	return r.With(cutHeader, "1")
}

// withID returns r with every occurrence of id in its events replaced by
// to: a continuation's own message id.
func withID(r testkit.Reply, id, to string) testkit.Reply {
	events := make([]string, len(r.Events))
	for i, ev := range r.Events {
		events[i] = strings.ReplaceAll(ev, id, to)
	}
	r.Events = events
	return r
}

// cutting is a base that answers as its Provider does, and ends the body
// of a reply marked with cutHeader as net/http reports a connection
// closed inside a chunked body: io.ErrUnexpectedEOF after its bytes.
type cutting struct{ *testkit.Provider }

func (c cutting) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.Provider.RoundTrip(req)
	if err != nil || resp.Header.Get(cutHeader) == "" {
		return resp, err
	}
	resp.Header.Del(cutHeader)
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(resp.Body, iotest.ErrReader(io.ErrUnexpectedEOF)), resp.Body}
	return resp, nil
}

// cutServer serves as its Provider does over a real connection, and
// aborts the connection after the events of a reply marked with
// cutHeader: the client reads the chunked body's bytes, then
// io.ErrUnexpectedEOF.
type cutServer struct{ *testkit.Provider }

func (s cutServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cw := &cutWriter{ResponseWriter: w}
	s.Provider.ServeHTTP(cw, r)
	if cw.cut {
		panic(http.ErrAbortHandler)
	}
}

// cutWriter notes (and strips) cutHeader as the headers are written.
type cutWriter struct {
	http.ResponseWriter
	cut bool
}

func (w *cutWriter) WriteHeader(code int) {
	if w.Header().Get(cutHeader) != "" {
		w.cut = true
		w.Header().Del(cutHeader)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *cutWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// lastTurn returns the role and text of the last turn of a request body:
// its messages' (Gemini: contents') last element, whose content is a
// string, or text blocks (parts) joined.
func lastTurn(body string) (role, text string) {
	var req struct {
		Messages []json.RawMessage `json:"messages"`
		Contents []json.RawMessage `json:"contents"`
	}
	if json.Unmarshal([]byte(body), &req) != nil {
		return "", ""
	}
	turns := append(req.Messages, req.Contents...)
	if len(turns) == 0 {
		return "", ""
	}
	type textPart struct {
		Text string `json:"text"`
	}
	var turn struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
		Parts   []textPart      `json:"parts"`
	}
	if json.Unmarshal(turns[len(turns)-1], &turn) != nil {
		return "", ""
	}
	if json.Unmarshal(turn.Content, &text) == nil {
		return turn.Role, text
	}
	var blocks []textPart
	_ = json.Unmarshal(turn.Content, &blocks)
	var b strings.Builder
	for _, p := range append(blocks, turn.Parts...) {
		b.WriteString(p.Text)
	}
	return turn.Role, b.String()
}

// continuing returns a Transport over prov that retries and continues
// streams, recording its attempts in rec.
func continuing(t *testing.T, prov *testkit.Provider, rec *recorder) *llmretry.Transport {
	return retrying(t, cutting{prov}, llmretry.Policy{RetryStreams: true, ContinueStreams: true, OnAttempt: rec.on})
}

// The ids of testkit's streams, and the continuations' own.
const (
	openAIChatID   = "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG"
	anthropicMsgID = "msg_01XFDUDYJgAACzvnptvVoYEL"
	responsesID    = "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b"
	secondID       = "second_0123456789"
)

// openAIAccumulated reads a chat completion stream through openai-go's
// ChatCompletionAccumulator and returns what it accumulated and the
// stream's error.
func openAIAccumulated(client openai.Client) (openai.ChatCompletionAccumulator, error) {
	stream := client.Chat.Completions.NewStreaming(context.Background(), openAIParams())
	defer stream.Close()
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	return acc, stream.Err()
}

// openai-go's ChatCompletionAccumulator through a cut chat stream: on a
// host that is not OpenAI's the rest is asked for by a prefill (the
// delivered text as a last assistant message); on api.openai.com, which
// starts a prefill over, the request is sent again as it was and its
// answer, chunked differently, matched against what was delivered. Either
// way the accumulator holds the whole answer once, with the first chunk's
// id.
func TestContinueOpenAIChat(t *testing.T) {
	for _, tt := range []struct {
		name, base, strategy string
		rest                 []string // the continuation's parts
	}{
		{"prefilled on another host", fakeOpenAIURL, "prefill", []string{" can I", " help?"}},
		{"regenerated and matched on api.openai.com", "https://api.openai.com/v1/", "regenerate", []string{"Hello! H", "ow can", " I help?"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(
					cut(testkit.OpenAIChatStream(streamParts...), 1+3), // the role chunk, "Hel", "lo", "! How"
					withID(testkit.OpenAIChatStream(tt.rest...), openAIChatID, secondID))
				var rec recorder
				acc, err := openAIAccumulated(openAIClient(tt.base, continuing(t, prov, &rec), oaoption.WithMaxRetries(0)))
				require.NoError(t, err)
				require.Len(t, acc.Choices, 1)
				assert.Equal(t, streamText, acc.Choices[0].Message.Content)
				assert.Equal(t, openAIChatID, acc.ID, "the first chunk's id")
				assert.Equal(t, "stop", acc.Choices[0].FinishReason)

				bodies := prov.Bodies()
				require.Len(t, bodies, 2)
				role, text := lastTurn(bodies[1])
				if tt.strategy == "prefill" {
					assert.Equal(t, "assistant", role)
					assert.Equal(t, "Hello! How", text, "the delivered text, prefilled")
				} else {
					assert.Equal(t, bodies[0], bodies[1], "the request again, as it was")
				}
				require.Len(t, rec.All(), 2)
				assert.Equal(t, tt.strategy, rec.All()[1].Continued)
				assert.Equal(t, int64(len("Hello! How")), rec.All()[1].From)
			})
		})
	}
}

// backgroundResponses is testkit's Responses stream of streamParts as a
// response created with background: true; event i carries sequence
// number i.
func backgroundResponses() testkit.Reply {
	r := testkit.OpenAIResponsesStream(streamParts...)
	r.Events = slices.Clone(r.Events)
	for i := range 2 { // response.created, response.in_progress
		r.Events[i] = strings.Replace(r.Events[i], `"status":"in_progress"`, `"background":true,"status":"in_progress"`, 1)
	}
	return r
}

// backgroundStream starts a Responses stream created with background: true
// through client.
func backgroundStream(client openai.Client) *ssestream.Stream[responses.ResponseStreamEventUnion] {
	return client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
		Model:      openAIModel,
		Input:      responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello.")},
		Background: openai.Bool(true),
	})
}

// openai-go's Responses stream created with background: true, cut after
// "! How": resumed with GET /v1/responses/{id}?stream=true&starting_after=N,
// N the last sequence number the caller received; the fake answers the
// events after N, and openai-go reads every event once, in sequence, and
// the whole text.
func TestContinueOpenAIResponsesResumed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		full := backgroundResponses()
		const delivered = 5 // response.created, response.in_progress, "Hel", "lo", "! How": sequence numbers 0 to 4
		prov := testkit.NewProviderFunc(func(c testkit.Call, n int) testkit.Reply {
			if n == 1 {
				return cut(full, delivered)
			}
			q, _ := url.ParseQuery(c.Query)
			after, err := strconv.Atoi(q.Get("starting_after"))
			if c.Method != http.MethodGet || err != nil {
				return testkit.OpenAIError(http.StatusBadRequest, "not a resumption", "invalid_request_error", "", "")
			}
			r := full
			r.Events = full.Events[min(after+1, len(full.Events)):]
			return r
		})
		var rec recorder
		stream := backgroundStream(openAIClient(fakeOpenAIURL, continuing(t, prov, &rec), oaoption.WithMaxRetries(0)))
		defer stream.Close()
		var text strings.Builder
		var seqs []int64
		completed := 0
		for stream.Next() {
			ev := stream.Current()
			seqs = append(seqs, ev.SequenceNumber)
			switch ev.Type {
			case "response.output_text.delta":
				text.WriteString(ev.Delta)
			case "response.completed":
				completed++
				assert.Equal(t, responsesID, ev.Response.ID)
			}
		}
		require.NoError(t, stream.Err())
		assert.Equal(t, streamText, text.String())
		assert.Equal(t, 1, completed)
		want := make([]int64, len(full.Events))
		for i := range want {
			want[i] = int64(i)
		}
		assert.Equal(t, want, seqs, "every sequence number once, in order")

		calls := prov.Received()
		require.Len(t, calls, 2)
		assert.Equal(t, http.MethodPost, calls[0].Method)
		assert.Equal(t, http.MethodGet, calls[1].Method, "resumed, not sent again")
		assert.Equal(t, "/v1/responses/"+responsesID, calls[1].Path)
		q, err := url.ParseQuery(calls[1].Query)
		require.NoError(t, err)
		assert.Equal(t, url.Values{"stream": {"true"}, "starting_after": {"4"}}, q, "after the last sequence number the caller received")
		assert.Empty(t, calls[1].Body)
		require.Len(t, rec.All(), 2)
		assert.Equal(t, "resume", rec.All()[1].Continued)
	})
}

// anthropicAccumulated reads a Messages stream through anthropic-sdk-go's
// Message.Accumulate and returns the message and the stream's error.
func anthropicAccumulated(t *testing.T, client anthropic.Client) (anthropic.Message, error) {
	t.Helper()
	stream := client.Messages.NewStreaming(context.Background(), anthropicParams())
	defer stream.Close()
	var msg anthropic.Message
	for stream.Next() {
		require.NoError(t, msg.Accumulate(stream.Current()))
	}
	return msg, stream.Err()
}

// anthropic-sdk-go's Message.Accumulate through a cut Messages stream,
// continued by a prefill: the last assistant message is the delivered
// text without its trailing whitespace (Anthropic refuses a prefill that
// ends in whitespace), and a cut right after whitespace doubles nothing
// where the continuation starts with it again. The message is one whole
// text block with the first message's id and the continuation's
// stop_reason.
func TestContinueAnthropic(t *testing.T) {
	for _, tt := range []struct {
		name        string
		parts, rest []string
		cutAfter    int // deltas delivered
		prefill     string
	}{
		{"cut mid-word", streamParts, []string{" can I", " help?"}, 3, "Hello! How"},
		{"cut right after whitespace", []string{"Hello!", " How ", "can I", " help?"}, []string{" can I", " help?"}, 2, "Hello! How"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(
					cut(testkit.AnthropicStream(tt.parts...), 3+tt.cutAfter), // message_start, content_block_start, ping, the deltas
					withID(testkit.AnthropicStream(tt.rest...), anthropicMsgID, secondID))
				var rec recorder
				msg, err := anthropicAccumulated(t, anthropicClient(fakeAnthropicURL, continuing(t, prov, &rec), antoption.WithMaxRetries(0)))
				require.NoError(t, err)
				assert.Equal(t, anthropicMsgID, msg.ID, "the first message's id")
				require.Len(t, msg.Content, 1, "one text block")
				assert.Equal(t, streamText, msg.Content[0].Text)
				assert.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason)

				bodies := prov.Bodies()
				require.Len(t, bodies, 2)
				role, text := lastTurn(bodies[1])
				assert.Equal(t, "assistant", role)
				assert.Equal(t, tt.prefill, text, "the delivered text without trailing whitespace")
				require.Len(t, rec.All(), 2)
				assert.Equal(t, "prefill", rec.All()[1].Continued)
			})
		})
	}
}

// genai's streamed text through a cut streamGenerateContent, continued by
// a prefill (a final model turn): the chunks' text is the whole answer
// once.
func TestContinueGemini(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(
			cut(testkit.GeminiStream(streamParts...), 3), // "Hel", "lo", "! How", no finishReason
			testkit.GeminiStream(" can I", " help?"))
		var rec recorder
		client := geminiClient(t, fakeGeminiURL, continuing(t, prov, &rec), nil)
		var text strings.Builder
		for chunk, err := range client.Models.GenerateContentStream(context.Background(), geminiModel, geminiPrompt(), nil) {
			require.NoError(t, err)
			text.WriteString(chunk.Text())
		}
		assert.Equal(t, streamText, text.String())
		bodies := prov.Bodies()
		require.Len(t, bodies, 2)
		role, prefill := lastTurn(bodies[1])
		assert.Equal(t, "model", role)
		assert.Equal(t, "Hello! How", prefill)
		require.Len(t, rec.All(), 2)
		assert.Equal(t, "prefill", rec.All()[1].Continued)
	})
}

// anthropicToolCut is a Messages stream cut inside a tool call's
// arguments.
func anthropicToolCut() testkit.Reply {
	ev := func(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }
	r := testkit.AnthropicStream()
	r.Events = append(slices.Clone(r.Events[:1]),
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}`),
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"location\": \"San Fra"}}`))
	return r.With(cutHeader, "1")
}

// A cut inside a tool call is never continued (half-written arguments
// cannot be prefilled; continuing would turn the call into prose): no
// second request is sent, and anthropic-sdk-go's stream fails with an
// error wrapping ErrStreamCut that says why.
func TestContinueNeverInAToolCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(anthropicToolCut(), testkit.AnthropicStream(streamParts...))
		var rec recorder
		_, err := anthropicAccumulated(t, anthropicClient(fakeAnthropicURL, continuing(t, prov, &rec), antoption.WithMaxRetries(0)))
		require.ErrorIs(t, err, llmretry.ErrStreamCut)
		assert.ErrorContains(t, err, "not continued: a tool call")
		assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "the cut's own error")
		assert.Equal(t, 1, prov.Attempts(), "no second request")
	})
}

// With RetryStreams and not ContinueStreams, a stream cut after content
// is the caller's, as it was cut: each SDK's read fails with an error
// wrapping ErrStreamCut, never io.EOF or a bare unexpected EOF, and
// nothing is sent again.
func TestRetryStreamsCutIsStreamCut(t *testing.T) {
	for _, tt := range []struct {
		name  string
		reply testkit.Reply
		read  func(t *testing.T, rt http.RoundTripper) error
	}{
		{"openai-go chat", cut(testkit.OpenAIChatStream(streamParts...), 1+3), func(t *testing.T, rt http.RoundTripper) error {
			_, err := openAIAccumulated(openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0)))
			return err
		}},
		{"openai-go Responses", cut(backgroundResponses(), 5), func(t *testing.T, rt http.RoundTripper) error {
			stream := backgroundStream(openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0)))
			defer stream.Close()
			for stream.Next() {
			}
			return stream.Err()
		}},
		{"anthropic-sdk-go", cut(testkit.AnthropicStream(streamParts...), 3+3), func(t *testing.T, rt http.RoundTripper) error {
			_, err := anthropicAccumulated(t, anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0)))
			return err
		}},
		{"anthropic-sdk-go, cut cleanly", func() testkit.Reply {
			r := testkit.AnthropicStream(streamParts...)
			r.Events = r.Events[:3+3]
			return r
		}(), func(t *testing.T, rt http.RoundTripper) error {
			_, err := anthropicAccumulated(t, anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0)))
			return err
		}},
		{"genai", cut(testkit.GeminiStream(streamParts...), 3), func(t *testing.T, rt http.RoundTripper) error {
			for _, err := range geminiClient(t, fakeGeminiURL, rt, nil).Models.GenerateContentStream(context.Background(), geminiModel, geminiPrompt(), nil) {
				if err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(tt.reply, testkit.OK())
				err := tt.read(t, retrying(t, cutting{prov}, llmretry.Policy{RetryStreams: true}))
				require.ErrorIs(t, err, llmretry.ErrStreamCut)
				var ex *llmretry.Exhausted
				assert.True(t, errors.As(err, &ex), "GaveUp's record is reachable: %v", err)
				assert.Equal(t, 1, prov.Attempts(), "nothing sent again")
			})
		})
	}
}

// A route that refuses prefill (Claude 4.6 and later) is sent one prefill
// in the whole test: its 400 is remembered, the cut is regenerated and
// matched instead, and every later cut on it goes straight to
// regeneration. A regeneration that departs from the delivered text is
// never handed on: the read fails with ErrStreamCut saying it diverged,
// and what the SDK accumulated is a prefix of the answer.
func TestContinueRefusedPrefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const refusal = "This model does not support assistant message prefill. The conversation must end with a user message."
		prefills, fresh := 0, 0
		diverge := false
		prov := testkit.NewProviderFunc(func(c testkit.Call, _ int) testkit.Reply {
			if role, _ := lastTurn(c.Body); role == "assistant" {
				prefills++
				return testkit.AnthropicError(http.StatusBadRequest, "invalid_request_error", refusal)
			}
			fresh++
			switch {
			case fresh%2 == 1: // each call's first attempt: cut after "Hello! How"
				return cut(testkit.AnthropicStream(streamParts...), 3+3)
			case diverge:
				return testkit.AnthropicStream("Hello! Who", " are you?")
			}
			return testkit.AnthropicStream("Hello!", " How can", " I help?")
		})
		var rec recorder
		client := anthropicClient(fakeAnthropicURL, continuing(t, prov, &rec), antoption.WithMaxRetries(0))
		for call := range 3 {
			msg, err := anthropicAccumulated(t, client)
			require.NoError(t, err, "call %d", call+1)
			require.Len(t, msg.Content, 1)
			assert.Equal(t, streamText, msg.Content[0].Text, "call %d", call+1)
			assert.Equal(t, anthropicMsgID, msg.ID)
		}
		assert.Equal(t, 1, prefills, "one prefill in the whole test")
		assert.Equal(t, 7, prov.Attempts(), "the first call's cut, prefill and regeneration; two each after")
		var strategies []string
		for _, a := range rec.All() {
			strategies = append(strategies, a.Continued)
		}
		assert.Equal(t, []string{"", "prefill", "regenerate", "", "regenerate", "", "regenerate"}, strategies)

		diverge = true
		msg, err := anthropicAccumulated(t, client)
		require.ErrorIs(t, err, llmretry.ErrStreamCut)
		assert.ErrorIs(t, err, wire.ErrDiverged)
		assert.ErrorContains(t, err, "the regenerated answer does not begin with what was delivered")
		var text string
		if len(msg.Content) > 0 {
			text = msg.Content[0].Text
		}
		assert.Equal(t, "Hello! How", text, "not a byte of the divergent answer")
		assert.True(t, strings.HasPrefix(streamText, text))
		assert.Equal(t, 1, prefills, "still one prefill")
	})
}

// Over loopback connections, a stream whose connection is aborted after
// content (a chunked body without its end) is continued as in memory:
// openai-go's accumulator and anthropic-sdk-go's Message.Accumulate read
// the whole answer with the first message's id, from one prefill.
func TestContinueOverLoopback(t *testing.T) {
	for _, tt := range []struct {
		name  string
		first testkit.Reply
		rest  testkit.Reply
		read  func(t *testing.T, base string, rt http.RoundTripper) (id, text string)
	}{
		{"openai-go", cut(testkit.OpenAIChatStream(streamParts...), 1+3), withID(testkit.OpenAIChatStream(" can I", " help?"), openAIChatID, secondID),
			func(t *testing.T, base string, rt http.RoundTripper) (string, string) {
				acc, err := openAIAccumulated(openAIClient(base+"/v1/", rt, oaoption.WithMaxRetries(0)))
				require.NoError(t, err)
				require.Len(t, acc.Choices, 1)
				return acc.ID, acc.Choices[0].Message.Content
			}},
		{"anthropic-sdk-go, cut after whitespace", cut(testkit.AnthropicStream("Hello!", " How ", "can I", " help?"), 3+2), withID(testkit.AnthropicStream(" can I", " help?"), anthropicMsgID, secondID),
			func(t *testing.T, base string, rt http.RoundTripper) (string, string) {
				msg, err := anthropicAccumulated(t, anthropicClient(base+"/", rt, antoption.WithMaxRetries(0)))
				require.NoError(t, err)
				require.Len(t, msg.Content, 1)
				return msg.ID, msg.Content[0].Text
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			prov := testkit.NewProvider(tt.first, tt.rest)
			srv := httptest.NewServer(cutServer{prov})
			defer srv.Close()
			var rec recorder
			rt := retrying(t, srv.Client().Transport, llmretry.Policy{RetryStreams: true, ContinueStreams: true, OnAttempt: rec.on})
			id, text := tt.read(t, srv.URL, rt)
			assert.Equal(t, streamText, text)
			assert.NotEqual(t, secondID, id, "the first message's id")
			assert.Equal(t, 2, prov.Attempts())
			role, prefill := lastTurn(prov.Bodies()[1])
			assert.Equal(t, "assistant", role)
			assert.Equal(t, "Hello! How", prefill)
			require.Len(t, rec.All(), 2)
			assert.Equal(t, "prefill", rec.All()[1].Continued)
		})
	}
}
