package wire

// The streams below are built from the shapes named in firstevent.go's
// file comment and apis.go's table. Each case is a head, the bytes a scan reading one byte at a
// time must consume to decide, and a tail it must leave in the reader.
//
//	go test -run='^$' -fuzz='^FuzzFirstEvent$' -fuzztime=30s ./internal/wire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Openings of healthy streams, as the providers send them.
const (
	// feOpenAIChunk is an OpenAI chat completion's first chunk (the role,
	// empty content) and the next one.
	feOpenAIChunk = "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_f9f4fb6dbf\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
	feOpenAINext  = "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
	// feMessageStart and feBlockStart are Anthropic's preamble.
	feMessageStart = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5-20250929\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n"
	feBlockStart   = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
	fePing         = "event: ping\ndata: {\"type\": \"ping\"}\n\n"
	feBlockDelta   = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n"
	feBlockDelta2  = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"!\"}}\n\n"
	// feCreated and feInProgress are the OpenAI Responses preamble, with
	// feQueued between them for a response created with background: true;
	// feItemAdded is its first content event.
	feCreated    = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654\",\"object\":\"response\",\"created_at\":1741290958,\"status\":\"in_progress\",\"error\":null,\"incomplete_details\":null,\"model\":\"gpt-4.1-2025-04-14\",\"output\":[]}}\n\n"
	feQueued     = "event: response.queued\ndata: {\"type\":\"response.queued\",\"sequence_number\":1,\"response\":{\"id\":\"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654\",\"object\":\"response\",\"created_at\":1741290958,\"status\":\"queued\",\"background\":true,\"error\":null,\"output\":[]}}\n\n"
	feInProgress = "event: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":{\"id\":\"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654\",\"object\":\"response\",\"status\":\"in_progress\",\"error\":null,\"output\":[]}}\n\n"
	feItemAdded  = "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":2,\"output_index\":0,\"item\":{\"id\":\"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654\",\"type\":\"message\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}\n\n"
	// feGeminiChunk is a Gemini ?alt=sse chunk: CRLF line endings.
	feGeminiChunk = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Hello\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 4,\"totalTokenCount\": 5},\"modelVersion\": \"gemini-2.5-flash\"}\r\n\r\n"
	// feOverloaded is Anthropic's overloaded error event.
	feOverloaded = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
)

// firstEventCase is one stream opening and its verdict.
type firstEventCase struct {
	name string
	head string // what a one-byte-at-a-time scan consumes
	tail string // what it leaves in the reader
	max  int    // maxBytes; 0 means 1 MiB
	want FirstEvent
}

// firstEventCases are the shapes and framings ScanFirstEvent must read.
func firstEventCases() []firstEventCase {
	content := FirstEvent{Kind: EventContent}
	overloaded := FirstEvent{Kind: EventOverloaded, What: "overloaded_error"}
	return []firstEventCase{
		// Healthy streams.
		{name: "openai chat opening", head: feOpenAIChunk + feOpenAINext, tail: "data: [DONE]\n\n", want: content},
		{name: "anthropic opening", head: feMessageStart + feBlockStart + fePing + feBlockDelta, tail: feBlockDelta2, want: content},
		{name: "responses opening", head: feCreated + feInProgress + feItemAdded, tail: "event: response.output_text.delta\ndata: {}\n\n", want: content},
		{name: "responses background opening", head: feCreated + feQueued + feInProgress + feItemAdded, tail: "event: response.output_text.delta\ndata: {}\n\n", want: content},
		{name: "gemini chunk crlf", head: feGeminiChunk[:len(feGeminiChunk)-1], tail: "\n", want: content},
		{name: "non-json data", head: "data: hello\n\n", tail: "data: world\n\n", want: content},
		{name: "json array data", head: "data: [{\"candidates\":[]}]\n\n", want: content},
		{name: "error null is content", head: "data: {\"error\":null,\"choices\":[]}\n\n", want: content},
		{name: "error empty object is content", head: "data: {\"error\":{ },\"choices\":[]}\n\n", want: content},
		{name: "nested error is content", head: "data: {\"response\":{\"error\":{\"code\":\"server_error\"}}}\n\n", want: content},
		{name: "message_delta is content", head: feMessageStart + "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n", want: content},
		{name: "malformed json is content", head: "data: {\"error\":{\"type\":\"api_error\"}\n\n", want: content},
		{name: "content then error", head: feBlockDelta, tail: feOverloaded, want: content},
		{name: "preamble then content", head: feMessageStart + feBlockStart + feBlockDelta, want: content},

		// Anthropic error events.
		{name: "anthropic overloaded", head: feOverloaded, tail: "event: message_stop\n\n", want: overloaded},
		{name: "azure prompt-filter chunk then content", head: "data: {\"choices\":[],\"created\":0,\"id\":\"\",\"model\":\"\",\"object\":\"\",\"prompt_filter_results\":[{\"prompt_index\":0,\"content_filter_results\":{\"hate\":{\"filtered\":false,\"severity\":\"safe\"}}}]}\n\n" + feOpenAINext, tail: "data: [DONE]\n\n", want: content},
		{name: "azure prompt-filter chunk then error", head: "data: {\"choices\":[],\"created\":0,\"id\":\"\",\"model\":\"\",\"object\":\"\",\"prompt_filter_results\":[{\"prompt_index\":0,\"content_filter_results\":{\"hate\":{\"filtered\":false,\"severity\":\"safe\"}}}]}\n\ndata: {\"error\":{\"message\":\"The server had an error.\",\"type\":\"server_error\",\"code\":null}}\n\n", want: FirstEvent{Kind: EventServerError, What: "server_error"}},
		{name: "openai role chunk then content", head: "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}]}\n\n" + feOpenAINext, tail: "data: [DONE]\n\n", want: content},
		{name: "openai role chunk then error", head: "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}]}\n\ndata: {\"error\":{\"message\":\"The server had an error.\",\"type\":\"server_error\",\"code\":null}}\n\n", want: FirstEvent{Kind: EventServerError, What: "server_error"}},
		{name: "openai role chunk that finishes is content", head: "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":\"stop\"}]}\n\n", want: content},
		{name: "anthropic preamble then error", head: feMessageStart + fePing + feBlockStart + feOverloaded, want: overloaded},
		{name: "anthropic api_error", head: "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal server error\"}}\n\n", want: FirstEvent{Kind: EventServerError, What: "api_error"}},
		{name: "anthropic timeout_error", head: "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"timeout_error\",\"message\":\"Request timeout\"}}\n\n", want: FirstEvent{Kind: EventServerError, What: "timeout_error"}},
		{name: "anthropic rate_limit_error", head: "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"Number of request tokens has exceeded your per-minute rate limit\"}}\n\n", want: FirstEvent{Kind: EventRateLimit, What: "rate_limit_error"}},
		{name: "anthropic spend limit", head: "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"You have reached your API usage limits.\",\"details\":{\"error_code\":\"enforced_spend_limit_reached\"}}}\n\n", want: FirstEvent{Kind: EventRateLimit, What: "rate_limit_error", Final: true}},
		{name: "anthropic invalid_request_error", head: "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"prompt is too long\"}}\n\n", want: FirstEvent{Kind: EventOtherError, What: "invalid_request_error"}},
		{name: "anthropic authentication_error", head: "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"invalid x-api-key\"}}\n\n", want: FirstEvent{Kind: EventOtherError, What: "authentication_error"}},
		{name: "anthropic billing_error", head: "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"billing_error\",\"message\":\"Your credit balance is too low\"}}\n\n", want: FirstEvent{Kind: EventOtherError, What: "billing_error", Final: true}},
		{name: "anthropic unknown type", head: "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"new_kind_error\",\"message\":\"?\"}}\n\n", want: FirstEvent{Kind: EventOtherError, What: "new_kind_error"}},
		{name: "error event not json", head: "event: error\ndata: Overloaded\n\n", want: FirstEvent{Kind: EventOtherError, What: "error"}},

		// OpenAI chat completions.
		{name: "openai chat server_error", head: "data: {\"error\":{\"message\":\"The server had an error while processing your request. Sorry about that!\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n", tail: "data: [DONE]\n\n", want: FirstEvent{Kind: EventServerError, What: "server_error"}},
		{name: "openai chat overloaded code", head: "data: {\"error\":{\"message\":\"That model is currently overloaded with other requests.\",\"type\":\"server_error\",\"param\":null,\"code\":\"server_is_overloaded\"}}\n\n", want: FirstEvent{Kind: EventOverloaded, What: "server_is_overloaded"}},
		{name: "openai chat slow_down", head: "data: {\"error\":{\"message\":\"Please slow down.\",\"type\":\"invalid_request_error\",\"code\":\"slow_down\"}}\n\n", want: FirstEvent{Kind: EventOverloaded, What: "slow_down"}},
		{name: "openai chat rate limit wait", head: "data: {\"error\":{\"message\":\"Rate limit reached for gpt-4o in organization org-abc123 on tokens per min (TPM): Limit 30000, Used 29684, Requested 1250. Please try again in 1.868s. Visit https://platform.openai.com/account/rate-limits to learn more.\",\"type\":\"tokens\",\"param\":null,\"code\":\"rate_limit_exceeded\"}}\n\n", want: FirstEvent{Kind: EventRateLimit, What: "rate_limit_exceeded", Wait: 1868 * time.Millisecond, HasWait: true}},
		{name: "openai chat rate limit ms", head: "data: {\"error\":{\"message\":\"Rate limit reached for requests. Please try again in 20ms.\",\"type\":\"requests\",\"code\":\"rate_limit_exceeded\"}}\n\n", want: FirstEvent{Kind: EventRateLimit, What: "rate_limit_exceeded", Wait: 20 * time.Millisecond, HasWait: true}},
		{name: "openai chat rate limit 1m30s", head: "data: {\"error\":{\"message\":\"Please try again in 1m30s.\",\"type\":\"tokens\",\"code\":null}}\n\n", want: FirstEvent{Kind: EventRateLimit, What: "tokens", Wait: 90 * time.Second, HasWait: true}},
		{name: "openai chat insufficient_quota", head: "data: {\"error\":{\"message\":\"You exceeded your current quota, please check your plan and billing details. Please try again in 20s.\",\"type\":\"insufficient_quota\",\"param\":null,\"code\":\"insufficient_quota\"}}\n\n", want: FirstEvent{Kind: EventRateLimit, What: "insufficient_quota", Final: true}},
		{name: "openai chat invalid_request_error", head: "data: {\"error\":{\"message\":\"Invalid 'messages'\",\"type\":\"invalid_request_error\",\"param\":\"messages\",\"code\":null}}\n\n", want: FirstEvent{Kind: EventOtherError, What: "invalid_request_error"}},
		{name: "openai chat error string", head: "data: {\"error\":\"upstream failed\"}\n\n", want: FirstEvent{Kind: EventOtherError, What: "error"}},
		{name: "done first", head: "data: [DONE]\n\n", tail: "data: {\"choices\":[]}\n\n", want: FirstEvent{Kind: EventEnd, What: "[DONE]"}},

		// OpenAI Responses.
		{name: "responses error event", head: feCreated + "event: error\ndata: {\"type\":\"error\",\"code\":\"server_is_overloaded\",\"message\":\"Our servers are currently overloaded. Please try again later.\",\"param\":null,\"sequence_number\":1}\n\n", want: FirstEvent{Kind: EventOverloaded, What: "server_is_overloaded"}},
		{name: "responses error nested", head: "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"service_unavailable_error\",\"code\":\"server_is_overloaded\",\"message\":\"Overloaded\",\"param\":null},\"sequence_number\":2}\n\n", want: FirstEvent{Kind: EventOverloaded, What: "server_is_overloaded"}},
		{name: "responses failed server_error", head: feCreated + feInProgress + "event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":2,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"An error occurred while processing your request.\"},\"output\":[]}}\n\n", want: FirstEvent{Kind: EventServerError, What: "server_error"}},
		{name: "responses queued then failed", head: feCreated + feQueued + "event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":2,\"response\":{\"id\":\"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654\",\"object\":\"response\",\"status\":\"failed\",\"background\":true,\"error\":{\"code\":\"server_error\",\"message\":\"An error occurred while processing your request.\"},\"output\":[]}}\n\n", want: FirstEvent{Kind: EventServerError, What: "server_error"}},
		{name: "responses failed rate limit", head: "event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":1,\"response\":{\"status\":\"failed\",\"error\":{\"code\":\"rate_limit_exceeded\",\"message\":\"Rate limit reached for gpt-5 on tokens per min (TPM). Please try again in 11.054s.\"}}}\n\n", want: FirstEvent{Kind: EventRateLimit, What: "rate_limit_exceeded", Wait: 11054 * time.Millisecond, HasWait: true}},
		{name: "responses failed insufficient_quota", head: "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"error\":{\"code\":\"insufficient_quota\",\"message\":\"You exceeded your current quota.\"}}}\n\n", want: FirstEvent{Kind: EventRateLimit, What: "insufficient_quota", Final: true}},
		{name: "responses failed no error", head: "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"error\":null}}\n\n", want: FirstEvent{Kind: EventOtherError, What: "response.failed"}},
		{name: "responses error without event line", head: "data: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"boom\"}\n\n", want: FirstEvent{Kind: EventServerError, What: "server_error"}},

		// Gemini.
		{name: "gemini 503", head: "data: {\"error\":{\"code\":503,\"message\":\"The model is overloaded. Please try again later.\",\"status\":\"UNAVAILABLE\"}}\r\n\r", tail: "\n", want: FirstEvent{Kind: EventOverloaded, What: "UNAVAILABLE"}},
		{name: "gemini 500", head: "data: {\"error\":{\"code\":500,\"message\":\"An internal error has occurred.\",\"status\":\"INTERNAL\"}}\n\n", want: FirstEvent{Kind: EventServerError, What: "INTERNAL"}},
		{name: "gemini numeric code only", head: "data: {\"error\":{\"code\":503,\"message\":\"x\"}}\n\n", want: FirstEvent{Kind: EventOverloaded, What: "503"}},
		{name: "gemini 429 retryinfo", head: "data: {\"error\":{\"code\":429,\"message\":\"You exceeded your current quota. Please retry in 38.8s.\",\"status\":\"RESOURCE_EXHAUSTED\",\"details\":[{\"@type\":\"type.googleapis.com/google.rpc.QuotaFailure\",\"violations\":[{\"quotaId\":\"GenerateRequestsPerMinutePerProjectPerModel-FreeTier\",\"quotaValue\":\"10\"}]},{\"@type\":\"type.googleapis.com/google.rpc.RetryInfo\",\"retryDelay\":\"38.804097346s\"}]}}\n\n", want: FirstEvent{Kind: EventRateLimit, What: "RESOURCE_EXHAUSTED", Wait: 38804097346, HasWait: true}},
		{name: "gemini 429 per day", head: "data: {\"error\":{\"code\":429,\"status\":\"RESOURCE_EXHAUSTED\",\"details\":[{\"@type\":\"type.googleapis.com/google.rpc.QuotaFailure\",\"violations\":[{\"quotaId\":\"GenerateRequestsPerDayPerProjectPerModel-FreeTier\",\"quotaValue\":\"250\"}]},{\"@type\":\"type.googleapis.com/google.rpc.RetryInfo\",\"retryDelay\":\"38s\"}]}}\n\n", want: FirstEvent{Kind: EventRateLimit, What: "RESOURCE_EXHAUSTED", Final: true}},
		{name: "gemini 400", head: "data: {\"error\":{\"code\":400,\"message\":\"API key not valid.\",\"status\":\"INVALID_ARGUMENT\"}}\n\n", want: FirstEvent{Kind: EventOtherError, What: "INVALID_ARGUMENT"}},

		// Framing.
		{name: "crlf", head: strings.TrimSuffix(strings.ReplaceAll(feMessageStart+feOverloaded, "\n", "\r\n"), "\n"), tail: "\n", want: overloaded},
		{name: "cr", head: strings.ReplaceAll(feMessageStart+feOverloaded, "\n", "\r"), tail: "data: x\r\r", want: overloaded},
		{name: "mixed endings", head: "event: message_start\r\ndata: {\"type\":\"message_start\"}\r\rdata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\"}}\n\r", tail: "\n", want: FirstEvent{Kind: EventServerError, What: "api_error"}},
		{name: "bom", head: "\xef\xbb\xbf" + feOverloaded, want: overloaded},
		{name: "bom then blank line", head: "\xef\xbb\xbf\n" + feBlockDelta, want: content},
		{name: "bom only at start", head: "data: {}\n\n\xef\xbb\xbfdata: {\"error\":{\"type\":\"api_error\"}}\n\n", want: FirstEvent{Kind: EventEnd}},
		{name: "comments and pings first", head: ": keep-alive\n\n: OPENROUTER PROCESSING\n\n" + fePing + "event: ping\n\n" + fePing + feOverloaded, want: overloaded},
		{name: "event without data", head: "event: message_start\n\nid: 7\nretry: 1000\n\n" + feBlockDelta, want: content},
		{name: "whitespace data skipped", head: "data:   \n\ndata\n\n" + feBlockDelta, want: content},
		{name: "empty object skipped", head: "data: {}\n\ndata: { }\n\n" + feOverloaded, want: overloaded},
		{name: "no space after colon", head: "event:error\ndata:{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", want: overloaded},
		{name: "two spaces after colon", head: "data:  [DONE]\n\n", want: FirstEvent{Kind: EventEnd, What: "[DONE]"}},
		{name: "data over several lines", head: "data: {\"error\":\ndata: {\"type\":\"server_error\",\n: a comment between\ndata: \"message\":\"boom\"}}\n\n", want: FirstEvent{Kind: EventServerError, What: "server_error"}},
		{name: "content over several lines", head: "data: {\"choices\":\ndata: []}\n\n", want: content},
		{name: "event field kept to dispatch", head: "event: error\nid: 1\ndata: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\"}}\n\n", want: FirstEvent{Kind: EventRateLimit, What: "rate_limit_error"}},
		{name: "event name reset after dispatch", head: "event: ping\ndata: x\n\n" + "data: y\n\n", want: FirstEvent{Kind: EventContent}},
		{name: "message type defaults to json type", head: "event: message\ndata: {\"type\":\"message_start\"}\n\n" + feBlockDelta, want: content},
		{name: "unknown field ignored", head: "foo: bar\nfoo\ndata: [DONE]\n\n", want: FirstEvent{Kind: EventEnd, What: "[DONE]"}},

		// Ends without a verdict.
		{name: "empty", want: FirstEvent{Kind: EventEnd}},
		{name: "eof mid-event", head: "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n", want: FirstEvent{Kind: EventEnd}},
		{name: "eof mid-line", head: feMessageStart + "data: {\"type\":\"content_blo", want: FirstEvent{Kind: EventEnd}},
		{name: "eof after preamble", head: feMessageStart + feBlockStart, want: FirstEvent{Kind: EventEnd}},
		{name: "max bytes", head: feMessageStart[:40], tail: feMessageStart[40:] + feBlockDelta, max: 40, want: FirstEvent{Kind: EventUndecided}},
		{name: "max bytes mid preamble", head: (feMessageStart + feBlockStart)[:300], tail: (feMessageStart + feBlockStart)[300:] + feOverloaded, max: 300, want: FirstEvent{Kind: EventUndecided}},
		{name: "max bytes exactly at the event", head: feOverloaded, tail: feBlockDelta, max: len(feOverloaded), want: overloaded},
		{name: "max bytes below a rounded-up buffer", head: strings.Repeat(": pad\n", 1000)[:5000], tail: strings.Repeat(": pad\n", 1000)[5000:] + feOverloaded, max: 5000, want: FirstEvent{Kind: EventUndecided}},
		{name: "max bytes past the first read", head: strings.Repeat(": pad\n", 1000) + feOverloaded, max: 6000 + len(feOverloaded), want: overloaded},
	}
}

// TestScanFirstEvent reads every case whole, one byte at a time, half a
// buffer at a time, and with its last bytes coming with io.EOF: the verdict
// is the same, the bytes read and the bytes left make the stream, and one
// byte at a time reads exactly the head.
func TestScanFirstEvent(t *testing.T) {
	readers := []struct {
		name    string
		oneByte bool
		wrap    func(io.Reader) io.Reader
	}{
		{"whole", false, func(r io.Reader) io.Reader { return r }},
		{"one byte", true, iotest.OneByteReader},
		{"half", false, iotest.HalfReader},
		{"data with eof", false, iotest.DataErrReader},
	}
	for _, c := range firstEventCases() {
		for _, rd := range readers {
			t.Run(c.name+"/"+rd.name, func(t *testing.T) {
				input := c.head + c.tail
				max := c.max
				if max == 0 {
					max = 1 << 20
				}
				r := rd.wrap(strings.NewReader(input))
				read, ev, err := ScanFirstEvent(r, max)
				require.NoError(t, err)
				assert.Equal(t, c.want, ev)
				assert.LessOrEqual(t, len(read), max)
				rest, err := io.ReadAll(r)
				require.NoError(t, err)
				assert.Equal(t, input, string(read)+string(rest), "bytes lost or repeated")
				if rd.oneByte {
					assert.Equal(t, c.head, string(read), "not exactly the deciding prefix")
				}
			})
		}
	}
}

// feFailAfter returns data, then err, in one Read.
type feFailAfter struct {
	data []byte
	err  error
}

// Read returns the data and the error together.
func (r *feFailAfter) Read(p []byte) (int, error) {
	n := copy(p, r.data)
	r.data = r.data[n:]
	if len(r.data) == 0 {
		return n, r.err
	}
	return n, nil
}

// TestScanFirstEventReadError checks that a read error comes back with
// the bytes read before it, and with the verdict of bytes that came with it.
func TestScanFirstEventReadError(t *testing.T) {
	boom := errors.New("connection reset")
	head := feMessageStart + "event: content_block_st"

	t.Run("after the bytes", func(t *testing.T) {
		read, ev, err := ScanFirstEvent(io.MultiReader(strings.NewReader(head), iotest.ErrReader(boom)), 1<<20)
		assert.ErrorIs(t, err, boom)
		assert.Equal(t, head, string(read))
		assert.Equal(t, EventUndecided, ev.Kind)
	})
	t.Run("one byte at a time", func(t *testing.T) {
		read, ev, err := ScanFirstEvent(iotest.OneByteReader(io.MultiReader(strings.NewReader(head), iotest.ErrReader(boom))), 1<<20)
		assert.ErrorIs(t, err, boom)
		assert.Equal(t, head, string(read))
		assert.Equal(t, EventUndecided, ev.Kind)
	})
	t.Run("with the deciding bytes", func(t *testing.T) {
		read, ev, err := ScanFirstEvent(&feFailAfter{data: []byte(feOverloaded), err: boom}, 1<<20)
		assert.ErrorIs(t, err, boom)
		assert.Equal(t, feOverloaded, string(read))
		assert.Equal(t, EventOverloaded, ev.Kind, "the verdict of the bytes that came with the error")
	})
	t.Run("eof with the deciding bytes", func(t *testing.T) {
		read, ev, err := ScanFirstEvent(&feFailAfter{data: []byte(feBlockDelta), err: io.EOF}, 1<<20)
		assert.NoError(t, err)
		assert.Equal(t, feBlockDelta, string(read))
		assert.Equal(t, EventContent, ev.Kind)
	})
}

// feStuck returns nothing, ever.
type feStuck struct{}

// Read returns 0, nil.
func (feStuck) Read([]byte) (int, error) { return 0, nil }

// feLiar claims to have read more than it was given.
type feLiar struct{}

// Read returns a count past the end of p.
func (feLiar) Read(p []byte) (int, error) { return len(p) + 1, nil }

// TestScanFirstEventBadReaders checks that a reader that never returns
// anything, one that returns a count past its buffer, and a maxBytes of
// zero or less end the scan without a panic.
func TestScanFirstEventBadReaders(t *testing.T) {
	read, ev, err := ScanFirstEvent(feStuck{}, 1024)
	assert.ErrorIs(t, err, io.ErrNoProgress)
	assert.Empty(t, read)
	assert.Equal(t, EventUndecided, ev.Kind)

	read, ev, err = ScanFirstEvent(feLiar{}, 1024)
	assert.Error(t, err)
	assert.Empty(t, read)
	assert.Equal(t, EventUndecided, ev.Kind)

	for _, max := range []int{0, -1} {
		read, ev, err = ScanFirstEvent(strings.NewReader(feOverloaded), max)
		assert.NoError(t, err)
		assert.Empty(t, read)
		assert.Equal(t, EventUndecided, ev.Kind)
	}
}

// TestFirstEventWhatIsAWord checks that what is capped and never holds a
// sentence, so never a message that may quote a key.
func TestFirstEventWhatIsAWord(t *testing.T) {
	long := strings.Repeat("x", 300)
	_, ev, err := ScanFirstEvent(strings.NewReader("event: error\ndata: {\"error\":{\"type\":\""+long+"\"}}\n\n"), 1<<20)
	require.NoError(t, err)
	assert.Equal(t, EventOtherError, ev.Kind)
	assert.Len(t, ev.What, MaxWhat)

	_, ev, err = ScanFirstEvent(strings.NewReader("data: {\"error\":{\"code\":\"Incorrect API key provided: sk-proj-abc\",\"message\":\"key sk-proj-abc\"}}\n\n"), 1<<20)
	require.NoError(t, err)
	assert.Equal(t, EventOtherError, ev.Kind)
	assert.Equal(t, "Incorrect", ev.What, "a sentence is cut at its first space")
}

// FuzzFirstEvent feeds arbitrary streams to ScanFirstEvent, whole and one
// byte at a time: it must not panic, must return a prefix of the stream of
// at most maxBytes, lose nothing, and give one verdict however the stream
// is cut into reads.
func FuzzFirstEvent(f *testing.F) {
	for _, c := range firstEventCases() {
		max := c.max
		if max == 0 {
			max = 1 << 16
		}
		f.Add([]byte(c.head+c.tail), uint16(max-1))
	}
	f.Fuzz(func(t *testing.T, data []byte, max16 uint16) {
		max := int(max16) + 1
		whole, evWhole, err := ScanFirstEvent(bytes.NewReader(data), max)
		if err != nil {
			t.Fatalf("whole: %v", err)
		}
		r := bytes.NewReader(data)
		one, evOne, err := ScanFirstEvent(iotest.OneByteReader(r), max)
		if err != nil {
			t.Fatalf("one byte: %v", err)
		}
		if !bytes.HasPrefix(data, whole) || !bytes.HasPrefix(whole, one) {
			t.Fatalf("not prefixes: whole %q, one byte %q", whole, one)
		}
		if len(whole) > max || len(one) > max {
			t.Fatalf("read %d and %d bytes, max %d", len(whole), len(one), max)
		}
		if rest, _ := io.ReadAll(r); !bytes.Equal(append(one, rest...), data) {
			t.Fatalf("bytes lost or repeated")
		}
		if evWhole != evOne {
			t.Fatalf("whole %+v, one byte %+v", evWhole, evOne)
		}
		if ev := evOne; ev.Wait < 0 || (!ev.HasWait && ev.Wait != 0) || (ev.Final && ev.HasWait) || len(ev.What) > MaxWhat {
			t.Fatalf("inconsistent verdict %+v", ev)
		}
	})
}

// BenchmarkScanFirstEvent measures healthy openings (OpenAI chat's first
// chunk; Anthropic's message_start, content_block_start and first delta)
// and, for comparison, an Anthropic overloaded error.
func BenchmarkScanFirstEvent(b *testing.B) {
	for _, c := range []struct{ name, stream string }{
		{"openai chat", feOpenAIChunk + feOpenAINext},
		{"anthropic", feMessageStart + feBlockStart + feBlockDelta + feBlockDelta2},
		{"anthropic overloaded", feOverloaded},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var r strings.Reader
			for b.Loop() {
				r.Reset(c.stream)
				if _, ev, err := ScanFirstEvent(&r, 1<<20); err != nil || ev.Kind == EventUndecided {
					b.Fatal(ev, err)
				}
			}
		})
	}
}

