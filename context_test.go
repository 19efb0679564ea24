package llmretry

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAttemptFromContextNumbersEachAttempt: the base sees 1, 2, 3 on the
// attempts of one call, and 0 outside any llmretry call.
func TestAttemptFromContextNumbersEachAttempt(t *testing.T) {
	var mu sync.Mutex
	var seen []int
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		seen = append(seen, AttemptFromContext(r.Context()))
		mu.Unlock()
		status := 503
		if len(seen) == 3 {
			status = 200
		}
		return &http.Response{StatusCode: status, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
	})
	rt, err := New(base, Policy{Waits: []time.Duration{0, 0}})
	require.NoError(t, err)
	req, _ := http.NewRequest("POST", "https://api.example.com/v1", strings.NewReader(`{}`))
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, []int{1, 2, 3}, seen)
	assert.Equal(t, 0, AttemptFromContext(context.Background()))
}
