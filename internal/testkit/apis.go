package testkit

// The providers' vocabulary, one API after another (OpenAI, Anthropic,
// Gemini, Bedrock): the headers each host sends and its replies.

import (
	"fmt"
	"net/http"
	"time"
)

// OpenAIHeaders are the headers api.openai.com sends on every Reply.
func OpenAIHeaders(contentType string) http.Header {
	return http.Header{
		"Content-Type":                   {contentType},
		"X-Request-Id":                   {"req_5f1c0e7a2b9d4c3e8f6a1b2c3d4e5f60"},
		"Openai-Organization":            {"org-dummy"},
		"Openai-Processing-Ms":           {"412"},
		"Openai-Version":                 {"2020-10-01"},
		"X-Ratelimit-Limit-Requests":     {"5000"},
		"X-Ratelimit-Remaining-Requests": {"4999"},
		"X-Ratelimit-Reset-Requests":     {"12ms"},
	}
}

// OpenAIChatCompletion is a chat.completion answering text.
func OpenAIChatCompletion(text string) Reply {
	return Reply{
		Status: http.StatusOK,
		Header: OpenAIHeaders("application/json"),
		Body: `{
  "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
  "object": "chat.completion",
  "created": 1741570283,
  "model": "gpt-4o-mini-2024-07-18",
  "choices": [
    {
      "index": 0,
      "message": {"role": "assistant", "content": ` + Quote(text) + `, "refusal": null, "annotations": []},
      "logprobs": null,
      "finish_reason": "stop"
    }
  ],
  "usage": {
    "prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
  },
  "service_tier": "default",
  "system_fingerprint": "fp_06737a9306"
}`,
	}
}

// OpenAIChatStream streams parts as chat.completion.chunk events, ending
// with a finish_reason chunk and data: [DONE].
func OpenAIChatStream(parts ...string) Reply {
	const head = `{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":`
	events := []string{"data: " + head + `{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}` + "\n\n"}
	for _, p := range parts {
		events = append(events, "data: "+head+`{"content":`+Quote(p)+`},"logprobs":null,"finish_reason":null}]}`+"\n\n")
	}
	events = append(events,
		"data: "+head+`{},"logprobs":null,"finish_reason":"stop"}]}`+"\n\n",
		"data: [DONE]\n\n")
	return Reply{Status: http.StatusOK, Header: OpenAIHeaders("text/event-stream; charset=utf-8"), Events: events}
}

// OpenAIError is OpenAI's error object with status.
func OpenAIError(status int, message, typ, param, code string) Reply {
	return Reply{
		Status: status,
		Header: OpenAIHeaders("application/json; charset=utf-8"),
		Body:   `{"error":{"message":` + Quote(message) + `,"type":` + Quote(typ) + `,"param":` + nullable(param) + `,"code":` + nullable(code) + `}}`,
	}
}

// OpenAIRateLimited is a retryable OpenAI 429 asking for retryAfter seconds.
func OpenAIRateLimited(retryAfter string) Reply {
	return OpenAIError(http.StatusTooManyRequests,
		"Rate limit reached for gpt-4o-mini in organization org-dummy on tokens per min (TPM): Limit 200000, Used 199342, Requested 1250. Please try again in 20s. Visit https://platform.openai.com/account/rate-limits to learn more.",
		"tokens", "", "rate_limit_exceeded").
		With("Retry-After", retryAfter).
		With("X-Ratelimit-Reset-Tokens", "20s")
}

// OpenAIInsufficientQuota is OpenAI's 429 for a spent quota: waiting does not help.
func OpenAIInsufficientQuota() Reply {
	return OpenAIError(http.StatusTooManyRequests,
		"You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.",
		"insufficient_quota", "", "insufficient_quota")
}

// OpenAIOverloaded is OpenAI's 503 when it is overloaded.
func OpenAIOverloaded() Reply {
	return OpenAIError(http.StatusServiceUnavailable, "The server is overloaded or not ready yet.", "server_error", "", "")
}