// An error verdict stands for the HTTP status of its kind, fails the
// attempt and names the provider's word; content and ends do neither.
func TestFirstEventMeaning(t *testing.T) {
	for _, c := range []struct {
		ev       FirstEvent
		status   int
		failed   bool
		describe string
	}{
		{FirstEvent{Kind: EventOverloaded, What: "overloaded_error"}, 529, true, "stream error overloaded_error"},
		{FirstEvent{Kind: EventServerError, What: "api_error"}, 500, true, "stream error api_error"},
		{FirstEvent{Kind: EventRateLimit}, 429, true, "stream error"},
		{FirstEvent{Kind: EventOtherError, What: "invalid_request_error"}, 400, true, "stream error invalid_request_error"},
		{FirstEvent{Kind: EventContent}, 200, false, "stream error"},
		{FirstEvent{Kind: EventEnd, What: "[DONE]"}, 200, false, "stream error [DONE]"},
		{FirstEvent{Kind: EventUndecided}, 200, false, "stream error"},
	} {
		assert.Equal(t, c.status, c.ev.Status(), "%+v", c.ev)
		assert.Equal(t, c.failed, c.ev.Failed(), "%+v", c.ev)
		assert.Equal(t, c.describe, c.ev.Describe(), "%+v", c.ev)
	}
}
