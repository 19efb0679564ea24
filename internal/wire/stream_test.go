package wire

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// answerParts is an answer as a provider streams it: a few words a delta,
// with whitespace at the ends of deltas, escapes and non-ASCII text.
var answerParts = []string{"Bonjour", "! Here is", " the plan:\n\n", "1. Read", " the \"spec\"", " —", " carefully", " <then> & ", "test.\t", "Done 🎉"}

// answerText is answerParts joined.
var answerText = strings.Join(answerParts, "")

// A healthy stream of each API: each event is content but the completion
// marker, which is StepComplete once; Stuck says nothing; Delivered is the
// whole answer as the SDK accumulates it.
func TestObserveHealthy(t *testing.T) {
	for _, c := range []struct {
		name   string
		api    API
		evs    []sseEvent
		marker int // the index of the completion marker
	}{
		{"chat", ChatCompletions, chatEvents(chatID, answerParts...), len(answerParts) + 1},
		{"messages", Messages, messagesEvents(msgID, answerParts...), len(answerParts) + 4},
		{"gemini", Gemini, geminiEvents(geminiID, answerParts...), len(answerParts) - 1},
		{"responses", Responses, responsesEvents(answerParts...), len(answerParts) + 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			var s Stream
			s.Reset(c.api, true)
			for i, step := range observe(&s, c.evs) {
				want := StepContent
				if i == c.marker {
					want = StepComplete
				}
				assert.Equal(t, want, step, "event %d: %s", i, c.evs[i].data)
			}
			assert.True(t, s.Complete())
			assert.Equal(t, "", s.Stuck())
			assert.Equal(t, answerText, string(s.Delivered()))
		})
	}
}

// accumulated returns the text an SDK accumulates of stream's complete
// events.
func accumulated(t *testing.T, api API, stream []byte) string {
	t.Helper()
	switch api {
	case ChatCompletions:
		a, err := accumulateChat(stream)
		require.NoError(t, err)
		return a.text
	case Messages:
		a, err := accumulateMessages(stream)
		require.NoError(t, err)
		return a.text()
	case Gemini:
		a, err := accumulateGemini(stream)
		require.NoError(t, err)
		return a.text
	}
	a, err := accumulateResponses(stream)
	require.NoError(t, err)
	return a.text
}

// follow feeds stream's bytes to a Framer and s, as a committed body does.
func follow(s *Stream, stream []byte) {
	var f Framer
	for {
		e, ok := f.Next(stream)
		if !ok {
			return
		}
		s.Observe(e.Type, e.Data)
	}
}

// A stream cut at any byte, at an event's boundary or in the middle of
// one (a delta's text cut in two): Delivered is exactly the text the SDK
// accumulated of the events that arrived whole, and nothing is complete
// before the marker.
func TestObserveCutAnywhere(t *testing.T) {
	for _, c := range apiStreams(answerParts...) {
		t.Run(c.name, func(t *testing.T) {
			stream := frameEvents(c.evs)
			var s Stream
			for cut := 0; cut <= len(stream); cut++ {
				s.Reset(c.api, true)
				follow(&s, stream[:cut])
				require.Equal(t, accumulated(t, c.api, stream[:cut]), string(s.Delivered()), "cut at %d", cut)
				marked := false
				for _, e := range frameWhole(stream[:cut]) {
					marked = marked || strings.Contains(e.typ+e.data, markerOf(c.api))
				}
				require.Equal(t, marked, s.Complete(), "cut at %d", cut)
			}
		})
	}
}

// markerOf is a string only the completion marker of api's fixtures holds.
func markerOf(api API) string {
	switch api {
	case ChatCompletions:
		return `"finish_reason":"stop"`
	case Messages:
		return `"stop_reason":"end_turn"`
	case Gemini:
		return `"finishReason": "STOP"`
	}
	return "response.completed"
}

