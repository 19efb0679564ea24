package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// text returns data[p].
func textAt(data []byte, p span) string { return string(data[p.From:p.To]) }

// A Chat Completions chunk: the id, the first choice's text and delta, what
// is more than text.
func TestChatFacts(t *testing.T) {
	var w walker
	var f chatFacts
	data := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi \"you\""},"logprobs":{"content":[{"token":"Hi","logprob":-0.1,"bytes":[72,105],"top_logprobs":[]}]},"finish_reason":null}],"usage":null}`)
	require.True(t, w.chat(data, &f))
	assert.Equal(t, "chatcmpl-1", textAt(data, f.id))
	assert.True(t, f.hasContent)
	assert.Equal(t, `Hi \"you\"`, textAt(data, f.content))
	assert.Equal(t, `{"content":"Hi \"you\""}`, textAt(data, f.delta))
	assert.False(t, f.finish || f.tool || f.several || f.err || f.noChoices)

	data = []byte(`{"id":"c","choices":[{"delta":{"tool_calls":[]},"index":0,"finish_reason":"tool_calls"}]}`)
	require.True(t, w.chat(data, &f))
	assert.False(t, f.tool, "an empty tool_calls is none")
	assert.True(t, f.finish, "the index after the delta")

	data = []byte(`{"id":"c","choices":[],"usage":{"prompt_tokens":1},"error":null}`)
	require.True(t, w.chat(data, &f))
	assert.True(t, f.noChoices)
	assert.True(t, f.usage)
	assert.False(t, f.err, "error: null is no error")

	for _, d := range []string{`{"error":{"message":"x"}}`, `{"error":"upstream failed"}`} {
		require.True(t, w.chat([]byte(d), &f))
		assert.True(t, f.err, d)
	}
	for _, d := range []string{`{"error":{ }}`, `{"error":" "}`, `{"x":{"error":{"a":1}}}`} {
		require.True(t, w.chat([]byte(d), &f))
		assert.False(t, f.err, d)
	}
	for _, d := range []string{`[1]`, `"x"`, `12`, `null`, `{"a":1}x`, `{"a":1`, ``} {
		assert.False(t, w.chat([]byte(d), &f), "not an object: %q", d)
	}
	require.True(t, w.chat([]byte("[DONE]"), &f))
	assert.True(t, f.done)
}

// An Anthropic Messages event: the type, index, block and delta.
func TestMessagesFacts(t *testing.T) {
	var w walker
	var f messagesFacts
	data := []byte(`{"type":"content_block_start","index":3,"content_block":{"type":"text","text":"Let me"}}`)
	require.True(t, w.messages(data, &f))
	assert.Equal(t, "content_block_start", textAt(data, f.typ))
	assert.Equal(t, 3, f.index)
	assert.Equal(t, "3", textAt(data, f.indexAt))
	assert.Equal(t, "text", textAt(data, f.blockType))
	assert.Equal(t, "Let me", textAt(data, f.blockText))

	data = []byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}`)
	require.True(t, w.messages(data, &f))
	assert.True(t, f.stop)
	assert.Equal(t, -1, f.index)

	data = []byte(`{"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":15}}`)
	require.True(t, w.messages(data, &f))
	assert.False(t, f.stop)
}

// An OpenAI Responses event: the type, sequence number, response id, item
// type and text.
func TestResponsesFacts(t *testing.T) {
	var w walker
	var f responsesFacts
	evs := responsesEvents("Hi")
	data := []byte(evs[0].data)
	require.True(t, w.responses(data, &f))
	assert.Equal(t, "response.created", textAt(data, f.typ))
	assert.Equal(t, respID, textAt(data, f.id))
	assert.True(t, f.hasSeq)
	assert.Equal(t, int64(0), f.seq)

	data = []byte(evs[2].data)
	require.True(t, w.responses(data, &f))
	assert.Equal(t, "message", textAt(data, f.itemType))
	assert.Equal(t, int64(2), f.seq)

	data = []byte(evs[4].data)
	require.True(t, w.responses(data, &f))
	assert.Equal(t, "Hi", textAt(data, f.delta))
}

// A Gemini chunk: the first candidate's parts, thoughts, tools.
func TestGeminiFacts(t *testing.T) {
	var w walker
	var f geminiFacts
	data := []byte(`{"candidates":[{"content":{"parts":[{"text":"**Plan**","thought":true},{"text":"Hello","thoughtSignature":"CiQB"},{"functionCall":{"name":"f","args":{}}},{"inlineData":{"mimeType":"image/png","data":"AA=="}}],"role":"model"},"finishReason":"STOP","index":0}],"responseId":"r1"}`)
	parts, ok := w.gemini(data, &f, nil, true)
	require.True(t, ok)
	require.Len(t, parts, 4)
	assert.True(t, parts[0].thought)
	assert.Equal(t, "Hello", textAt(data, parts[1].text))
	assert.False(t, parts[1].thought)
	assert.Equal(t, partTool, parts[2].kind)
	assert.Equal(t, partOther, parts[3].kind)
	assert.True(t, f.finish)
	assert.True(t, f.content)
	assert.Equal(t, "r1", textAt(data, f.id))
	assert.False(t, f.several)

	data = []byte(`{"candidates":[{"content":{"parts":[{"text":"a"}]},"index":1}]}`)
	_, ok = w.gemini(data, &f, parts, true)
	require.True(t, ok)
	assert.True(t, f.several, "a candidate of index 1")
}
