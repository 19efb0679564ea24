package llmretry

import (
	"errors"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An attempt renders on one line, with what it sent, how it ended and what
// follows, and without credentials: the URL keeps its scheme, host and
// path (a query shows as "?…"), no header is shown, and an error's text
// is redacted.
func TestAttemptString(t *testing.T) {
	req, err := http.NewRequest(http.MethodPost, "https://user:PASSWORD@api.example.test/v1/chat?key=SECRET#frag", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer TOKEN")
	resp := &http.Response{StatusCode: 503, Status: "503 Service Unavailable"}
	failed := errors.New(`Post "https://api.example.test/v1/chat?key=SECRET": dial tcp: connection refused (Bearer TOKEN)`)
	const id = "00000000000000ff"
	cases := []struct {
		name string
		a    Attempt
		want string
	}{
		{"a status, retried", Attempt{ID: id, N: 1, Request: req, Response: resp, RetryIn: 2 * time.Second},
			"attempt 1 00000000000000ff POST https://api.example.test/v1/chat?…: 503 Service Unavailable (retry in 2s)"},
		{"an error, the last", Attempt{ID: id, N: 3, Request: req, Err: failed, Stop: ErrRetriesSpent},
			`attempt 3 00000000000000ff POST https://api.example.test/v1/chat?…: Post "https://api.example.test/v1/chat?…": dial tcp: connection refused (…) (stop: retries spent)`},
		{"a probe, held for a server wait", Attempt{ID: id, N: 2, Request: req, Response: resp, Probe: true, Held: true, RetryIn: time.Minute},
			"attempt 2 00000000000000ff POST https://api.example.test/v1/chat?…: 503 Service Unavailable [probe] (held: retry in 1m0s or later, when the provider is back)"},
		{"held", Attempt{ID: id, N: 2, Request: req, Response: resp, Held: true},
			"attempt 2 00000000000000ff POST https://api.example.test/v1/chat?…: 503 Service Unavailable (held: retry when the provider is back)"},
		{"Do's, without a request", Attempt{ID: id, N: 1, Err: errors.New("tool busy"), RetryIn: time.Second},
			"attempt 1 00000000000000ff: tool busy (retry in 1s)"},
		{"a success", Attempt{ID: id, N: 1, Request: req, Response: &http.Response{StatusCode: 200, Status: "200 OK"}},
			"attempt 1 00000000000000ff POST https://api.example.test/v1/chat?…: 200 OK"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.a.String()
			assert.Equal(t, c.want, got)
			for _, secret := range []string{"PASSWORD", "SECRET", "TOKEN", "user", "frag"} {
				assert.NotContains(t, got, secret)
			}
		})
	}
}

// Each attempt's ID is 16 random hex digits, its own.
func TestAttemptIDs(t *testing.T) {
	hex16 := regexp.MustCompile(`^[0-9a-f]{16}$`)
	seen := map[string]bool{}
	for range 1000 {
		id := newID()
		require.Regexp(t, hex16, id)
		seen[id] = true
	}
	assert.Len(t, seen, 1000, "no two alike")
}
