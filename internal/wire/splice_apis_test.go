package wire

// The splicer's cases that belong to one API: blocks, tool calls and
// thinking in a Messages continuation, the chunks Chat Completions adds,
// Gemini's thoughts, a resumed Responses stream.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cutEvents follows evs up to (not including) the first event whose data
// holds stop, and returns the Stream and the caller's bytes.
func cutEvents(t *testing.T, api API, request string, evs []sseEvent, stop string) (*Stream, []byte) {
	t.Helper()
	s := new(Stream)
	s.Reset(api, true)
	var caller []byte
	for _, e := range evs {
		if stop != "" && strings.Contains(e.data, stop) {
			break
		}
		s.Observe([]byte(e.typ), []byte(e.data))
		caller = appendEvent(caller, []byte(e.typ), []byte(e.data))
	}
	return s, caller
}

// A Messages continuation that goes on to use a tool: the text continues
// the caller's open block, the tool_use block is numbered after it.
func TestSpliceMessagesToolAfterText(t *testing.T) {
	orig := messagesEvents(msgID, "Let me", " check", " the weather.")
	s, caller := cutEvents(t, Messages, messagesRequest, orig, " the weather.")
	require.Equal(t, "Let me check", string(s.Delivered()))
	require.Equal(t, "", s.Stuck())
	cont := messagesToolEvents()
	cont[3] = ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" the weather:"}}`)
	out, _, err := splice(s.Splice(Prefill, nil), cont)
	require.NoError(t, err)
	a, err := accumulateMessages(append(caller, out...))
	require.NoError(t, err)
	require.Len(t, a.blocks, 2)
	assert.Equal(t, messagesBlockAnswer{"text", "Let me check the weather:", true}, a.blocks[0])
	assert.Equal(t, "tool_use", a.blocks[1].typ)
	assert.True(t, a.blocks[1].stopped)
	assert.Equal(t, "tool_use", a.stop)
	assert.Equal(t, msgID, a.id)
	assert.Equal(t, "a tool call", s.Stuck(), "a second cut would not be continued")
}

// A regeneration with extended thinking: its thinking block is not handed
// on (the caller has the original's), its text is matched.
func TestSpliceMessagesRegeneratedThinking(t *testing.T) {
	orig := messagesThinkingEvents("Let me", " check", " the weather.")
	s, caller := cutEvents(t, Messages, `{"messages":[{"role":"user","content":"?"}],"thinking":{"type":"enabled","budget_tokens":2048}}`, orig, " the weather.")
	require.Equal(t, "", s.Stuck())
	_, _, err := s.PrefillBody([]byte(`{"messages":[{"role":"user","content":"?"}]}`), Prefill)
	require.ErrorIs(t, err, errThinkingPrefill)
	regen := messagesThinkingEvents("Let me check", " the", " weather.")
	regen[2] = ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Other thoughts this time."}}`)
	out, _, err := splice(s.Splice(Regenerate, nil), regen)
	require.NoError(t, err)
	assert.NotContains(t, string(out), "thinking")
	a, err := accumulateMessages(append(caller, out...))
	require.NoError(t, err)
	require.Len(t, a.blocks, 2)
	assert.Equal(t, "thinking", a.blocks[0].typ)
	assert.Equal(t, messagesBlockAnswer{"text", "Let me check the weather.", true}, a.blocks[1])
	assert.Equal(t, 1, a.ends)
}

// A regeneration that calls a tool where the caller has text departs.
func TestSpliceMessagesRegeneratedTool(t *testing.T) {
	s, _ := cutEvents(t, Messages, messagesRequest, messagesEvents(msgID, "Sunny", " today."), " today.")
	regen := messagesToolEvents()
	regen = append(regen[:1], regen[5:]...) // straight to the tool
	out, _, err := splice(s.Splice(Regenerate, nil), regen)
	assert.ErrorIs(t, err, ErrDiverged)
	assert.Empty(t, out)
}

