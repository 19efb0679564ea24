package llmretry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// signerError is a typed cause a middleware under the Transport returns.
type signerError struct{ reason string }

func (e *signerError) Error() string { return "signer: " + e.reason }

// A base that returns a Permanent error ends the call at once, first
// attempt or later; errors.Is and errors.As reach the cause through the
// *Exhausted.
func TestPermanentFromTheBaseStopsAtOnce(t *testing.T) {
	for _, failFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("after a 503 %v", failFirst), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cause := &signerError{reason: "key revoked"}
				calls := 0
				base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
					calls++
					if failFirst && calls == 1 {
						return &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: http.Header{}, Body: http.NoBody, Request: r}, nil
					}
					return nil, fmt.Errorf("middleware: %w", Permanent(cause))
				})
				var rec recorder
				start := time.Now()
				resp, err := post(t, mustNew(t, base, Policy{Waits: []time.Duration{time.Second, time.Second, time.Second}, OnAttempt: rec.on}), context.Background())
				assert.Nil(t, resp)
				want := 1
				if failFirst {
					want = 2
				}
				assert.Equal(t, want, calls)
				assert.Equal(t, time.Duration(want-1)*time.Second, time.Since(start))
				var ex *Exhausted
				require.ErrorAs(t, err, &ex)
				assert.Equal(t, want, ex.Attempts)
				assert.ErrorIs(t, err, cause)
				var se *signerError
				require.ErrorAs(t, err, &se)
				assert.Equal(t, "key revoked", se.reason)
				assert.Contains(t, err.Error(), "middleware: signer: key revoked", "Permanent adds nothing to the message")
				require.Len(t, rec.attempts, want)
				assert.Zero(t, rec.attempts[want-1].RetryIn)
			})
		})
	}
}

func TestPermanent(t *testing.T) {
	assert.NoError(t, Permanent(nil))
	assert.True(t, Permanent(nil) == nil, "an untyped nil, not a typed one")

	cause := errors.New("bad arguments")
	p := Permanent(cause)
	assert.Equal(t, "bad arguments", p.Error())
	assert.ErrorIs(t, p, cause)
	assert.True(t, isPermanent(p))
	assert.True(t, isPermanent(fmt.Errorf("tool: %w", p)), "still permanent when wrapped")
	assert.True(t, isPermanent(errors.Join(errors.New("x"), p)))
	assert.False(t, isPermanent(cause))
	assert.False(t, Retryable(nil, fmt.Errorf("tool: %w", p)))
}
