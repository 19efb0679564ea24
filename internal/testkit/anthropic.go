package testkit

import (
	"net/http"
)

// AnthropicHeaders are the headers api.anthropic.com sends on every Reply.
func AnthropicHeaders(contentType string) http.Header {
	return http.Header{
		"Content-Type":                           {contentType},
		"Request-Id":                             {"req_011CSHoEeqs5C35K2UUqR7Fy"},
		"Anthropic-Organization-Id":              {"4e4f8a29-7c1b-4b8e-9a52-1d2e3f4a5b6c"},
		"Anthropic-Ratelimit-Requests-Limit":     {"50"},
		"Anthropic-Ratelimit-Requests-Remaining": {"49"},
		"Via":                                    {"1.1 google"},
	}
}

// AnthropicMessage is a Messages API message answering text.
func AnthropicMessage(text string) Reply {
	return Reply{
		Status: http.StatusOK,
		Header: AnthropicHeaders("application/json"),
		Body: `{
  "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
  "type": "message",
  "role": "assistant",
  "model": "claude-sonnet-4-5-20250929",
  "content": [{"type": "text", "text": ` + Quote(text) + `}],
  "stop_reason": "end_turn",
  "stop_sequence": null,
  "usage": {"input_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 9, "service_tier": "standard"}
}`,
	}
}

// AnthropicStream streams parts as Messages API Events: message_start,
// content_block_start, ping, one content_block_delta per part,
// content_block_stop, message_delta, message_stop.
func AnthropicStream(parts ...string) Reply {
	ev := func(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }
	events := []string{
		ev("message_start", `{"type":"message_start","message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1,"service_tier":"standard"}}}`),
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
		ev("ping", `{"type": "ping"}`),
	}
	for _, p := range parts {
		events = append(events, ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+Quote(p)+`}}`))
	}
	events = append(events,
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`),
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":9}}`),
		ev("message_stop", `{"type":"message_stop"}`))
	return Reply{Status: http.StatusOK, Header: AnthropicHeaders("text/event-stream; charset=utf-8"), Events: events}.
		With("Cache-Control", "no-cache")
}

// AnthropicError is Anthropic's error object with status.
func AnthropicError(status int, typ, message string) Reply {
	return Reply{
		Status: status,
		Header: AnthropicHeaders("application/json"),
		Body:   `{"type":"error","error":{"type":` + Quote(typ) + `,"message":` + Quote(message) + `},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`,
	}
}

// AnthropicRateLimited is Anthropic's retryable 429, which also carries
// x-should-retry: true.
func AnthropicRateLimited(retryAfter string) Reply {
	return AnthropicError(http.StatusTooManyRequests, "rate_limit_error",
		"This request would exceed the rate limit for your organization (4e4f8a29-7c1b-4b8e-9a52-1d2e3f4a5b6c) of 30,000 input tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later.").
		With("Retry-After", retryAfter).
		With("X-Should-Retry", "true").
		With("Anthropic-Ratelimit-Input-Tokens-Remaining", "0")
}

// AnthropicSpendLimit is Anthropic's 429 for the monthly spend cap: final.
func AnthropicSpendLimit() Reply {
	return Reply{
		Status: http.StatusTooManyRequests,
		Header: AnthropicHeaders("application/json"),
		Body:   `{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your API usage limits: your organization has crossed its monthly API usage threshold, set based on your organization's API tier. You will regain access on 2026-01-01 at 00:00 UTC.","details":{"error_code":"enforced_spend_limit_reached"}},"request_id":"req_018EeWyXxfu5pfWkrYcMdjWG"}`,
	}
}

// AnthropicOverloaded is Anthropic's 529 overloaded_error.
func AnthropicOverloaded() Reply { return AnthropicError(529, "overloaded_error", "Overloaded") }

// AnthropicErrorEvent is Anthropic's SSE error event of type typ, as a
// stream that started with a 200 sends it.
func AnthropicErrorEvent(typ, message string) string {
	return "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":" + Quote(typ) + ",\"message\":" + Quote(message) +
		"},\"request_id\":\"req_011CSHpZ8hP3aT6jB2mW9xQe\"}\n\n"
}
