package testkit

import (
	"fmt"
	"net/http"
)

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