// What forbids continuing, read off the stream and the request.
func TestStuck(t *testing.T) {
	chatHeadText := fmt.Sprintf(chatHead, chatID)
	for _, c := range []struct {
		name string
		api  API
		evs  []sseEvent
		want string
	}{
		{"chat text", ChatCompletions, chatEvents(chatID, "Hel", "lo")[:2], ""},
		{"chat tool call open", ChatCompletions, chatToolEvents()[:4], "a tool call"},
		{"chat tool call delivered", ChatCompletions, chatToolEvents()[:5], "a tool call"},
		{"chat legacy function_call", ChatCompletions, []sseEvent{dataEv(chatHeadText + `{"function_call":{"name":"f","arguments":""}},"finish_reason":null}]}`)}, "a tool call"},
		{"chat second choice", ChatCompletions, []sseEvent{dataEv(`{"id":"c","object":"chat.completion.chunk","choices":[{"index":1,"delta":{"content":"x"},"finish_reason":null}]}`)}, "several choices"},
		{"chat two choices in a chunk", ChatCompletions, []sseEvent{dataEv(`{"id":"c","choices":[{"index":0,"delta":{"content":"x"}},{"index":1,"delta":{"content":"y"}}]}`)}, "several choices"},
		{"chat refusal", ChatCompletions, []sseEvent{dataEv(chatHeadText + `{"refusal":"I'm sorry"},"finish_reason":null}]}`)}, "a refusal"},
		{"deepseek reasoning open", ChatCompletions, []sseEvent{dataEv(`{"id":"d","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"Hmm"},"finish_reason":null}]}`)}, "a thinking block"},
		{"deepseek reasoning then content", ChatCompletions, []sseEvent{
			dataEv(`{"id":"d","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"Hmm"},"finish_reason":null}]}`),
			dataEv(`{"id":"d","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"The","reasoning_content":null},"finish_reason":null}]}`)}, ""},
		{"messages text", Messages, messagesEvents(msgID, "Hel", "lo")[:4], ""},
		{"messages tool_use open", Messages, messagesToolEvents()[:8], "a tool call"},
		{"messages tool_use delivered", Messages, messagesToolEvents()[:10], "a tool call"},
		{"messages thinking open", Messages, messagesThinkingEvents("x")[:3], "a thinking block"},
		{"messages thinking signed, not stopped", Messages, messagesThinkingEvents("x")[:4], "a thinking block"},
		{"messages thinking signed and stopped", Messages, messagesThinkingEvents("Hel", "lo")[:7], ""},
		{"messages thinking unsigned", Messages, []sseEvent{
			messagesThinkingEvents()[0], messagesThinkingEvents()[1], messagesThinkingEvents()[2],
			ev("content_block_stop", `{"type":"content_block_stop","index":0}`)}, "a thinking block"},
		{"messages redacted thinking", Messages, []sseEvent{
			ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB9URj2pLmN3kIr"}}`)}, "a thinking block"},
		{"messages server tool", Messages, []sseEvent{
			ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_014hJH82Qum7Td6UV8gDXThB","name":"web_search","input":{}}}`)}, "a tool call"},
		{"messages other block", Messages, []sseEvent{
			ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"compaction","content":""}}`)}, "a non-text block"},
		{"messages interleaved text", Messages, []sseEvent{
			ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
			ev("content_block_stop", `{"type":"content_block_stop","index":0}`),
			ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"late"}}`)}, "interleaved text blocks"},
		{"gemini text", Gemini, geminiEvents(geminiID, "Hel", "lo")[:1], ""},
		{"gemini function call", Gemini, []sseEvent{dataEv(`{"candidates":[{"content":{"parts":[{"functionCall":{"name":"get_weather","args":{"location":"Paris"}}}],"role":"model"},"index":0}]}`)}, "a tool call"},
		{"gemini thought", Gemini, []sseEvent{dataEv(`{"candidates":[{"content":{"parts":[{"text":"**Planning**","thought":true}],"role":"model"},"index":0}]}`)}, "a thinking block"},
		{"gemini thought then text", Gemini, []sseEvent{
			dataEv(`{"candidates":[{"content":{"parts":[{"text":"**Planning**","thought":true}],"role":"model"},"index":0}]}`),
			dataEv(`{"candidates":[{"content":{"parts":[{"text":"Hello"}],"role":"model"},"index":0}]}`)}, ""},
		{"gemini second candidate", Gemini, []sseEvent{dataEv(`{"candidates":[{"content":{"parts":[{"text":"a"}]},"index":0},{"content":{"parts":[{"text":"b"}]},"index":1}]}`)}, "several choices"},
		{"gemini image", Gemini, []sseEvent{dataEv(`{"candidates":[{"content":{"parts":[{"inlineData":{"mimeType":"image/png","data":"iVBORw0KGgo="}}],"role":"model"},"index":0}]}`)}, "a non-text block"},
		{"responses background", Responses, responsesEvents("Hel", "lo")[:5], ""},
		{"responses not background", Responses, responsesStream(false, "Hel", "lo")[:5], "a Responses stream not created with background: true"},
		{"responses before its id", Responses, nil, "a Responses stream not created with background: true"},
		{"bedrock", Bedrock, nil, "Bedrock's event stream"},
		{"unknown", 0, nil, "an unknown API"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var s Stream
			s.Reset(c.api, true)
			for i, step := range observe(&s, c.evs) {
				require.Equal(t, StepContent, step, "event %d", i)
			}
			assert.Equal(t, c.want, s.Stuck())
		})
	}
	var zero Stream
	assert.Equal(t, "an unknown API", zero.Stuck(), "the zero Stream follows nothing")
	assert.Equal(t, StepContent, zero.Observe(nil, []byte("anything")))
}

