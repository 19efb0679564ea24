package wire

import "net/http"

// Refusal is what a 4xx reply says is wrong with the request, where
// another route may serve it as it is: the prompt is longer than the
// model's context window (a model with a larger one may take it), or the
// credential is invalid, revoked or lacks permission (another key may
// take it). The zero Refusal says neither: the request itself is wrong,
// wherever it goes.
type Refusal uint8

// The refusals another route may cure.
const (
	// RefusedNothing: the reply says nothing another route cures.
	RefusedNothing Refusal = iota
	// ContextTooLong: the prompt does not fit the model's context window
	// (OpenAI's and Azure's context_length_exceeded, Anthropic's "prompt
	// is too long", Gemini's and Vertex's input token count, Bedrock's
	// "Input is too long" and "too many input tokens", OpenRouter's,
	// Mistral's, DeepSeek's and vLLM's "maximum context length").
	ContextTooLong
	// KeyRefused: the credential is invalid, revoked or lacks permission
	// (any 401; a 403 that says so; Gemini's 400 API_KEY_INVALID).
	KeyRefused
)

// contextWords are what a context-window refusal says, in the providers'
// words (matched ignoring case). Each is specific to the window: a 400 for
// a malformed request or a content filter says none of them.
var contextWords = [...]string{
	"context_length_exceeded",      // OpenAI, Azure, Groq: error.code
	"maximum context length",       // OpenAI's message; OpenRouter, Mistral, DeepSeek, vLLM
	"prompt is too long",           // Anthropic (also through Bedrock and Vertex)
	"input token count",            // Gemini, Vertex: "The input token count (N) exceeds …"
	"input is too long",            // Bedrock: ValidationException
	"too many input tokens",        // Bedrock
	"exceeds the context window",   // Anthropic, OpenAI Responses
	"context window of this model", // OpenAI Responses: "…exceeds the context window of this model"
}

// keyWords are what a 403 says when the credential is refused (its key
// lacks permission, or is not valid), in the providers' words.
var keyWords = [...]string{
	"permission_error",  // Anthropic
	"permission_denied", // Gemini, Vertex: status
	"api key",           // "Incorrect API key provided", "API key not valid"
	"api_key",           // "invalid_api_key", "API_KEY_INVALID"
	"authenticat",       // authentication_error, "not authenticated"
	"access denied",     // Azure: "Access denied due to invalid subscription key"
	"credential",        // "invalid credentials"
}

// invalidKeyWords are what Gemini's 400 for a key that is not valid says.
var invalidKeyWords = [...]string{"api_key_invalid", "api key not valid"}

// notKeyWords mark a 403 whose cause is not the credential: another key
// meets it too (a region the provider does not serve).
var notKeyWords = [...]string{"country", "region", "territory"}

// RefusalOf reads what a 4xx reply with status, headers h and a bounded
// body prefix says is wrong with the request (see Refusal). A status that
// is not a 4xx, or a body ReadableBody does not accept, says nothing; so
// does a 408, 425 or 429, which are not refusals. body may stop anywhere.
func RefusalOf(status int, h http.Header, body []byte) Refusal {
	switch {
	case status < 400 || status > 499:
		return RefusedNothing
	case status == http.StatusRequestTimeout, status == http.StatusTooEarly, status == http.StatusTooManyRequests:
		return RefusedNothing
	case status == http.StatusUnauthorized:
		return KeyRefused
	}
	if !ReadableBody(h.Get("Content-Type")) {
		return RefusedNothing
	}
	switch {
	case status == http.StatusForbidden:
		if containsAnyFold(body, keyWords[:]) && !containsAnyFold(body, notKeyWords[:]) {
			return KeyRefused
		}
	case containsAnyFold(body, contextWords[:]):
		return ContextTooLong
	case status == http.StatusBadRequest && containsAnyFold(body, invalidKeyWords[:]):
		return KeyRefused
	}
	return RefusedNothing
}

// containsAnyFold reports whether b contains one of the lower-case ASCII
// words, ignoring case.
func containsAnyFold(b []byte, words []string) bool {
	for _, w := range words {
		if indexLowerFold(b, w) >= 0 {
			return true
		}
	}
	return false
}

// indexLowerFold returns the index of the first instance of the lower-case
// ASCII word w in b, ignoring case, or -1. It allocates nothing.
func indexLowerFold(b []byte, w string) int {
	for i := 0; i+len(w) <= len(b); i++ {
		j := 0
		for j < len(w) && lowerASCII(b[i+j]) == w[j] {
			j++
		}
		if j == len(w) {
			return i
		}
	}
	return -1
}

// lowerASCII returns c in lower case, if it is an ASCII letter.
func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// prefillWords are what a 400 refusing a prefill (an assistant turn last)
// says, in the providers' words (matched ignoring case): each is specific
// to the prefill.
var prefillWords = [...]string{
	"does not support assistant message prefill",                  // Anthropic: Claude 4.6 and later, also on Bedrock and Vertex
	"final assistant content cannot end with trailing whitespace", // Anthropic
	"ending with a model turn",                                    // Gemini: "Requests ending with a model turn are not supported unless the last part is a function response"
	"invalid_prefill",                                             // failoverbench's wall: error.code
}

// PrefillRefused reports whether a reply with status, headers h and a
// bounded body prefix refuses a prefill: a 400 whose body says the model
// takes no assistant turn last (Anthropic's "This model does not support
// assistant message prefill. The conversation must end with a user
// message." and "final assistant content cannot end with trailing
// whitespace", Gemini's "Requests ending with a model turn are not
// supported unless the last part is a function response", failoverbench's
// invalid_prefill), and nothing else. body may stop anywhere. It is safe
// for concurrent use and keeps nothing.
func PrefillRefused(status int, h http.Header, body []byte) bool {
	return status == http.StatusBadRequest && ReadableBody(h.Get("Content-Type")) && containsAnyFold(body, prefillWords[:])
}
