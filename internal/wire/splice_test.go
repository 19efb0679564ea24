package wire

// The splicer, tested end to end: an original stream cut at every byte,
// the Stream that followed what arrived, a continuation of each strategy
// as a provider would send it, the Splicer's output appended to what the
// caller had, and the whole read by the accumulators of fixtures_test.go
// as the caller's SDK reads it: one whole answer, the first message's id,
// continuous indices, one completion marker, no byte of text repeated or
// lost.
//
//	go test -run='^$' -fuzz='^FuzzSplice$' -fuzztime=30s ./internal/wire

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The request bodies of the tests.
const (
	chatRequest     = `{"model":"deepseek-chat","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Plan?"}],"stream":true,"stream_options":{"include_usage":true}}`
	messagesRequest = `{"model":"claude-sonnet-4-5","max_tokens":1024,"system":"Be brief.","messages":[{"role":"user","content":"Plan?"}],"stream":true}`
	geminiRequest   = `{"contents":[{"role":"user","parts":[{"text":"Plan?"}]}],"generationConfig":{"temperature":0.2}}`
)

// requestOf is the tests' request body for api.
func requestOf(api API) []byte {
	switch api {
	case ChatCompletions:
		return []byte(chatRequest)
	case Messages:
		return []byte(messagesRequest)
	case Gemini:
		return []byte(geminiRequest)
	}
	return []byte(`{"model":"gpt-4.1","input":"Plan?","background":true,"stream":true}`)
}

// chunkRunes splits s into pieces of n runes (a provider never splits a
// rune: each JSON string is UTF-8).
func chunkRunes(s string, n int) []string {
	var parts []string
	for s != "" {
		i, k := 0, 0
		for ; i < len(s) && k < n; k++ {
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
		}
		parts = append(parts, s[:i])
		s = s[i:]
	}
	return parts
}

// answerEvents is api's stream, with the given id, answering parts.
func answerEvents(api API, id string, parts ...string) []sseEvent {
	switch api {
	case ChatCompletions:
		return chatEvents(id, parts...)
	case Messages:
		return messagesEvents(id, parts...)
	case Gemini:
		if len(parts) == 0 {
			parts = []string{""}
		}
		return geminiEvents(id, parts...)
	}
	return responsesEvents(parts...)
}

// secondID is the id a continuation of api carries.
func secondID(api API) string {
	switch api {
	case ChatCompletions:
		return chatID2
	case Messages:
		return msgID2
	}
	return geminiID2
}

// firstID is the id of api's original stream.
func firstID(api API) string {
	switch api {
	case ChatCompletions:
		return chatID
	case Messages:
		return msgID
	}
	return geminiID
}

// cutAt follows stream cut after its first cut bytes: the Stream, and the
// bytes the caller got (the events that arrived whole). It reports false
// when the answer was complete by then.
func cutAt(api API, stream []byte, cut int) (*Stream, []byte, bool) {
	s := new(Stream)
	s.Reset(api, true)
	var f Framer
	var caller []byte
	for {
		e, ok := f.Next(stream[:cut])
		if !ok {
			break
		}
		s.Observe(e.Type, e.Data)
		caller = appendEvent(caller, e.Type, e.Data)
	}
	return s, caller, !s.Complete()
}

// continuation is what a provider answers a continuation request with:
// for a prefill of text, the rest of the answer after text; for a
// regeneration (or a prefill an endpoint answers by starting over), the
// whole answer again. Its chunks are cut differently from the original's.
func continuation(api API, st Strategy, prefilled string, restart bool) []sseEvent {
	rest := answerText
	if (st == Prefill || st == PrefillPrefix) && !restart {
		rest = strings.TrimPrefix(answerText, prefilled)
	}
	return answerEvents(api, secondID(api), chunkRunes(rest, 3)...)
}