// What breaks a stream: an error event after content, a data line that is
// not JSON, [DONE] before the answer ended. None of them changes what the
// Stream keeps.
func TestObserveBreaks(t *testing.T) {
	for _, c := range []struct {
		name string
		api  API
		evs  []sseEvent
		brk  sseEvent
		want Step
	}{
		{"chat server_error", ChatCompletions, chatEvents(chatID, "Hel", "lo")[:3], dataEv(`{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`), StepError},
		{"chat not json", ChatCompletions, chatEvents(chatID, "Hel", "lo")[:3], dataEv(`{"id":"chatcmpl-B9MH","choices":[{"index":0,"delta":{"content":"x"}`), StepMalformed},
		{"chat text line", ChatCompletions, chatEvents(chatID, "Hel", "lo")[:3], dataEv(`upstream connect error or disconnect/reset before headers`), StepMalformed},
		{"chat empty data", ChatCompletions, chatEvents(chatID, "Hel", "lo")[:3], dataEv(``), StepMalformed},
		{"chat done early", ChatCompletions, chatEvents(chatID, "Hel", "lo")[:3], dataEv(`[DONE]`), StepEnd},
		{"chat a number", ChatCompletions, chatEvents(chatID, "Hel", "lo")[:3], dataEv(`503`), StepMalformed},
		{"chat an array", ChatCompletions, chatEvents(chatID, "Hel", "lo")[:3], dataEv(`[{"id":"c"}]`), StepMalformed},
		{"chat bad escape", ChatCompletions, chatEvents(chatID, "Hel", "lo")[:3], dataEv(`{"id":"c","choices":[{"index":0,"delta":{"content":"\x"}}]}`), StepMalformed},
		{"messages overloaded", Messages, messagesEvents(msgID, "Hel", "lo")[:4], ev("error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CSHpZ8hP3aT6jB2mW9xQe"}`), StepError},
		{"messages error not json", Messages, messagesEvents(msgID, "Hel", "lo")[:4], ev("error", `Overloaded`), StepError},
		{"messages not json", Messages, messagesEvents(msgID, "Hel", "lo")[:4], ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"`), StepMalformed},
		// anthropic-sdk-go v2.16's ssestream skips only untyped events,
		// ping and empty data: it decodes an event of a type it does not
		// know too, and fails the stream on data that is not JSON.
		{"messages unknown type not json", Messages, messagesEvents(msgID, "Hel", "lo")[:4], ev("future_event", `not json`), StepMalformed},
		{"responses error", Responses, responsesEvents("Hel", "lo")[:5], ev("error", `{"type":"error","code":"server_is_overloaded","message":"Our servers are currently overloaded. Please try again later.","param":null,"sequence_number":5}`), StepError},
		{"responses failed", Responses, responsesEvents("Hel", "lo")[:5], ev("response.failed", `{"type":"response.failed","sequence_number":5,"response":{"id":"`+respID+`","status":"failed","error":{"code":"server_error","message":"An error occurred while processing your request."}}}`), StepError},
		{"responses not json", Responses, responsesEvents("Hel", "lo")[:5], ev("response.output_text.delta", `{"type":`), StepMalformed},
		{"gemini unavailable", Gemini, geminiEvents(geminiID, "Hel", "lo")[:1], dataEv(`{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`), StepError},
		{"gemini not json", Gemini, geminiEvents(geminiID, "Hel", "lo")[:1], dataEv(`{"candidates": [{"content": {"parts": [{"text": "lo"}]`), StepMalformed},
	} {
		t.Run(c.name, func(t *testing.T) {
			var s Stream
			s.Reset(c.api, true)
			observe(&s, c.evs)
			before := string(s.Delivered())
			require.NotEmpty(t, before)
			assert.Equal(t, c.want, s.Observe([]byte(c.brk.typ), []byte(c.brk.data)))
			assert.Equal(t, before, string(s.Delivered()))
			assert.False(t, s.Complete())
		})
	}
}

