package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Each provider's error words mean what its documentation says; a word no
// provider uses means nothing.
func TestErrorWordKind(t *testing.T) {
	for w, want := range map[string]EventKind{
		"overloaded_error":        EventOverloaded,  // Anthropic 529
		"server_is_overloaded":    EventOverloaded,  // OpenAI Responses
		"UNAVAILABLE":             EventOverloaded,  // Gemini
		"503":                     EventOverloaded,  // Gemini's code
		"api_error":               EventServerError, // Anthropic 500
		"server_error":            EventServerError, // OpenAI
		"DEADLINE_EXCEEDED":       EventServerError, // Gemini
		"rate_limit_error":        EventRateLimit,   // Anthropic 429
		"rate_limit_exceeded":     EventRateLimit,   // OpenAI
		"insufficient_quota":      EventRateLimit,   // OpenAI (final: ReadSignal)
		"RESOURCE_EXHAUSTED":      EventRateLimit,   // Gemini
		"invalid_request_error":   EventOtherError,  // Anthropic, OpenAI
		"billing_error":           EventOtherError,  // Anthropic (final)
		"context_length_exceeded": EventOtherError,  // OpenAI
		"PERMISSION_DENIED":       EventOtherError,  // Gemini
	} {
		got, ok := errorWordKind(w)
		assert.True(t, ok, w)
		assert.Equal(t, want, got, w)
	}
	for _, w := range []string{"", "Overloaded", "unavailable", "418", "new_kind_error"} {
		_, ok := errorWordKind(w)
		assert.False(t, ok, w)
	}
}