// checkWhole reads the caller's whole stream as its SDK does and checks
// it is one whole answer, with the id of its first event (the original's,
// the continuation's if nothing of the original reached the caller).
func checkWhole(t *testing.T, api API, whole []byte, id string) {
	t.Helper()
	switch api {
	case ChatCompletions:
		a, err := accumulateChat(whole)
		require.NoError(t, err)
		assert.Equal(t, answerText, a.text)
		assert.Equal(t, id, a.id)
		assert.Equal(t, 1, a.finishes, "one finish_reason")
		assert.Equal(t, "stop", a.finish)
		assert.Equal(t, 1, a.done, "one [DONE]")
		assert.Equal(t, 1, a.roles, "one role chunk")
		assert.Positive(t, a.completionTokens, "the continuation's usage")
	case Messages:
		a, err := accumulateMessages(whole)
		require.NoError(t, err)
		assert.Equal(t, answerText, a.text())
		assert.Equal(t, id, a.id)
		assert.Equal(t, 1, a.starts)
		assert.Equal(t, 1, a.deltas, "one message_delta")
		assert.Equal(t, 1, a.ends, "one message_stop")
		assert.Equal(t, "end_turn", a.stop)
		assert.Positive(t, a.outputTokens)
		for i, b := range a.blocks {
			assert.True(t, b.stopped, "block %d stopped", i)
			assert.Equal(t, "text", b.typ)
		}
	case Gemini:
		a, err := accumulateGemini(whole)
		require.NoError(t, err)
		assert.Equal(t, answerText, a.text)
		assert.Equal(t, map[string]bool{id: true}, a.ids, "the first responseId throughout")
		assert.Equal(t, 1, a.finishes)
	}
}

// Every strategy, after a cut at every event's end and in the middle of
// every event of the original: the caller's SDK reads one whole answer.
func TestSpliceEveryCut(t *testing.T) {
	for _, api := range []API{ChatCompletions, Messages, Gemini} {
		for _, c := range []struct {
			name    string
			st      Strategy
			restart bool
		}{
			{"prefill", Prefill, false},
			{"prefill prefix", PrefillPrefix, false},
			{"regenerate", Regenerate, false},
			{"prefill answered by starting over", Prefill, true},
		} {
			if c.st == PrefillPrefix && api != ChatCompletions {
				continue
			}
			t.Run(apiName(api)+"/"+c.name, func(t *testing.T) {
				stream := frameEvents(answerEvents(api, firstID(api), answerParts...))
				held := 0
				for _, cut := range cutPoints(stream) {
					s, caller, open := cutAt(api, stream, cut)
					if !open {
						continue
					}
					st, heldBack, prefilled := c.st, []byte(nil), ""
					if st != Regenerate {
						body, hb, err := s.PrefillBody(requestOf(api), st)
						if err != nil {
							require.ErrorIs(t, err, errNothingToFill, "cut at %d", cut)
							st = Regenerate // what the engine does
						} else {
							require.True(t, (&walker{}).validJSON(body))
							heldBack, prefilled = hb, strings.TrimSuffix(string(s.Delivered()), string(hb))
							if len(hb) > 0 {
								held++
							}
						}
					}
					out, _, err := splice(s.Splice(st, heldBack), continuation(api, st, prefilled, c.restart))
					require.NoError(t, err, "cut at %d", cut)
					require.True(t, s.Complete(), "cut at %d", cut)
					require.Equal(t, answerText, string(s.Delivered()), "cut at %d: the Stream followed what was handed on", cut)
					id := firstID(api)
					if len(caller) == 0 {
						id = secondID(api)
					}
					checkWhole(t, api, append(caller, out...), id)
					if t.Failed() {
						t.Fatalf("cut at %d: %s", cut, out)
					}
				}
				if api == Messages && c.st == Prefill && !c.restart {
					assert.Positive(t, held, "cuts right after whitespace held it back")
				}
			})
		}
	}
}

// cutPoints are where the tests cut stream: at every event's end, and in
// the middle of every event (a delta cut in two: the caller's SDK never
// sees that event).
func cutPoints(stream []byte) []int {
	cuts := []int{0}
	for i := 0; i+1 < len(stream); i++ {
		if stream[i] == '\n' && stream[i+1] == '\n' {
			last := cuts[len(cuts)-1]
			cuts = append(cuts, (last+i+2)/2, i+2)
		}
	}
	return cuts
}

// apiName names api for a test.
func apiName(api API) string {
	switch api {
	case ChatCompletions:
		return "chat"
	case Messages:
		return "messages"
	case Gemini:
		return "gemini"
	case Responses:
		return "responses"
	}
	return "none"
}