// What Anthropic's SDK skips is no break: untyped events, empty data,
// pings. After the completion marker, [DONE] and message_stop are content.
func TestObserveSkippedAndAfterMarker(t *testing.T) {
	var s Stream
	s.Reset(Messages, true)
	observe(&s, messagesEvents(msgID, "Hi")[:4])
	assert.Equal(t, StepContent, s.Observe(nil, []byte("not json")))
	assert.Equal(t, StepContent, s.Observe([]byte("content_block_delta"), []byte("")))
	assert.Equal(t, StepContent, s.Observe([]byte("ping"), []byte(`{"type": "ping"}`)))
	steps := observe(&s, messagesEvents(msgID, "Hi")[4:])
	assert.Equal(t, []Step{StepContent, StepComplete, StepContent}, steps, "message_delta completes, message_stop after it is content")

	s.Reset(Messages, true)
	assert.Equal(t, StepComplete, s.Observe([]byte("message_stop"), []byte(`{"type":"message_stop"}`)), "message_stop without a stop reason before it")

	s.Reset(ChatCompletions, true)
	steps = observe(&s, chatEvents(chatID, "Hi"))
	assert.Equal(t, []Step{StepContent, StepContent, StepComplete, StepContent, StepContent}, steps, "the usage chunk and [DONE] after the finish are content")
}

// With n = 2 (OpenAI streams the choices interleaved from the start) the
// answer is complete once every choice seen finished.
func TestObserveSeveralChoicesComplete(t *testing.T) {
	var s Stream
	s.Reset(ChatCompletions, true)
	chunk := func(i int, finish string) []byte {
		return []byte(fmt.Sprintf(`{"id":"c","object":"chat.completion.chunk","choices":[{"index":%d,"delta":{"content":"x"},"finish_reason":%s}]}`, i, finish))
	}
	assert.Equal(t, StepContent, s.Observe(nil, chunk(0, "null")))
	assert.Equal(t, StepContent, s.Observe(nil, chunk(1, "null")))
	assert.Equal(t, StepContent, s.Observe(nil, chunk(0, `"stop"`)), "one choice of two")
	assert.Equal(t, StepComplete, s.Observe(nil, chunk(1, `"stop"`)))
	assert.Equal(t, "several choices", s.Stuck())
}