// A continuation whose text block starts with text (as the SDK's fixtures
// have it): that text is handed on as a delta of the caller's block.
func TestSpliceMessagesBlockStartText(t *testing.T) {
	s, caller := cutEvents(t, Messages, messagesRequest, messagesEvents(msgID, "Hello", " world", "!"), " world")
	cont := []sseEvent{
		ev("message_start", `{"type":"message_start","message":{"id":"`+msgID2+`","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5-20250929","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":30,"output_tokens":1}}}`),
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":" wor"}}`),
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ld!"}}`),
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`),
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":4}}`),
		ev("message_stop", `{"type":"message_stop"}`),
	}
	out, _, err := splice(s.Splice(Prefill, nil), cont)
	require.NoError(t, err)
	a, err := accumulateMessages(append(caller, out...))
	require.NoError(t, err)
	require.Len(t, a.blocks, 1)
	assert.Equal(t, "Hello world!", a.blocks[0].text)
	assert.Equal(t, 4, a.outputTokens, "the continuation's usage")
}

// Cut after the text block stopped: a continuation with more text opens
// a new block after it; one with none adds nothing but the end.
func TestSpliceMessagesAfterBlockStop(t *testing.T) {
	orig := messagesEvents(msgID, "Hello", " world.")
	for _, c := range []struct {
		name  string
		cont  []string
		texts []string
	}{
		{"more text", []string{" Bye."}, []string{"Hello world.", " Bye."}},
		{"nothing more", nil, []string{"Hello world."}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, caller := cutEvents(t, Messages, messagesRequest, orig, "message_delta")
			require.False(t, s.Complete())
			out, _, err := splice(s.Splice(Prefill, nil), messagesEvents(msgID2, c.cont...))
			require.NoError(t, err)
			a, err := accumulateMessages(append(caller, out...))
			require.NoError(t, err)
			var texts []string
			for _, b := range a.blocks {
				texts = append(texts, b.text)
				assert.True(t, b.stopped)
			}
			assert.Equal(t, c.texts, texts)
			assert.Equal(t, 1, a.ends)
		})
	}
}

// A regeneration that ends exactly where the cut was: the caller's open
// block is stopped, the answer ends.
func TestSpliceMessagesRegeneratedToTheCut(t *testing.T) {
	s, caller := cutEvents(t, Messages, messagesRequest, messagesEvents(msgID, "Hello", " world", "!"), "!")
	out, _, err := splice(s.Splice(Regenerate, nil), messagesEvents(msgID2, "Hel", "lo world"))
	require.NoError(t, err)
	a, err := accumulateMessages(append(caller, out...))
	require.NoError(t, err)
	assert.Equal(t, []messagesBlockAnswer{{"text", "Hello world", true}}, a.blocks)
	assert.Equal(t, "end_turn", a.stop)
}

// A Chat Completions continuation that goes on to call a tool: the text
// and the tool call reach the caller under the first chunk's id.
func TestSpliceChatToolAfterText(t *testing.T) {
	s, caller := cutEvents(t, ChatCompletions, chatRequest, chatEvents(chatID, "Let me", " check."), " check.")
	cont := chatToolEvents()
	for i := range cont {
		cont[i].data = strings.ReplaceAll(cont[i].data, chatID, chatID2)
	}
	cont[1] = dataEv(strings.Replace(cont[1].data, "Let me check.", " check.", 1))
	out, _, err := splice(s.Splice(PrefillPrefix, nil), cont)
	require.NoError(t, err)
	a, err := accumulateChat(append(caller, out...))
	require.NoError(t, err)
	assert.Equal(t, "Let me check.", a.text)
	assert.Equal(t, `{"location":"Paris"}`, a.tools)
	assert.Equal(t, "tool_calls", a.finish)
	assert.Equal(t, chatID, a.id)
	assert.Equal(t, 1, a.done)
}

