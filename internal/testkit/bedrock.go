package testkit

import (
	"net/http"
	"time"
)

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