// ResumeURL: the original's URL, the response id added to its path, the
// last sequence number delivered in the query.
func TestResumeURL(t *testing.T) {
	var s Stream
	s.Reset(Responses, true)
	orig, _ := url.Parse("https://api.openai.com/v1/responses")
	_, ok := s.ResumeURL(orig)
	assert.False(t, ok, "no response id yet")
	observe(&s, responsesEvents("Hel", "lo", "!")[:6])
	u, ok := s.ResumeURL(orig)
	require.True(t, ok)
	assert.Equal(t, "https://api.openai.com/v1/responses/"+respID+"?stream=true&starting_after=5", u.String())
	assert.Equal(t, "https://api.openai.com/v1/responses", orig.String(), "orig is not changed")

	azure, _ := url.Parse("https://res.openai.azure.com/openai/v1/responses/?api-version=preview&stream=false")
	u, ok = s.ResumeURL(azure)
	require.True(t, ok)
	assert.Equal(t, "https://res.openai.azure.com/openai/v1/responses/"+respID+"?api-version=preview&stream=true&starting_after=5", u.String())

	s.Reset(Responses, true)
	observe(&s, responsesStream(false, "Hel")[:5])
	_, ok = s.ResumeURL(orig)
	assert.False(t, ok, "not background")
	s.Reset(Responses, false)
	observe(&s, responsesEvents("Hel")[:5])
	_, ok = s.ResumeURL(orig)
	assert.False(t, ok, "not kept")
	s.Reset(ChatCompletions, true)
	_, ok = s.ResumeURL(orig)
	assert.False(t, ok, "not Responses")
}

// Observe allocates nothing for content once the Stream's buffers have
// grown (the Stream is reset and fed the same stream again), and nothing
// at all when it does not keep the text.
func TestObserveAllocs(t *testing.T) {
	for _, c := range apiStreams(answerParts...) {
		t.Run(c.name, func(t *testing.T) {
			typs, datas := eventBytes(c.evs)
			var s Stream
			run := func() {
				s.Reset(c.api, true)
				for i := range typs {
					s.Observe(typs[i], datas[i])
				}
			}
			run()
			assert.Zero(t, testing.AllocsPerRun(50, run), "keeping the text, once its buffer has grown")
			// Not keeping it: nothing at all, a fresh Stream included.
			assert.Zero(t, testing.AllocsPerRun(50, func() {
				var s Stream
				s.Reset(c.api, false)
				for i := range typs {
					s.Observe(typs[i], datas[i])
				}
				if !s.Complete() {
					panic("not complete")
				}
			}), "not keeping it")
		})
	}
}

// apiStream is a whole answer of parts as one API streams it.
type apiStream struct {
	name string
	api  API
	evs  []sseEvent
}

// apiStreams returns parts as Chat Completions, Messages, Gemini and
// Responses (in that order) stream them.
func apiStreams(parts ...string) []apiStream {
	return []apiStream{
		{"chat", ChatCompletions, chatEvents(chatID, parts...)},
		{"messages", Messages, messagesEvents(msgID, parts...)},
		{"gemini", Gemini, geminiEvents(geminiID, parts...)},
		{"responses", Responses, responsesEvents(parts...)},
	}
}

// eventBytes returns the events' types and data as byte slices.
func eventBytes(evs []sseEvent) (typs, datas [][]byte) {
	for _, e := range evs {
		typs, datas = append(typs, []byte(e.typ)), append(datas, []byte(e.data))
	}
	return typs, datas
}

// What a Stream keeps is its delivered text (in one buffer grown by
// doubling: at most twice its length), its id, and a fixed size: no
// event's bytes. Here a 20 000-event stream of 5-byte deltas.
func TestStreamKeepsTheTextOnly(t *testing.T) {
	const n = 20000
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("w%03d ", i%1000)
	}
	for _, c := range apiStreams(parts...) {
		t.Run(c.name, func(t *testing.T) {
			var s Stream
			s.Reset(c.api, true)
			var eventBytes int
			for _, e := range c.evs {
				eventBytes += len(e.typ) + len(e.data)
				s.Observe([]byte(e.typ), []byte(e.data))
			}
			text := len(s.Delivered())
			require.Equal(t, 5*n, text)
			assert.LessOrEqual(t, cap(s.text), 2*text, "the text grows one buffer")
			assert.LessOrEqual(t, cap(s.id), 64, "the id")
			assert.LessOrEqual(t, cap(s.parts), 1, "one event's parts")
			size := int(unsafe.Sizeof(s))
			assert.Less(t, size, 2048, "the fixed size: the walk's nesting bits and O(1) fields")
			t.Logf("%s: %d bytes of events kept as %d of text + %d of id + %d fixed", c.name, eventBytes, cap(s.text), cap(s.id), size)
		})
	}
}