// OpenAIErrorChunk is the error OpenAI's chat completions stream sends
// after a 200, with no event line.
const OpenAIErrorChunk = `data: {"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}` + "\n\n"

// OpenAIResponsesStream streams parts as Responses API events:
// response.created, response.in_progress, one response.output_text.delta
// per part, response.completed.
func OpenAIResponsesStream(parts ...string) Reply {
	ev := func(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }
	const resp = `{"id":"resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b","object":"response","created_at":1741476542,"model":"gpt-4o-mini-2024-07-18","output":[],"status":"in_progress"}`
	events := []string{
		ev("response.created", `{"type":"response.created","sequence_number":0,"response":`+resp+`}`),
		ev("response.in_progress", `{"type":"response.in_progress","sequence_number":1,"response":`+resp+`}`),
	}
	for i, p := range parts {
		events = append(events, ev("response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":`+fmt.Sprint(i+2)+
			`,"item_id":"msg_67ccd2bf17f0819081ff3bb2cf6508e6","output_index":0,"content_index":0,"delta":`+Quote(p)+`}`))
	}
	events = append(events, ev("response.completed", `{"type":"response.completed","sequence_number":`+fmt.Sprint(len(parts)+2)+
		`,"response":{"id":"resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b","object":"response","created_at":1741476542,"model":"gpt-4o-mini-2024-07-18","output":[],"status":"completed"}}`))
	return Reply{Status: http.StatusOK, Header: OpenAIHeaders("text/event-stream; charset=utf-8"), Events: events}
}

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

// GeminiHeaders are the headers generativelanguage.googleapis.com sends.
func GeminiHeaders(contentType string) http.Header {
	return http.Header{
		"Content-Type":           {contentType},
		"Server":                 {"scaffolding on HTTPServer2"},
		"Vary":                   {"Origin", "X-Origin", "Referer"},
		"X-Content-Type-Options": {"nosniff"},
		"Server-Timing":          {"gfet4t7; dur=512"},
	}
}

// geminiChunk is one GenerateContentResponse with text; finish is "" for
// a chunk in the middle of a stream.
func geminiChunk(text, finish string) string {
	cand := `{"content":{"parts":[{"text":` + Quote(text) + `}],"role":"model"},"index":0`
	if finish != "" {
		cand += `,"finishReason":` + Quote(finish)
	}
	return `{"candidates":[` + cand + `}],"usageMetadata":{"promptTokenCount":8,"candidatesTokenCount":9,"totalTokenCount":17,"promptTokensDetails":[{"modality":"TEXT","tokenCount":8}]},"modelVersion":"gemini-2.5-flash","responseId":"mMYzaLXZO9ryjMcPmtLp6Qk"}`
}

// GeminiResponse is a generateContent response answering text.
func GeminiResponse(text string) Reply {
	return Reply{Status: http.StatusOK, Header: GeminiHeaders("application/json; charset=UTF-8"), Body: geminiChunk(text, "STOP")}
}

// GeminiStream streams parts as streamGenerateContent?alt=sse events
// (Gemini ends each with CRLF CRLF), the last with finishReason STOP.
func GeminiStream(parts ...string) Reply {
	var events []string
	for i, p := range parts {
		finish := ""
		if i == len(parts)-1 {
			finish = "STOP"
		}
		events = append(events, "data: "+geminiChunk(p, finish)+"\r\n\r\n")
	}
	return Reply{Status: http.StatusOK, Header: GeminiHeaders("text/event-stream"), Events: events}.
		With("Content-Disposition", "attachment")
}

// GeminiError is a google.rpc.Status error body.
func GeminiError(code int, status, message string) Reply {
	return Reply{
		Status: code,
		Header: GeminiHeaders("application/json; charset=UTF-8"),
		Body:   `{"error":{"code":` + fmt.Sprint(code) + `,"message":` + Quote(message) + `,"status":` + Quote(status) + `}}`,
	}
}

// GeminiQuota is Gemini's 429 RESOURCE_EXHAUSTED for quotaID, with the wait
// in the body (RetryInfo.retryDelay) and no Retry-After header.
func GeminiQuota(quotaID, quotaValue, retryDelay string) Reply {
	return Reply{
		Status: http.StatusTooManyRequests,
		Header: GeminiHeaders("application/json; charset=UTF-8"),
		Body: `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.","status":"RESOURCE_EXHAUSTED","details":[` +
			`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":` + Quote(quotaID) + `,"quotaDimensions":{"location":"global","model":"gemini-2.5-flash"},"quotaValue":` + Quote(quotaValue) + `}]},` +
			`{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},` +
			`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":` + Quote(retryDelay) + `}]}}`,
	}
}

// BedrockHeaders are the headers bedrock-runtime sends on every Reply. No
// Date: the SDK corrects its signing clock by the Date of a Reply, and a
// fixed one would skew the synctest clock.
func BedrockHeaders(contentType string) http.Header {
	return http.Header{
		"Content-Type":     {contentType},
		"X-Amzn-Requestid": {"5c1e7b2a-9d4f-4e3a-8b6c-1f2e3d4c5b6a"},
	}
}

// BedrockError is a Bedrock (restJson1) error: the error type in the
// X-Amzn-ErrorType header, the message in a JSON body.
func BedrockError(status int, typ, message string) Reply {
	return Reply{
		Status: status,
		Header: BedrockHeaders("application/json"),
		Body:   `{"message":` + Quote(message) + `}`,
	}.With("X-Amzn-Errortype", typ+":http://internal.amazon.com/coral/com.amazon.bedrock/")
}

// BedrockThrottled is Bedrock's 429 ThrottlingException (no Retry-After).
func BedrockThrottled() Reply {
	return BedrockError(http.StatusTooManyRequests, "ThrottlingException", "Too many requests, please wait before trying again.")
}

// BedrockUnavailable is Bedrock's 503 ServiceUnavailableException.
func BedrockUnavailable() Reply {
	return BedrockError(http.StatusServiceUnavailable, "ServiceUnavailableException", "Bedrock is unable to process your request.")
}

// BedrockSignatureExpired is the 403 InvalidSignatureException AWS sends
// for a request signed at signed and received at now, more than 5 minutes
// later.
func BedrockSignatureExpired(signed, now time.Time) Reply {
	const f = "20060102T150405Z"
	return BedrockError(http.StatusForbidden, "InvalidSignatureException",
		"Signature expired: "+signed.UTC().Format(f)+" is now earlier than "+now.Add(-5*time.Minute).UTC().Format(f)+
			" ("+now.UTC().Format(f)+" - 5 min.)")
}

// BedrockConverse is a Converse response answering text.
func BedrockConverse(text string) Reply {
	return Reply{
		Status: http.StatusOK,
		Header: BedrockHeaders("application/json"),
		Body: `{"metrics":{"latencyMs":412},"output":{"message":{"content":[{"text":` + Quote(text) + `}],"role":"assistant"}},` +
			`"stopReason":"end_turn","usage":{"inputTokens":12,"outputTokens":9,"totalTokens":21}}`,
	}
}

// BedrockInvoke is an InvokeModel response: the model's own body (here an
// Anthropic message) with Bedrock's token-count headers.
func BedrockInvoke(text string) Reply {
	r := AnthropicMessage(text)
	r.Header = BedrockHeaders("application/json")
	r.Header.Set("X-Amzn-Bedrock-Input-Token-Count", "12")
	r.Header.Set("X-Amzn-Bedrock-Output-Token-Count", "9")
	r.Header.Set("X-Amzn-Bedrock-Invocation-Latency", "412")
	return r
}