// A regeneration that departs from the delivered text fails with
// ErrDiverged, and nothing of it is handed on: not the diverging event,
// not the matched events before it.
func TestSpliceDiverged(t *testing.T) {
	for _, api := range []API{ChatCompletions, Messages, Gemini} {
		t.Run(apiName(api), func(t *testing.T) {
			stream := frameEvents(answerEvents(api, firstID(api), answerParts...))
			for _, cut := range cutPoints(stream) {
				s, _, open := cutAt(api, stream, cut)
				delivered := string(s.Delivered())
				if !open || delivered == "" {
					continue
				}
				// The regeneration says the same up to the delivered
				// text's last rune, and then something else.
				_, size := utf8.DecodeLastRuneInString(delivered)
				other := delivered[:len(delivered)-size] + "~" + "and then some"
				evs := answerEvents(api, secondID(api), chunkRunes(other, 2)...)
				out, _, err := splice(s.Splice(Regenerate, nil), evs)
				require.ErrorIs(t, err, ErrDiverged, "cut at %d", cut)
				require.Empty(t, out, "cut at %d", cut)
				require.Equal(t, delivered, string(s.Delivered()))

				// Shorter than what was delivered: it ends before covering it.
				evs = answerEvents(api, secondID(api), chunkRunes(delivered[:len(delivered)-size], 2)...)
				out, _, err = splice(s.Splice(Regenerate, nil), evs)
				require.ErrorIs(t, err, ErrDiverged, "cut at %d", cut)
				require.Empty(t, out, "cut at %d", cut)
			}
		})
	}
}

// After ErrDiverged every call fails; a zero Splicer continues nothing; a
// strategy an API has no splice for fails at once.
func TestSpliceFinalError(t *testing.T) {
	var s Stream
	s.Reset(ChatCompletions, true)
	observe(&s, chatEvents(chatID, "Hello", " world")[:2])
	sp := s.Splice(Regenerate, nil)
	_, _, err := sp.Next(nil, nil, []byte(chatEvents(chatID2, "Help")[1].data))
	require.ErrorIs(t, err, ErrDiverged)
	out, _, err := sp.Next(nil, nil, []byte(chatEvents(chatID2, "Hello")[1].data))
	assert.ErrorIs(t, err, ErrDiverged)
	assert.Empty(t, out)

	_, _, err = new(Splicer).Next(nil, nil, []byte("{}"))
	assert.Error(t, err, "the zero Splicer")
	_, _, err = s.Splice(Resume, nil).Next(nil, nil, []byte("{}"))
	assert.ErrorIs(t, err, errNoSplice, "Resume is Responses'")
	s.Reset(Responses, true)
	_, _, err = s.Splice(Regenerate, nil).Next(nil, nil, []byte("{}"))
	assert.ErrorIs(t, err, errNoSplice, "Responses is resumed only")
}