// Held text handed on with the first chunk that is more than text: in its
// delta, beside the tool call.
func TestSpliceChatHeldBeforeTool(t *testing.T) {
	s, caller := cutEvents(t, ChatCompletions, chatRequest, chatEvents(chatID, "Let me", " check."), " check.")
	head := fmt.Sprintf(chatHead, chatID2)
	cont := []sseEvent{
		dataEv(head + `{"role":"assistant","content":""},"finish_reason":null}]}`),
		dataEv(head + `{"content":"Let"},"finish_reason":null}]}`), // held: "Let" begins "Let me"
		dataEv(head + `{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":null}]}`),
		dataEv(head + `{},"finish_reason":"tool_calls"}]}`),
		dataEv("[DONE]"),
	}
	out, _, err := splice(s.Splice(Prefill, nil), cont)
	require.NoError(t, err)
	a, err := accumulateChat(append(caller, out...))
	require.NoError(t, err)
	assert.Equal(t, "Let meLet", a.text, "not a restart: a continuation")
	assert.Equal(t, "{}", a.tools)
}

// Azure's prompt-filter chunk and a regeneration's reasoning are not
// handed on; its usage chunk is.
func TestSpliceChatDropped(t *testing.T) {
	s, caller := cutEvents(t, ChatCompletions, chatRequest, chatEvents(chatID, "Hello", " world"), " world")
	cont := append([]sseEvent{
		dataEv(`{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}}}]}`),
		dataEv(`{"id":"` + chatID2 + `","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"Think."},"finish_reason":null}]}`),
	}, chatEvents(chatID2, "Hel", "lo world")...)
	out, _, err := splice(s.Splice(Regenerate, nil), cont)
	require.NoError(t, err)
	assert.NotContains(t, string(out), "prompt_filter_results")
	assert.NotContains(t, string(out), "Think.")
	a, err := accumulateChat(append(caller, out...))
	require.NoError(t, err)
	assert.Equal(t, "Hello world", a.text)
	assert.Equal(t, 3, a.completionTokens, "the continuation's usage chunk")
}

// A Gemini regeneration's thought parts are not handed on; the text is
// matched across chunks; responseId is the first's.
func TestSpliceGeminiThoughts(t *testing.T) {
	s, caller := cutEvents(t, Gemini, geminiRequest, geminiEvents(geminiID, "Hello", " world", "!"), " world")
	regen := append([]sseEvent{
		dataEv(`{"candidates":[{"content":{"parts":[{"text":"**Greeting**\n","thought":true}],"role":"model"},"index":0}],"responseId":"` + geminiID2 + `"}`),
		dataEv(`{"candidates":[{"content":{"parts":[{"text":"Other thought","thought":true},{"text":"Hel"}],"role":"model"},"index":0}],"responseId":"` + geminiID2 + `"}`),
	}, geminiEvents(geminiID2, "lo world", "!")...)
	out, _, err := splice(s.Splice(Regenerate, nil), regen)
	require.NoError(t, err)
	assert.NotContains(t, string(out), "thought\":true}],")
	assert.NotContains(t, string(out), "Greeting")
	assert.NotContains(t, string(out), "Other thought")
	a, err := accumulateGemini(append(caller, out...))
	require.NoError(t, err)
	assert.Equal(t, "Hello world!", a.text)
	assert.Equal(t, map[string]bool{geminiID: true}, a.ids)
}

// A Gemini regeneration that calls a function where the caller has text
// departs.
func TestSpliceGeminiRegeneratedCall(t *testing.T) {
	s, _ := cutEvents(t, Gemini, geminiRequest, geminiEvents(geminiID, "Hello", " world", "!"), " world")
	regen := []sseEvent{dataEv(`{"candidates":[{"content":{"parts":[{"functionCall":{"name":"greet","args":{}}}],"role":"model"},"finishReason":"STOP","index":0}]}`)}
	out, _, err := splice(s.Splice(Regenerate, nil), regen)
	assert.ErrorIs(t, err, ErrDiverged)
	assert.Empty(t, out)
}

