package testkit

import (
	"fmt"
	"net/http"
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
