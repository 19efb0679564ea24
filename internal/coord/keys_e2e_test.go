package coord_test

// Provider keys (keys.go) through a coordinated Transport: a key down
// holds no other key's calls.

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/coordination"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCoordinatedKeysAreHostAndCredential(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Key A is refused for ten minutes; key B works.
		var mu sync.Mutex
		var sent []string
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			sent = append(sent, req.URL.Host+" "+req.Header.Get("Authorization"))
			mu.Unlock()
			if req.Header.Get("Authorization") == "Bearer A" && req.URL.Host == "api.example.com" {
				return nil, refused.err
			}
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
		})
		rt, err := llmretry.NewCoordinated(base, llmretry.Policy{Waits: []time.Duration{time.Minute}}, coordination.Config{})
		require.NoError(t, err)
		ctxA, cancelA := context.WithCancel(context.Background())
		doneA := make(chan error)
		go func() {
			req := mustRequest(t, ctxA)
			req.Header.Set("Authorization", "Bearer A")
			_, err := rt.RoundTrip(req)
			doneA <- err
		}()
		defer func() {
			cancelA()
			assert.ErrorIs(t, <-doneA, context.Canceled, "key A's call was still held")
		}()
		synctest.Wait() // key A's call was refused and is held: the key is down
		for _, c := range []struct{ host, auth string }{
			{"api.example.com", "Bearer B"},   // another credential
			{"other.example.com", "Bearer A"}, // another host
			{"api.example.com", ""},           // no credential
		} {
			req := mustRequest(t, context.Background())
			req.URL.Host = c.host
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			start := time.Now()
			resp, err := rt.RoundTrip(req)
			require.NoError(t, err, c.host+" "+c.auth)
			resp.Body.Close()
			assert.Equal(t, time.Duration(0), time.Since(start), "%s %s is not held by key A", c.host, c.auth)
		}
		synctest.Wait()
		mu.Lock()
		assert.Len(t, sent, 4, "%v", sent)
		mu.Unlock()

		// What makes a key, request by request: TestKeysAreHostAndCredential
		// (keys_test.go).
	})
}
