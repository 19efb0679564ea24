package llmretry

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
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

// ProbeFromContext marks, as it is sent, the attempt that Attempt.Probe
// reports afterwards, first attempts and retries alike; nothing else.
func TestProbeFromContextMarksTheProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(fail(502), 100*time.Millisecond, window{0, 40 * time.Second})
		var mu sync.Mutex
		sent := map[string]bool{} // attempt ID order is unknown at send: key by call and number
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			sent[r.Header.Get("X-Call")+"#"+strconv.Itoa(AttemptFromContext(r.Context()))] = ProbeFromContext(r.Context())
			mu.Unlock()
			return p.RoundTrip(r)
		})
		var recMu sync.Mutex
		reported := map[string]bool{}
		rt, err := NewCoordinated(base, Policy{Waits: []time.Duration{time.Second}, OnAttempt: func(a Attempt) {
			recMu.Lock()
			reported[a.Request.Header.Get("X-Call")+"#"+strconv.Itoa(a.N)] = a.Probe
			recMu.Unlock()
		}}, Coordination{ProbeInterval: 5 * time.Second})
		require.NoError(t, err)
		results := callMany(t, rt, p.start, 5, time.Second, 5*time.Minute, func(i int, req *http.Request) { req.Header.Set("X-Call", strconv.Itoa(i)) })
		for _, r := range results {
			require.NoError(t, r.err)
		}
		assert.Equal(t, reported, sent)
		probes := 0
		for _, probe := range sent {
			if probe {
				probes++
			}
		}
		assert.Greater(t, probes, 2, "an outage of 40 s is probed several times")
	})
	assert.False(t, ProbeFromContext(context.Background()))
	//lint:ignore SA1012 a nil context is handled
	assert.False(t, ProbeFromContext(nil))
}
