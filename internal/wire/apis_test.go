package wire

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The table names each shape once, typed or not, and gives each API the
// shapes continuing a stream will look for: how an answer ends, and an
// error in its place.
func TestShapes(t *testing.T) {
	type key struct {
		api        API
		typ, named string
	}
	seen := map[key]bool{}
	ends := map[API]bool{}
	errs := map[API]bool{}
	for _, s := range Shapes() {
		assert.True(t, (s.Type == "") != (s.Name == ""), "a shape is typed or named: %+v", s)
		k := key{s.API, s.Type, s.Name}
		assert.False(t, seen[k], "named twice: %+v", k)
		seen[k] = true
		ends[s.API] = ends[s.API] || s.Role == RoleCompletion || s.Stop != ""
		errs[s.API] = errs[s.API] || s.Role == RoleError
	}
	for _, api := range []API{ChatCompletions, Responses, Messages, Gemini} {
		assert.True(t, ends[api], "API %d: how its answer ends", api)
		assert.True(t, errs[api], "API %d: its error event", api)
	}
}

// Shapes returns a copy: the table itself cannot be changed through it.
func TestShapesIsACopy(t *testing.T) {
	s := Shapes()
	s[0].Role = RoleError
	assert.NotEqual(t, RoleError, Shapes()[0].Role)
}

// The typed events a stream's opening skips are the preamble and the
// keep-alives: Anthropic's message_start, content_block_start and ping,
// Responses' response.created, response.queued and response.in_progress.
func TestRoleOf(t *testing.T) {
	for typ, want := range map[string]Role{
		"message_start":        RolePreamble,
		"content_block_start":  RolePreamble,
		"ping":                 RoleKeepAlive,
		"response.created":     RolePreamble,
		"response.queued":      RolePreamble,
		"response.in_progress": RolePreamble,
		"content_block_delta":  RoleContent,
		"message_stop":         RoleCompletion,
		"response.completed":   RoleCompletion,
		"response.failed":      RoleError,
		"error":                RoleError,
	} {
		got, _, ok := roleOf([]byte(typ))
		assert.True(t, ok, typ)
		assert.Equal(t, want, got, typ)
	}
	got, _, ok := roleOf([]byte("response.reasoning_summary_text.delta"))
	assert.False(t, ok)
	assert.Equal(t, RoleContent, got, "an event no shape names is content")
	_, _, ok = roleOf(nil)
	assert.False(t, ok, "an untyped event has no typed shape")
}

// APIOf names a request's API from its method and URL.
func TestAPIOf(t *testing.T) {
	for raw, want := range map[string]API{
		"POST https://api.openai.com/v1/chat/completions":                                                    ChatCompletions,
		"POST https://my.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21": ChatCompletions,
		"POST https://api.deepseek.com/beta/chat/completions":                                                ChatCompletions,
		"POST https://openrouter.ai/api/v1/chat/completions/":                                                ChatCompletions,
		"POST https://api.openai.com/v1/responses":                                                           Responses,
		"GET https://api.openai.com/v1/responses/resp_123?stream=true&starting_after=7":                      Responses,
		"GET https://api.openai.com/v1/responses/resp_123":                                                   0,
		"POST https://api.anthropic.com/v1/messages?beta=true":                                               Messages,
		"POST https://us-east5-aiplatform.googleapis.com/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5:streamRawPredict": Messages,
		"POST https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse":                                     Gemini,
		"POST https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent":                                             0,
		"POST https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent":                                                   0,
		"POST https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-sonnet-4-5-v1:0/converse-stream":                                     Bedrock,
		"POST https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-sonnet-4-5-v1:0/invoke-with-response-stream":                         Bedrock,
		"POST https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-sonnet-4-5-v1:0/invoke":                                              0,
		"GET https://api.openai.com/v1/chat/completions":                                                                                                  0,
		"POST https://api.openai.com/v1/embeddings":                                                                                                       0,
	} {
		method, rest, _ := strings.Cut(raw, " ")
		u, err := url.Parse(rest)
		require.NoError(t, err)
		assert.Equal(t, want, APIOf(method, u), raw)
	}
	assert.Equal(t, API(0), APIOf("POST", nil))
}

// The paths the stream follower reads are the table's.
func TestShapesText(t *testing.T) {
	for _, s := range []*Shape{chatChunk, geminiChunk, messagesStart, messagesBlock, messagesDelta, messagesEnd, responsesText, responsesOpen} {
		require.NotNil(t, s)
	}
	assert.Equal(t, "choices[].delta.content", chatChunk.Text)
	assert.Equal(t, "delta.text", messagesDelta.Text)
	assert.Equal(t, "content_block.text", messagesBlock.Text)
	assert.Equal(t, "candidates[].content.parts[].text", geminiChunk.Text)
	assert.Equal(t, "delta", responsesText.Text)
}

// ModelOf reads the model off the body, or the path.
func TestModelOf(t *testing.T) {
	for _, c := range []struct {
		api       API
		url, body string
		want      string
	}{
		{ChatCompletions, "https://api.openai.com/v1/chat/completions", `{"messages":[],"model":"gpt-4o-mini","stream":true}`, "gpt-4o-mini"},
		{Messages, "https://api.anthropic.com/v1/messages", `{"model":"claude-sonnet-4-5","model":"claude-opus-4-6","max_tokens":10}`, "claude-opus-4-6"},
		{Responses, "https://api.openai.com/v1/responses", `{"model":"gpt-4.1\u002dmini","input":"hi"}`, "gpt-4.1-mini"},
		{ChatCompletions, "https://my.openai.azure.com/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21", `{"messages":[]}`, "gpt-4o-prod"},
		{Gemini, "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", `{"contents":[]}`, "gemini-2.5-flash"},
		{Gemini, "https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse", ``, "gemini-2.5-pro"},
		{Messages, "https://us-east5-aiplatform.googleapis.com/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict", `{"anthropic_version":"vertex-2023-10-16","messages":[]}`, "claude-sonnet-4-5@20250929"},
		{Bedrock, "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-sonnet-4-5-20250929-v1:0/converse-stream", `{}`, "anthropic.claude-sonnet-4-5-20250929-v1:0"},
		{ChatCompletions, "https://api.example.com/v1/chat/completions", `{"messages":[]}`, ""},
		{ChatCompletions, "https://api.example.com/v1/chat/completions", `not json`, ""},
	} {
		assert.Equal(t, c.want, ModelOf(c.api, mustParse(t, c.url), []byte(c.body)), c.url)
	}
	assert.Equal(t, "", ModelOf(Gemini, nil, nil))
}

// mustParse parses s.
func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}
