package wire

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// RefusalOf reads, from the providers' own replies, a prompt longer than
// the model's window and a credential refused; any other 4xx says
// nothing another route cures.
func TestRefusalOf(t *testing.T) {
	js := http.Header{"Content-Type": {"application/json"}}
	tests := []struct {
		name   string
		status int
		h      http.Header
		body   string
		want   Refusal
	}{
		{"OpenAI context_length_exceeded", 400, js, `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9631 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, ContextTooLong},
		{"Azure OpenAI", 400, js, `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130421 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded","status":400}}`, ContextTooLong},
		{"Anthropic", 400, js, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 211234 tokens > 200000 maximum"},"request_id":"req_011"}`, ContextTooLong},
		{"Gemini", 400, js, `{"error":{"code":400,"message":"The input token count (1290345) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}`, ContextTooLong},
		{"Bedrock", 400, http.Header{"Content-Type": {"application/json"}, "X-Amzn-Errortype": {"ValidationException"}}, `{"message":"Input is too long for requested model."}`, ContextTooLong},
		{"Bedrock, tokens", 400, js, `{"message":"Malformed input request: too many input tokens"}`, ContextTooLong},
		{"OpenRouter", 400, js, `{"error":{"message":"This endpoint's maximum context length is 131072 tokens. However, you requested about 140000 tokens (140000 of text input). Please reduce the length of either one, or use the \"middle-out\" transform to compress your prompt automatically.","code":400}}`, ContextTooLong},
		{"Mistral", 400, js, `{"object":"error","message":"Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length","type":"invalid_request_message_error","param":null,"code":"3051"}`, ContextTooLong},
		{"a context refusal in a 413 too", 413, js, `{"error":{"message":"prompt is too long: 300000 tokens > 200000 maximum"}}`, ContextTooLong},
		{"OpenAI content filter", 400, js, `{"error":{"message":"Your request was rejected as a result of our safety system.","type":"invalid_request_error","param":null,"code":"content_policy_violation"}}`, RefusedNothing},
		{"OpenAI bad parameter", 400, js, `{"error":{"message":"Invalid value for 'temperature': expected a decimal between 0 and 2, but got 3.5 instead.","type":"invalid_request_error","param":"temperature","code":"invalid_value"}}`, RefusedNothing},
		{"Anthropic max_tokens", 400, js, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 1000000 > 64000, which is the maximum allowed number of output tokens for claude-sonnet-4-5"}}`, RefusedNothing},
		{"a request too large in bytes", 413, js, `{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}`, RefusedNothing},
		{"OpenAI invalid key", 401, js, `{"error":{"message":"Incorrect API key provided: sk-proj-****abcd.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, KeyRefused},
		{"any 401", 401, nil, ``, KeyRefused},
		{"Anthropic permission", 403, js, `{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}`, KeyRefused},
		{"Gemini permission", 403, js, `{"error":{"code":403,"message":"Permission denied on resource project p.","status":"PERMISSION_DENIED"}}`, KeyRefused},
		{"Azure invalid key", 403, js, `{"error":{"code":"403","message":"Access denied due to invalid subscription key or wrong API endpoint."}}`, KeyRefused},
		{"Gemini invalid key", 400, js, `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID"}]}}`, KeyRefused},
		{"OpenAI region", 403, js, `{"error":{"code":"unsupported_country_region_territory","message":"Country, region, or territory not supported","param":null,"type":"request_forbidden"}}`, RefusedNothing},
		{"a 403 that says nothing", 403, js, `{"error":{"message":"Forbidden"}}`, RefusedNothing},
		{"a 429 is no refusal", 429, js, `{"error":{"message":"prompt is too long"}}`, RefusedNothing},
		{"a 5xx is no refusal", 500, js, `{"error":{"message":"maximum context length"}}`, RefusedNothing},
		{"an HTML 400", 400, http.Header{"Content-Type": {"text/html"}}, `<h1>maximum context length</h1>`, RefusedNothing},
		{"a cut body", 400, js, `{"error":{"message":"This model's maximum context len`, RefusedNothing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, RefusalOf(tt.status, tt.h, []byte(tt.body)))
		})
	}
}

func TestRefusalOfAllocatesNothing(t *testing.T) {
	h := http.Header{"Content-Type": {"application/json"}}
	body := []byte(`{"error":{"message":"Invalid value for 'temperature'","type":"invalid_request_error","code":"invalid_value"}}`)
	assert.Zero(t, testing.AllocsPerRun(100, func() { RefusalOf(400, h, body) }))
}

// PrefillRefused reads the providers' refusals of a prefill, and nothing
// else.
func TestPrefillRefused(t *testing.T) {
	js := http.Header{"Content-Type": {"application/json"}}
	for _, c := range []struct {
		name   string
		status int
		h      http.Header
		body   string
		want   bool
	}{
		{"Anthropic, Claude 4.6 and later", 400, js, `{"type":"error","error":{"type":"invalid_request_error","message":"This model does not support assistant message prefill. The conversation must end with a user message."},"request_id":"req_011CT3bQ"}`, true},
		{"Anthropic, trailing whitespace", 400, js, `{"type":"error","error":{"type":"invalid_request_error","message":"messages: final assistant content cannot end with trailing whitespace"}}`, true},
		{"Gemini, a model turn last", 400, http.Header{"Content-Type": {"application/json; charset=UTF-8"}}, `{"error":{"code":400,"message":"Requests ending with a model turn are not supported unless the last part is a function response.","status":"INVALID_ARGUMENT"}}`, true},
		{"failoverbench's wall", 400, js, `{"error":{"message":"This model does not support assistant message prefill. The conversation must end with a user message.","type":"invalid_request_error","code":"invalid_prefill","param":null}}`, true},
		{"a cut body", 400, js, `{"type":"error","error":{"type":"invalid_request_error","message":"This model does not support assistant message prefill`, true},
		{"another 400", 400, js, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}`, false},
		{"context too long", 400, js, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 211234 tokens > 200000 maximum"}}`, false},
		{"not a 400", 500, js, `{"error":{"message":"does not support assistant message prefill"}}`, false},
		{"not JSON", 400, http.Header{"Content-Type": {"text/html"}}, `<p>does not support assistant message prefill</p>`, false},
	} {
		assert.Equal(t, c.want, PrefillRefused(c.status, c.h, []byte(c.body)), c.name)
	}
}
