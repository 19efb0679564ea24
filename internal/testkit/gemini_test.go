package testkit

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
