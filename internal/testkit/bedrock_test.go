package testkit

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

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
