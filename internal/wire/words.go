package wire

// This file names what each provider's error words mean: the code, type
// or status of an error event in a stream (and of an error body). Sources:
// Anthropic's errors page (invalid_request_error, authentication_error,
// billing_error, permission_error, not_found_error, request_too_large,
// rate_limit_error, api_error, timeout_error, overloaded_error); OpenAI's
// error codes and Responses' stream error codes (codex-rs codex-api
// src/sse/responses.rs); google.rpc.Code names and HTTP codes for Gemini.

// errorWordKind reports what an error's code, type or status means, if it
// is a word this package knows.
func errorWordKind(w string) (EventKind, bool) {
	switch w {
	case "overloaded_error", // Anthropic (529)
		"server_is_overloaded", "slow_down", // OpenAI Responses
		"overloaded", "service_unavailable_error",
		"UNAVAILABLE", "503", "529": // Gemini's status and codes
		return EventOverloaded, true
	case "api_error", "timeout_error", // Anthropic (500, 504)
		"server_error", "internal_error", "internal_server_error", // OpenAI
		"INTERNAL", "DEADLINE_EXCEEDED", "500", "502", "504": // Gemini
		return EventServerError, true
	case "rate_limit_error", // Anthropic (429)
		"rate_limit_exceeded", "requests", "tokens", "insufficient_quota", // OpenAI
		"RESOURCE_EXHAUSTED", "429": // Gemini
		return EventRateLimit, true
	case "invalid_request_error", "authentication_error", "permission_error",
		"not_found_error", "request_too_large", "billing_error", // Anthropic
		"invalid_prompt", "context_length_exceeded", // OpenAI
		"INVALID_ARGUMENT", "FAILED_PRECONDITION", "PERMISSION_DENIED",
		"UNAUTHENTICATED", "NOT_FOUND": // Gemini
		return EventOtherError, true
	}
	return 0, false
}

// Words that say waiting will not help, wherever they are found.
const (
	// spentQuota is OpenAI's code and type for a spent quota or an unpaid
	// bill (a 429 that no wait fixes).
	spentQuota = "insufficient_quota"
	// spendCap is Anthropic's error.details.error_code for the monthly
	// spend cap.
	spendCap = "enforced_spend_limit_reached"
	// unpaid is Anthropic's error type for a credit balance too low.
	unpaid = "billing_error"
	// perDay marks a Gemini quotaId counted per day: it resets at
	// midnight.
	perDay = "perday"
)