func BenchmarkObserve(b *testing.B) {
	for _, c := range apiStreams(answerParts...) {
		b.Run(c.name, func(b *testing.B) {
			typs, datas := eventBytes(c.evs)
			var s Stream
			bytes := 0
			for _, d := range datas {
				bytes += len(d)
			}
			b.SetBytes(int64(bytes))
			b.ReportAllocs()
			for b.Loop() {
				s.Reset(c.api, true)
				for i := range typs {
					s.Observe(typs[i], datas[i])
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(typs)), "ns/event")
		})
	}
}

// mustURL parses s.
func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}

// The Stream follows the API its events speak when the URL named another
// (a proxy's path) or none.
func TestObserveSniffs(t *testing.T) {
	for _, c := range []struct {
		name      string
		reset     API
		evs       []sseEvent
		want      API
		delivered string
	}{
		{"messages through a chat path", ChatCompletions, messagesEvents(msgID, "Hel", "lo"), Messages, "Hello"},
		{"chat through a messages path", Messages, chatEvents(chatID, "Hel", "lo"), ChatCompletions, "Hello"},
		{"responses through an unknown path", 0, responsesEvents("Hel", "lo"), Responses, "Hello"},
		{"gemini through an unknown path", 0, geminiEvents(geminiID, "Hel", "lo"), Gemini, "Hello"},
		{"chat with Azure's prompt filter first", 0, append([]sseEvent{dataEv(`{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[]}`)}, chatEvents(chatID, "Hi")...), ChatCompletions, "Hi"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var s Stream
			s.Reset(c.reset, true)
			steps := observe(&s, c.evs)
			assert.Equal(t, c.want, s.api)
			assert.Contains(t, steps, StepComplete)
			assert.NotContains(t, steps, StepMalformed)
			assert.Equal(t, c.delivered, string(s.Delivered()))
		})
	}
	var s Stream
	s.Reset(Bedrock, true)
	s.Observe([]byte("message_start"), []byte(`{"type":"message_start"}`))
	assert.Equal(t, Bedrock, s.api, "Bedrock's binary stream has no events to go by")
	s.Reset(Messages, true)
	observe(&s, messagesEvents(msgID, "Hi")[:2])
	s.Observe(nil, []byte(`{"object":"chat.completion.chunk"}`))
	assert.Equal(t, Messages, s.api, "decided once")
	assert.True(t, s.Knows())

	// A legacy completions stream (text_completion chunks, then [DONE])
	// through a path the Stream does not know: no API is decided, [DONE]
	// included (other APIs end with it too), and nothing is complete or
	// broken: its end is the provider's.
	s.Reset(0, true)
	legacy := []sseEvent{
		dataEv(`{"id":"cmpl-1","object":"text_completion","created":1,"choices":[{"text":"Hi","index":0,"logprobs":null,"finish_reason":null}],"model":"m"}`),
		dataEv(`{"id":"cmpl-1","object":"text_completion","created":1,"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"stop"}],"model":"m"}`),
		dataEv(`[DONE]`),
	}
	for _, step := range observe(&s, legacy) {
		assert.Equal(t, StepContent, step)
	}
	assert.False(t, s.Knows())
	assert.False(t, s.Complete())
	assert.Equal(t, "an unknown API", s.Stuck())
	s.Reset(Bedrock, true)
	assert.False(t, s.Knows(), "Bedrock's end is not seen")
}