// A background Responses stream resumed after the last sequence number the
// caller has: the provider's own events, any repeated one dropped.
func TestSpliceResume(t *testing.T) {
	orig := responsesEvents(answerParts...)
	request := `{"model":"gpt-4.1","input":"Plan?","background":true,"stream":true}`
	for cut := 1; cut < len(orig); cut++ {
		s, caller := cutEvents(t, Responses, request, orig[:cut], "")
		require.Equal(t, "", s.Stuck(), "cut %d", cut)
		u, ok := s.ResumeURL(mustURL(t, "https://api.openai.com/v1/responses"))
		require.True(t, ok)
		require.Contains(t, u.RawQuery, fmt.Sprintf("starting_after=%d", cut-1))
		// The server sends the events after N; a proxy repeats one.
		resumed := orig[cut-1:]
		out, step, err := splice(s.Splice(Resume, nil), resumed)
		require.NoError(t, err)
		assert.Equal(t, StepComplete, step)
		a, err := accumulateResponses(append(caller, out...))
		require.NoError(t, err, "cut %d", cut)
		assert.Equal(t, answerText, a.text)
		assert.Equal(t, respID, a.id)
		assert.Equal(t, 1, a.completed)
	}
}

// A resumed stream that breaks hands on nothing of its error event.
func TestSpliceResumeBroken(t *testing.T) {
	orig := responsesEvents("Hel", "lo")
	s, _ := cutEvents(t, Responses, `{"background":true}`, orig[:5], "")
	sp := s.Splice(Resume, nil)
	out, step, err := sp.Next(nil, []byte("error"), []byte(`{"type":"error","code":"server_error","message":"boom","sequence_number":5}`))
	require.NoError(t, err)
	assert.Equal(t, StepError, step)
	assert.Empty(t, out)
	out, step, err = sp.Next(nil, []byte("response.output_text.delta"), []byte(`{"type":`))
	require.NoError(t, err)
	assert.Equal(t, StepMalformed, step)
	assert.Empty(t, out)
}

// What a Splicer keeps: the text it holds to decide or match (at most the
// delivered text and one event's), and one event's scratch; here a
// regeneration of 20 000 events after 10 000 were delivered.
func TestSplicerKeeps(t *testing.T) {
	const n = 20000
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("w%03d ", i%1000)
	}
	for _, st := range []Strategy{Regenerate, Prefill} {
		s, _ := cutEvents(t, ChatCompletions, chatRequest, chatEvents(chatID, parts[:n/2]...), "finish_reason\":\"stop")
		delivered := len(s.Delivered())
		sp := s.Splice(st, nil)
		cont := parts
		if st == Prefill {
			cont = append([]string{strings.Join(parts[:n/2], "")}, parts[n/2:]...) // a restart, in one piece first
		}
		_, _, err := splice(sp, chatEvents(chatID2, cont...))
		require.NoError(t, err)
		assert.Equal(t, strings.Join(parts, ""), string(s.Delivered()))
		assert.LessOrEqual(t, cap(sp.held), 2*(delivered+len(cont[0])), "%s: held", st)
		assert.LessOrEqual(t, cap(sp.buf), 1024, "%s: one event", st)
		assert.LessOrEqual(t, cap(sp.text), 2*len(cont[0]), "%s: one event's text", st)
	}
}

func BenchmarkSplice(b *testing.B) {
	for _, api := range []API{ChatCompletions, Messages, Gemini} {
		b.Run(apiName(api), func(b *testing.B) {
			orig := answerEvents(api, firstID(api), answerParts...)
			cont := answerEvents(api, secondID(api), chunkRunes(answerText, 3)...)
			typs, datas := eventBytes(cont)
			b.ReportAllocs()
			var s Stream
			var out []byte
			for b.Loop() {
				s.Reset(api, true)
				observe(&s, orig[:5])
				sp := s.Splice(Regenerate, nil)
				out = out[:0]
				for i := range typs {
					out, _, _ = sp.Next(out, typs[i], datas[i])
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(typs)), "ns/event")
		})
	}
}
