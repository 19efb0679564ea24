package testkit

// Tests of apis.go: each API's replies.

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

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

// Anthropic's replies are what api.anthropic.com sends: Messages API
// bodies, named stream events, error objects.
func TestAnthropicReplies(t *testing.T) {
	var msg struct {
		Type    string
		Content []struct{ Text string }
	}
	rep := AnthropicMessage("Hi")
	require.NoError(t, json.Unmarshal([]byte(rep.Body), &msg))
	assert.Equal(t, "message", msg.Type)
	assert.Equal(t, "Hi", msg.Content[0].Text)
	assert.Equal(t, "req_011CSHoEeqs5C35K2UUqR7Fy", rep.Header.Get("Request-Id"))

	stream := AnthropicStream("Hel", "lo")
	assert.Equal(t, "no-cache", stream.Header.Get("Cache-Control"))
	var names []string
	for _, ev := range stream.Events {
		name, _, _ := strings.Cut(strings.TrimPrefix(ev, "event: "), "\n")
		names = append(names, name)
	}
	assert.Equal(t, []string{"message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}, names)
	for _, d := range sseData(t, stream.Events) {
		assert.True(t, json.Valid([]byte(d)), d)
	}

	for name, rep := range map[string]Reply{
		"error":        AnthropicError(400, "invalid_request_error", "max_tokens"),
		"overloaded":   AnthropicOverloaded(),
		"rate limited": AnthropicRateLimited("30"),
		"spend limit":  AnthropicSpendLimit(),
	} {
		var e struct {
			Type  string
			Error struct{ Type, Message string }
		}
		require.NoError(t, json.Unmarshal([]byte(rep.Body), &e), name)
		assert.Equal(t, "error", e.Type, name)
	}
	assert.Equal(t, 529, AnthropicOverloaded().Status)
	assert.Equal(t, "true", AnthropicRateLimited("30").Header.Get("X-Should-Retry"))
	assert.Equal(t, http.StatusTooManyRequests, AnthropicSpendLimit().Status)
	assert.Contains(t, AnthropicSpendLimit().Body, "enforced_spend_limit_reached")

	ev := AnthropicErrorEvent("overloaded_error", "Overloaded")
	assert.True(t, strings.HasPrefix(ev, "event: error\ndata: "))
	assert.True(t, json.Valid([]byte(sseData(t, []string{ev})[0])))
}

// Gemini's replies are GenerateContentResponse bodies, an SSE stream of
// them ending each event in CRLF CRLF, and google.rpc.Status errors.
func TestGeminiReplies(t *testing.T) {
	type response struct {
		Candidates []struct {
			Content      struct{ Parts []struct{ Text string } }
			FinishReason string
		}
	}
	var r response
	require.NoError(t, json.Unmarshal([]byte(GeminiResponse("Hi").Body), &r))
	assert.Equal(t, "Hi", r.Candidates[0].Content.Parts[0].Text)
	assert.Equal(t, "STOP", r.Candidates[0].FinishReason)

	stream := GeminiStream("Hel", "lo")
	assert.Equal(t, "attachment", stream.Header.Get("Content-Disposition"))
	var finishes []string
	for i, d := range sseData(t, stream.Events) {
		assert.True(t, strings.HasSuffix(stream.Events[i], "\r\n\r\n"))
		var chunk response
		require.NoError(t, json.Unmarshal([]byte(d), &chunk), d)
		finishes = append(finishes, chunk.Candidates[0].FinishReason)
	}
	assert.Equal(t, []string{"", "STOP"}, finishes, "the last chunk finishes")

	var e struct {
		Error struct {
			Code    int
			Status  string
			Details []map[string]any
		}
	}
	require.NoError(t, json.Unmarshal([]byte(GeminiError(503, "UNAVAILABLE", "overloaded").Body), &e))
	assert.Equal(t, 503, e.Error.Code)
	assert.Equal(t, "UNAVAILABLE", e.Error.Status)

	quota := GeminiQuota("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "10", "20s")
	assert.Equal(t, http.StatusTooManyRequests, quota.Status)
	assert.Empty(t, quota.Header.Get("Retry-After"), "the wait is in the body only")
	require.NoError(t, json.Unmarshal([]byte(quota.Body), &e))
	assert.Equal(t, "type.googleapis.com/google.rpc.RetryInfo", e.Error.Details[2]["@type"])
	assert.Equal(t, "20s", e.Error.Details[2]["retryDelay"])
}

// Bedrock's replies are restJson1: the error's type in X-Amzn-ErrorType,
// its message in a JSON body; answers carry Bedrock's request ID.
func TestBedrockReplies(t *testing.T) {
	for name, rep := range map[string]Reply{
		"throttled":   BedrockThrottled(),
		"unavailable": BedrockUnavailable(),
		"converse":    BedrockConverse("Hi"),
		"invoke":      BedrockInvoke("Hi"),
	} {
		assert.True(t, json.Valid([]byte(rep.Body)), name)
		assert.Equal(t, "5c1e7b2a-9d4f-4e3a-8b6c-1f2e3d4c5b6a", rep.Header.Get("X-Amzn-Requestid"), name)
		assert.Empty(t, rep.Header.Get("Date"), "%s: no Date, which would skew the SDK's signing clock", name)
	}
	assert.Equal(t, http.StatusTooManyRequests, BedrockThrottled().Status)
	assert.Equal(t, "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/", BedrockThrottled().Header.Get("X-Amzn-Errortype"))
	assert.Equal(t, http.StatusServiceUnavailable, BedrockUnavailable().Status)
	assert.Equal(t, "12", BedrockInvoke("Hi").Header.Get("X-Amzn-Bedrock-Input-Token-Count"))
	assert.Equal(t, AnthropicMessage("Hi").Body, BedrockInvoke("Hi").Body, "the model's own body")

	now := time.Date(2025, 3, 10, 9, 0, 0, 0, time.UTC)
	expired := BedrockSignatureExpired(now.Add(-6*time.Minute), now)
	assert.Equal(t, http.StatusForbidden, expired.Status)
	assert.Equal(t, `{"message":"Signature expired: 20250310T085400Z is now earlier than 20250310T085500Z (20250310T090000Z - 5 min.)"}`, expired.Body)
}
