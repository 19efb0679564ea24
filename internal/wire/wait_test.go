package wire

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// MessageWait reads the waits OpenAI's and Azure's messages state in
// words, and nothing else.
func TestMessageWait(t *testing.T) {
	for _, c := range []struct {
		msg  string
		want time.Duration
		ok   bool
	}{
		{"Please try again in 1.868s. Visit https://platform.openai.com", 1868 * time.Millisecond, true},
		{"Please try again in 20ms.", 20 * time.Millisecond, true},
		{"Please try again in 1m30s.", 90 * time.Second, true},
		{"Please try again in 6m0s", 6 * time.Minute, true},
		{"Please TRY AGAIN IN 20 seconds.", 20 * time.Second, true},
		{"Try again in 1.5 minutes", 90 * time.Second, true},
		{"try again in 872 ms", 872 * time.Millisecond, true},
		{"try again in 0s", 0, true},
		{"try again in 2 hours", 2 * time.Hour, true},
		{"Please try again later.", 0, false},
		{"Please try again in -5s.", 0, false},
		{"Please try again in 5 fortnights", 0, false},
		{"Please try again in 5", 0, false},
		{"Please try again in 99999999999999999999h", 0, false},
		{"Please retry in 38.8s.", 0, false},
		{"Please try again in 1.868s. Visit https://…", 1868 * time.Millisecond, true},
		{"Please try again in 20 seconds.", 20 * time.Second, true},
		{"Please retry after 33 seconds.", 33 * time.Second, true},
		{"Please retry after 86400 seconds.", 86400 * time.Second, true},
		{"Retry after a while.", 0, false},
		{"try again in -5s", 0, false},
		{"Rate limited.", 0, false},
		{"", 0, false},
	} {
		d, ok := MessageWait(c.msg)
		assert.Equal(t, c.ok, ok, "%q", c.msg)
		assert.Equal(t, c.want, d, "%q", c.msg)
	}
}
