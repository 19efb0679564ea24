package testkit

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sseData returns the data of each event of an SSE stream, in order.
func sseData(t *testing.T, events []string) []string {
	t.Helper()
	var data []string
	for _, ev := range events {
		for _, line := range strings.Split(strings.TrimRight(ev, "\r\n"), "\n") {
			if d, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), "data: "); ok {
				data = append(data, d)
			}
		}
	}
	return data
}

// OpenAI's replies are what api.openai.com sends: its headers, JSON
// bodies of the API's shapes, streams of chunks ending in [DONE].
func TestOpenAIReplies(t *testing.T) {
	var completion struct {
		Object  string
		Choices []struct{ Message struct{ Content string } }
	}
	rep := OpenAIChatCompletion(`Say "hi"`)
	require.NoError(t, json.Unmarshal([]byte(rep.Body), &completion))
	assert.Equal(t, "chat.completion", completion.Object)
	assert.Equal(t, `Say "hi"`, completion.Choices[0].Message.Content)
	assert.Equal(t, "application/json", rep.Header.Get("Content-Type"))
	assert.Equal(t, "req_5f1c0e7a2b9d4c3e8f6a1b2c3d4e5f60", rep.Header.Get("X-Request-Id"))

	stream := OpenAIChatStream("Hel", "lo")
	assert.Equal(t, "text/event-stream; charset=utf-8", stream.Header.Get("Content-Type"))
	data := sseData(t, stream.Events)
	require.Len(t, data, 5, "role, two parts, finish, [DONE]")
	assert.Equal(t, "[DONE]", data[4])
	var text strings.Builder
	for _, d := range data[:4] {
		var chunk struct {
			Choices []struct{ Delta struct{ Content string } }
		}
		require.NoError(t, json.Unmarshal([]byte(d), &chunk), d)
		text.WriteString(chunk.Choices[0].Delta.Content)
	}
	assert.Equal(t, "Hello", text.String())

	for name, rep := range map[string]Reply{
		"error":              OpenAIError(400, "bad", "invalid_request_error", "messages", ""),
		"rate limited":       OpenAIRateLimited("20"),
		"insufficient quota": OpenAIInsufficientQuota(),
		"overloaded":         OpenAIOverloaded(),
	} {
		var e struct {
			Error struct{ Message, Type string }
		}
		require.NoError(t, json.Unmarshal([]byte(rep.Body), &e), name)
		assert.NotEmpty(t, e.Error.Message, name)
	}
	assert.Equal(t, http.StatusTooManyRequests, OpenAIRateLimited("20").Status)
	assert.Equal(t, "20", OpenAIRateLimited("20").Header.Get("Retry-After"))
	assert.Contains(t, OpenAIInsufficientQuota().Body, `"code":"insufficient_quota"`)
	assert.Contains(t, OpenAIError(400, "m", "t", "", "").Body, `"param":null,"code":null`)
	assert.Equal(t, http.StatusServiceUnavailable, OpenAIOverloaded().Status)
	assert.True(t, json.Valid([]byte(sseData(t, []string{OpenAIErrorChunk})[0])))
}

// The Responses API streams named events with sequence numbers.
func TestOpenAIResponsesStream(t *testing.T) {
	rep := OpenAIResponsesStream("Hel", "lo")
	data := sseData(t, rep.Events)
	require.Len(t, data, 5)
	var types []string
	for i, d := range data {
		var ev struct {
			Type           string
			SequenceNumber int `json:"sequence_number"`
		}
		require.NoError(t, json.Unmarshal([]byte(d), &ev), d)
		assert.Equal(t, i, ev.SequenceNumber)
		types = append(types, ev.Type)
	}
	assert.Equal(t, []string{"response.created", "response.in_progress", "response.output_text.delta", "response.output_text.delta", "response.completed"}, types)
	assert.True(t, strings.HasPrefix(rep.Events[0], "event: response.created\n"))
}
