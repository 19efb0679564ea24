package wire

//	go test -run='^$' -fuzz='^FuzzPrefillBody$' -fuzztime=30s ./internal/wire

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// streamOf is a Stream of api that delivered text, with request body.
func streamOf(t *testing.T, api API, request, text string) *Stream {
	t.Helper()
	var s Stream
	s.Reset(api, true)
	evs := answerEvents(api, firstID(api), text, "never")
	for _, e := range evs {
		if strings.Contains(e.data, "never") {
			break
		}
		s.Observe([]byte(e.typ), []byte(e.data))
	}
	require.Equal(t, text, string(s.Delivered()))
	return &s
}

// The prefill of each API: the body with one turn added at the end of its
// messages (contents), every other byte kept.
func TestPrefillBody(t *testing.T) {
	for _, c := range []struct {
		name, request, text string
		api                 API
		st                  Strategy
		want, held          string
	}{
		{"messages", messagesRequest, "The plan:", Messages, Prefill,
			`{"model":"claude-sonnet-4-5","max_tokens":1024,"system":"Be brief.","messages":[{"role":"user","content":"Plan?"},{"role":"assistant","content":"The plan:"}],"stream":true}`, ""},
		{"messages trailing whitespace", messagesRequest, "The plan: \n\n", Messages, Prefill,
			`{"model":"claude-sonnet-4-5","max_tokens":1024,"system":"Be brief.","messages":[{"role":"user","content":"Plan?"},{"role":"assistant","content":"The plan:"}],"stream":true}`, " \n\n"},
		{"messages unicode whitespace", messagesRequest, "Fin.\u00a0\u3000\x1f", Messages, Prefill,
			`{"model":"claude-sonnet-4-5","max_tokens":1024,"system":"Be brief.","messages":[{"role":"user","content":"Plan?"},{"role":"assistant","content":"Fin."}],"stream":true}`, "\u00a0\u3000\x1f"},
		{"chat", chatRequest, "Step <1> & \"2\"", ChatCompletions, Prefill,
			`{"model":"deepseek-chat","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Plan?"},{"role":"assistant","content":"Step \u003c1\u003e \u0026 \"2\""}],"stream":true,"stream_options":{"include_usage":true}}`, ""},
		{"chat prefix", chatRequest, "Step 1 ", ChatCompletions, PrefillPrefix,
			`{"model":"deepseek-chat","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Plan?"},{"role":"assistant","content":"Step 1 ","prefix":true}],"stream":true,"stream_options":{"include_usage":true}}`, ""},
		{"gemini", geminiRequest, "Plan:\n", Gemini, Prefill,
			`{"contents":[{"role":"user","parts":[{"text":"Plan?"}]},{"role":"model","parts":[{"text":"Plan:\n"}]}],"generationConfig":{"temperature":0.2}}`, ""},
		{"pretty-printed, messages last", "{\n  \"stream\": true,\n  \"messages\": [\n    {\"role\": \"user\", \"content\": \"hi\"}\n  ]\n}", "Hello", ChatCompletions, Prefill,
			"{\n  \"stream\": true,\n  \"messages\": [\n    {\"role\": \"user\", \"content\": \"hi\"},{\"role\":\"assistant\",\"content\":\"Hello\"}\n  ]\n}", ""},
		{"empty messages", `{"messages":[ ]}`, "Hi", ChatCompletions, Prefill,
			`{"messages":[{"role":"assistant","content":"Hi"} ]}`, ""},
		{"duplicate key: the last counts", `{"messages":[{"role":"user","content":"a"}],"messages":[{"role":"user","content":"b"}]}`, "Hi", ChatCompletions, Prefill,
			`{"messages":[{"role":"user","content":"a"}],"messages":[{"role":"user","content":"b"},{"role":"assistant","content":"Hi"}]}`, ""},
		// The user's own prefill: the delivered text continues it.
		{"messages user prefill", `{"messages":[{"role":"user","content":"JSON?"},{"role":"assistant","content":"{"}],"stream":true}`, "\"a\": 1,\n", Messages, Prefill,
			`{"messages":[{"role":"user","content":"JSON?"},{"role":"assistant","content":"{\"a\": 1,"}],"stream":true}`, "\n"},
		{"messages user prefill blocks", `{"messages":[{"role":"user","content":"?"},{"role":"assistant","content":[{"type":"text","text":"{"}]}]}`, "\"a\"", Messages, Prefill,
			`{"messages":[{"role":"user","content":"?"},{"role":"assistant","content":[{"type":"text","text":"{"},{"type":"text","text":"\"a\""}]}]}`, ""},
		{"chat prefix already", `{"messages":[{"role":"user","content":"?"},{"role":"assistant","content":"def ","prefix":false}]}`, "f(x):", ChatCompletions, PrefillPrefix,
			`{"messages":[{"role":"user","content":"?"},{"role":"assistant","content":"def f(x):","prefix":true}]}`, ""},
		{"chat prefix added to the user's prefill", `{"messages":[{"role":"user","content":"?"},{"role":"assistant","content":"def "}]}`, "f", ChatCompletions, PrefillPrefix,
			`{"messages":[{"role":"user","content":"?"},{"role":"assistant","content":"def f","prefix":true}]}`, ""},
		{"gemini model turn", `{"contents":[{"role":"user","parts":[{"text":"?"}]},{"role":"model","parts":[{"text":"A"}]}]}`, "B", Gemini, Prefill,
			`{"contents":[{"role":"user","parts":[{"text":"?"}]},{"role":"model","parts":[{"text":"A"},{"text":"B"}]}]}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := streamOf(t, c.api, c.request, c.text)
			body, held, err := s.PrefillBody([]byte(c.request), c.st)
			require.NoError(t, err)
			assert.Equal(t, c.want, string(body))
			assert.Equal(t, c.held, string(held))
			assert.True(t, json.Valid(body))
		})
	}
}

// When no prefill can be built.
func TestPrefillBodyRefused(t *testing.T) {
	for _, c := range []struct {
		name, request, text string
		api                 API
		st                  Strategy
		want                error
	}{
		{"regenerate", chatRequest, "x", ChatCompletions, Regenerate, errNotPrefill},
		{"resume", chatRequest, "x", ChatCompletions, Resume, errNotPrefill},
		{"prefix on messages", messagesRequest, "x", Messages, PrefillPrefix, errPrefixChatOnly},
		{"responses", `{"input":"hi","background":true}`, "x", Responses, Prefill, errNoPrefillAPI},
		{"nothing delivered", chatRequest, "", ChatCompletions, Prefill, errNothingToFill},
		{"only whitespace", messagesRequest, " \n", Messages, Prefill, errNothingToFill},
		{"thinking asked", `{"messages":[{"role":"user","content":"?"}],"thinking":{"type":"enabled","budget_tokens":2048}}`, "x", Messages, Prefill, errThinkingPrefill},
		{"adaptive thinking", `{"messages":[{"role":"user","content":"?"}],"thinking":{"type":"adaptive"}}`, "x", Messages, Prefill, errThinkingPrefill},
		{"not json", `{"messages":[}`, "x", ChatCompletions, Prefill, errRequestJSON},
		{"no messages", `{"prompt":"hi"}`, "x", ChatCompletions, Prefill, errRequestJSON},
		{"messages not an array", `{"messages":"hi"}`, "x", ChatCompletions, Prefill, errRequestJSON},
		{"an array body", `[{"messages":[]}]`, "x", ChatCompletions, Prefill, errRequestJSON},
		{"n = 2", `{"model":"gpt-4o","n":2,"messages":[{"role":"user","content":"?"}]}`, "x", ChatCompletions, Prefill, errSeveralChoices},
		{"candidateCount 2", `{"contents":[{"role":"user","parts":[{"text":"?"}]}],"generationConfig":{"candidateCount":2}}`, "x", Gemini, Prefill, errSeveralChoices},
		{"assistant turn with tool calls only", `{"messages":[{"role":"assistant","content":null,"tool_calls":[]}]}`, "x", ChatCompletions, Prefill, errLastTurn},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := streamOf(t, c.api, c.request, c.text)
			body, held, err := s.PrefillBody([]byte(c.request), c.st)
			assert.ErrorIs(t, err, c.want)
			assert.Equal(t, c.want != errSeveralChoices, errors.Is(err, ErrNoPrefill), "a refusal of the prefill alone, or of any continuation")
			assert.NotContains(t, err.Error(), "llmretry:", "the root prefixes it")
			assert.Nil(t, body)
			assert.Nil(t, held)
		})
	}
	var s Stream
	s.Reset(ChatCompletions, true)
	observe(&s, chatEvents(chatID, "Hel", "lo")[:2])
	_, _, err := s.PrefillBody(nil, Prefill)
	assert.ErrorIs(t, err, errNoRequest)
	assert.ErrorIs(t, err, ErrNoPrefill)

	s.Reset(ChatCompletions, true)
	observe(&s, chatToolEvents()[:4])
	_, _, err = s.PrefillBody([]byte(chatRequest), Prefill)
	assert.ErrorContains(t, err, "a tool call", "a stuck stream")
	assert.NotErrorIs(t, err, ErrNoPrefill, "a stuck stream is never continued")

	s.Reset(ChatCompletions, false)
	observe(&s, chatEvents(chatID, "Hel", "lo")[:2])
	_, _, err = s.PrefillBody([]byte(chatRequest), Prefill)
	assert.ErrorContains(t, err, "not kept", "a Stream that keeps no text")
	assert.NotErrorIs(t, err, ErrNoPrefill)

	s.Reset(Messages, true)
	observe(&s, messagesThinkingEvents("Hel", "lo")[:7])
	require.Equal(t, "Hel", string(s.Delivered()))
	_, _, err = s.PrefillBody([]byte(messagesRequest), Prefill)
	assert.ErrorIs(t, err, errThinkingPrefill, "a thinking block was delivered")
	assert.ErrorIs(t, err, ErrNoPrefill, "it may be regenerated")
}

func FuzzPrefillBody(f *testing.F) {
	f.Add(uint8(0), chatRequest, "Hello ")
	f.Add(uint8(1), messagesRequest, "Hi \n")
	f.Add(uint8(2), geminiRequest, "Plan: <b>")
	f.Add(uint8(0), `{"messages":[{"role":"assistant","content":"x"}],"n":1}`, "y")
	f.Add(uint8(1), `{"messages":[{"role":"assistant","content":[{"type":"text","text":"{"}]}]}`, "\u2028")
	f.Add(uint8(3), `{"messages":[{"role":"assistant","content":"a","prefix":1}]}`, "b")
	f.Fuzz(func(t *testing.T, pick uint8, request, text string) {
		api := []API{ChatCompletions, Messages, Gemini, ChatCompletions}[pick%4]
		st := Prefill
		if pick%4 == 3 {
			st = PrefillPrefix
		}
		if !utf8.ValidString(text) {
			return // a delivered text is decoded JSON: UTF-8
		}
		var s Stream
		s.Reset(api, true)
		s.text = append(s.text, text...) // as if delivered
		body, held, err := s.PrefillBody([]byte(request), st)
		if err != nil {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("not JSON: %s", body)
		}
		var before, after map[string]any
		require.NoError(t, json.Unmarshal([]byte(request), &before))
		require.NoError(t, json.Unmarshal(body, &after))
		list := "messages"
		if api == Gemini {
			list = "contents"
		}
		turns, ok := after[list].([]any)
		require.True(t, ok)
		old := before[list].([]any)
		filled := strings.TrimSuffix(text, string(held))
		require.Equal(t, text, filled+string(held))
		if len(turns) == len(old) {
			// The last turn was the assistant's: it was extended.
			require.NotEmpty(t, turns)
			require.Equal(t, old[:len(old)-1], turns[:len(turns)-1])
			was, now := old[len(old)-1].(map[string]any), turns[len(turns)-1].(map[string]any)
			content := "content"
			if api == Gemini {
				content = "parts"
			}
			switch v := was[content].(type) {
			case string:
				require.Equal(t, v+filled, now[content])
			case []any:
				block := map[string]any{"type": "text", "text": filled}
				if api == Gemini {
					block = map[string]any{"text": filled}
				}
				require.Equal(t, append(v, block), now[content])
			default:
				t.Fatalf("extended a content of %T", v)
			}
			if st == PrefillPrefix {
				require.Equal(t, true, now["prefix"])
			}
			delete(was, content)
			delete(now, content)
			delete(was, "prefix")
			delete(now, "prefix")
			require.Equal(t, was, now)
		} else {
			require.Len(t, turns, len(old)+1)
			var want map[string]any
			switch {
			case api == Gemini:
				want = map[string]any{"role": "model", "parts": []any{map[string]any{"text": filled}}}
			case st == PrefillPrefix:
				want = map[string]any{"role": "assistant", "content": filled, "prefix": true}
			default:
				want = map[string]any{"role": "assistant", "content": filled}
			}
			require.Equal(t, want, turns[len(turns)-1])
			require.Equal(t, old, turns[:len(turns)-1])
		}
		// Every other member decodes as it did.
		delete(before, list)
		delete(after, list)
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("the body changed beyond its last turn:\n%s\n%s", request, body)
		}
	})
}

// SeveralChoices reads n (Chat Completions) and candidateCount (Gemini)
// as PrefillBody does, for every strategy.
func TestSeveralChoices(t *testing.T) {
	for _, c := range []struct {
		name    string
		api     API
		request string
		want    bool
	}{
		{"n = 2", ChatCompletions, `{"model":"gpt-4o","n":2,"messages":[]}`, true},
		{"n = 1", ChatCompletions, `{"model":"gpt-4o","n":1,"messages":[]}`, false},
		{"no n", ChatCompletions, chatRequest, false},
		{"n on Messages means nothing", Messages, `{"n":2,"messages":[]}`, false},
		{"candidateCount 2", Gemini, `{"contents":[],"generationConfig":{"candidateCount":2}}`, true},
		{"candidate_count 2, the proto name", Gemini, `{"contents":[],"generation_config":{"candidate_count":2}}`, true},
		{"not JSON", ChatCompletions, `{"n":`, false},
	} {
		assert.Equal(t, c.want, SeveralChoices(c.api, []byte(c.request)), c.name)
	}
}
