package testkit

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