// A continuation that breaks too says so, and hands on nothing of the
// breaking event; a second continuation then goes on from what the first
// handed on.
func TestSpliceBrokenThenContinued(t *testing.T) {
	for _, api := range []API{ChatCompletions, Messages, Gemini} {
		t.Run(apiName(api), func(t *testing.T) {
			stream := frameEvents(answerEvents(api, firstID(api), answerParts...))
			s, caller, open := cutAt(api, stream, len(stream)/3)
			require.True(t, open)
			body, hb, err := s.PrefillBody(requestOf(api), Prefill)
			require.NoError(t, err)
			require.NotEmpty(t, body)
			prefilled := strings.TrimSuffix(string(s.Delivered()), string(hb))

			// The first continuation breaks after a few events.
			first := continuation(api, Prefill, prefilled, false)
			first = first[:len(first)/2]
			brk := map[API]sseEvent{
				ChatCompletions: dataEv(`{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`),
				Messages:        ev("error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`),
				Gemini:          dataEv(`{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}`),
			}[api]
			out, step, err := splice(s.Splice(Prefill, hb), first)
			require.NoError(t, err)
			require.Equal(t, StepContent, step)
			n := len(out)
			out, step, err = s.Splice(Prefill, hb).Next(out, []byte(brk.typ), []byte(brk.data))
			require.NoError(t, err)
			require.Equal(t, StepError, step)
			require.Len(t, out, n, "nothing of the error event")
			caller = append(caller, out...)
			require.False(t, s.Complete())
			require.Equal(t, string(s.Delivered()), accumulated(t, api, caller), "the Stream followed what was handed on")

			// The second goes on from there, by regeneration this time.
			out, _, err = splice(s.Splice(Regenerate, nil), continuation(api, Regenerate, "", false))
			require.NoError(t, err)
			checkWhole(t, api, append(caller, out...), firstID(api))
		})
	}
}

// Restart recognition holds the continuation's text until it shows
// which it is, and hands on what it held in order, however the text is
// cut into events.
func TestSpliceDecide(t *testing.T) {
	for _, api := range []API{ChatCompletions, Messages, Gemini} {
		for _, c := range []struct {
			name      string
			delivered []string
			cont      []string
			want      string // the whole text the caller ends with
		}{
			{"continues", []string{"ab"}, []string{"c", "d"}, "abcd"},
			{"continues with what looked like a restart", []string{"ab"}, []string{"a", "c"}, "abac"},
			{"starts over", []string{"ab"}, []string{"a", "b", "cd"}, "abcd"},
			{"starts over in one piece", []string{"ab"}, []string{"abcd"}, "abcd"},
			{"ends while undecided", []string{"abc"}, []string{"ab"}, "abcab"},
			{"ends exactly on a restart", []string{"abc"}, []string{"ab", "c"}, "abc"},
		} {
			t.Run(apiName(api)+"/"+c.name, func(t *testing.T) {
				var s Stream
				s.Reset(api, true)
				orig := answerEvents(api, firstID(api), append(c.delivered, "zz")...)
				var caller []byte
				for _, e := range orig {
					if strings.Contains(e.data, "zz") {
						break
					}
					s.Observe([]byte(e.typ), []byte(e.data))
					caller = appendEvent(caller, []byte(e.typ), []byte(e.data))
				}
				out, step, err := splice(s.Splice(Prefill, nil), answerEvents(api, secondID(api), c.cont...))
				require.NoError(t, err)
				assert.NotEqual(t, StepError, step)
				assert.Equal(t, c.want, string(s.Delivered()))
				assert.Equal(t, c.want, accumulated(t, api, append(caller, out...)))
			})
		}
	}
}

func FuzzSplice(f *testing.F) {
	f.Add(uint8(0), uint8(1), "Hello there, world. ", 7, 3, "", false)
	f.Add(uint8(1), uint8(3), "Bonjour! Here is the plan:\n\n1. Read", 20, 2, "", false)
	f.Add(uint8(2), uint8(2), "ab cd\t", 6, 1, "", true)
	f.Add(uint8(0), uint8(3), "The quick brown fox", 9, 4, "The quick red", false)
	f.Add(uint8(1), uint8(2), "<a> & \"b\" 🎉 \u2028", 12, 5, "", true)
	f.Fuzz(func(t *testing.T, apiPick, stPick uint8, text string, cut, size int, other string, restart bool) {
		if !utf8.ValidString(text) || !utf8.ValidString(other) || len(text) > 512 || len(other) > 512 {
			return
		}
		api := []API{ChatCompletions, Messages, Gemini}[int(apiPick)%3]
		st := []Strategy{Prefill, PrefillPrefix, Regenerate}[int(stPick)%3]
		if st == PrefillPrefix && api != ChatCompletions {
			st = Prefill
		}
		size = 1 + abs(size)%8
		parts := chunkRunes(text, size)
		var s Stream
		s.Reset(api, true)
		cut = abs(cut) % (len(parts) + 1)
		orig := answerEvents(api, firstID(api), parts...)
		observe(&s, orig[:min(len(orig), 1+cut)])
		if s.Complete() {
			return
		}
		delivered := string(s.Delivered())
		var heldBack []byte
		cont := other // what the continuation says
		if st != Regenerate {
			if _, hb, err := s.PrefillBody(requestOf(api), st); err == nil {
				heldBack = hb
			} else {
				st = Regenerate
			}
		}
		if other == "" {
			cont = text
			if st != Regenerate && !restart {
				cont = strings.TrimPrefix(text, strings.TrimSuffix(delivered, string(heldBack)))
			}
		}
		out, _, err := splice(s.Splice(st, heldBack), answerEvents(api, secondID(api), chunkRunes(cont, 1+(size+3)%8)...))
		now := string(s.Delivered())
		emitted := now[len(delivered):]
		require.True(t, strings.HasPrefix(now, delivered))
		if err != nil && !errors.Is(err, ErrDiverged) {
			t.Fatal(err)
		}
		if st == Regenerate {
			// What is handed on is always the regeneration past the
			// delivered text, or nothing.
			if err != nil {
				require.Empty(t, emitted)
				require.Empty(t, out)
			} else {
				require.Equal(t, cont, now, "the regeneration, whole")
			}
			return
		}
		require.NoError(t, err, "a prefill never diverges")
		// A prefill's continuation is handed on as it is (the held-back
		// whitespace it repeats skipped), or past the delivered text
		// when it started over.
		trimmed := cont
		for len(heldBack) > 0 && trimmed != "" && trimmed[0] == heldBack[0] {
			trimmed, heldBack = trimmed[1:], heldBack[1:]
		}
		if strings.HasPrefix(cont, delivered) && delivered != "" {
			require.Equal(t, cont[len(delivered):], emitted, "a restart")
		} else {
			require.Equal(t, trimmed, emitted)
		}
	})
}

// abs is |n|, 0 for the least int.
func abs(n int) int {
	if n < 0 {
		n = -n
	}
	return max(n, 0)
}

// splice runs a continuation's events through a Splicer: the bytes it
// hands on, the last step, and the first error.
func splice(sp *Splicer, evs []sseEvent) ([]byte, Step, error) {
	var out []byte
	var step Step
	for _, e := range evs {
		var err error
		n := len(out)
		if out, step, err = sp.Next(out, []byte(e.typ), []byte(e.data)); err != nil {
			if len(out) != n {
				return out, step, errors.New("bytes appended with an error")
			}
			return out, step, err
		}
	}
	return out, step, nil
}

// Azure OpenAI opens every Chat Completions stream with its prompt-filter
// chunk, whose "id" is "". openai-go's accumulator takes the first
// non-empty id: the continuation's chunks carry that id, not "".
func TestSpliceAzurePromptFilterID(t *testing.T) {
	orig := append([]sseEvent{
		dataEv(`{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}}}]}`),
	}, chatEvents(chatID, "Hello", " world", "!")...)
	s, caller := cutEvents(t, ChatCompletions, chatRequest, orig, `" world"`)
	require.Equal(t, "Hello", string(s.Delivered()))
	regen := chatEvents(chatID2, "Hel", "lo world", "!")
	out, _, err := splice(s.Splice(Regenerate, nil), regen)
	require.NoError(t, err)
	a, err := accumulateChat(append(caller, out...))
	require.NoError(t, err, "openai-go's accumulator refuses the spliced chunks")
	assert.Equal(t, "Hello world!", a.text)
	assert.Equal(t, chatID, a.id)
}

// Held text handed on in a chunk whose delta has "content": null (the
// shape of OpenAI-style tool-call and finish chunks) takes the null's
// place: a second "content" member would lose it (every JSON reader keeps
// the last).
func TestSpliceHeldTextInPlaceOfNullContent(t *testing.T) {
	s, caller := cutEvents(t, ChatCompletions, chatRequest, chatEvents(chatID, "Hello", " world", "!"), " world")
	require.Equal(t, "Hello", string(s.Delivered()))
	head := fmt.Sprintf(chatHead, chatID2)
	cont := []sseEvent{
		dataEv(head + `{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`),
		dataEv(head + `{"content":"He"},"logprobs":null,"finish_reason":null}]}`), // a prefix of "Hello": held
		dataEv(head + `{"content":null},"logprobs":null,"finish_reason":"stop"}]}`),
		dataEv("[DONE]"),
	}
	out, _, err := splice(s.Splice(Prefill, nil), cont)
	require.NoError(t, err)
	a, err := accumulateChat(append(caller, out...))
	require.NoError(t, err)
	assert.Equal(t, "HelloHe", a.text, "the held text reaches the caller once: %s", out)
	assert.Equal(t, "HelloHe", string(s.Delivered()), "the Stream believes it was delivered")
}

// The held-back whitespace is skipped where the continuation repeats it,
// whole characters only: a held-back U+00A0 (C2 A0) and a continuation
// that starts with "»" (C2 BB) share a byte, and "»" reaches the caller
// whole (decision 109).
func TestSpliceHeldBackSpaceSkipsWholeCharacters(t *testing.T) {
	orig := messagesEvents(msgID, "Il a dit «\u00a0bonjour\u00a0", "» et", " partit.")
	s, caller := cutEvents(t, Messages, messagesRequest, orig, "» et")
	require.Equal(t, "Il a dit «\u00a0bonjour\u00a0", string(s.Delivered()))
	_, held, err := s.PrefillBody([]byte(messagesRequest), Prefill)
	require.NoError(t, err)
	require.Equal(t, "\u00a0", string(held))
	cont := messagesEvents(msgID2, "» et", " partit.")
	out, _, err := splice(s.Splice(Prefill, held), cont)
	require.NoError(t, err)
	a, err := accumulateMessages(append(caller, out...))
	require.NoError(t, err)
	assert.Equal(t, "Il a dit «\u00a0bonjour\u00a0» et partit.", a.text())
}
