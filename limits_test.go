package llmretry

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// amzDate is X-Amz-Date's layout.
const amzDate = "20060102T150405Z"

// signV4 stands in for aws-sdk-go-v2's signer: the signature covers the
// request's date, so the date is what ages.
func signV4(r *http.Request) {
	r.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261201/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=0123abcd")
	r.Header.Set("X-Amz-Date", time.Now().UTC().Format(amzDate))
}

// awsProvider fails with 502 until up, then answers; like AWS it refuses a
// request signed more than five minutes ago with 403
// InvalidSignatureException, and it records the age of every signature
// it received.
type awsProvider struct {
	up   time.Time
	mu   sync.Mutex
	ages []time.Duration
}

func (p *awsProvider) RoundTrip(r *http.Request) (*http.Response, error) {
	signed, err := time.Parse(amzDate, r.Header.Get("X-Amz-Date"))
	if err != nil {
		return nil, err
	}
	age := time.Since(signed)
	p.mu.Lock()
	p.ages = append(p.ages, age)
	p.mu.Unlock()
	reply := func(status int, typ string) (*http.Response, error) {
		return &http.Response{StatusCode: status, Status: http.StatusText(status), Request: r,
			Header: http.Header{"Content-Type": {"application/json"}, "X-Amzn-Errortype": {typ}},
			Body:   http.NoBody}, nil
	}
	switch {
	case age > 5*time.Minute:
		return reply(403, "InvalidSignatureException")
	case time.Now().Before(p.up):
		return reply(502, "BadGateway")
	}
	return reply(200, "")
}

// hostPolicy is the README's host schedule.
var hostPolicy = Policy{Waits: []time.Duration{15 * time.Second, 45 * time.Second, 2 * time.Minute, 4 * time.Minute}, Reserve: time.Minute}

// A request signed with AWS Signature Version 4 is never resent once its
// signature is more than five minutes old: with the host schedule and a
// 7-minute outage the Transport stops after the attempt at 3 min (the next
// would go at 7 min with a 7-minute-old signature) and returns that reply,
// so the SDK can sign again; no request reaches AWS with a stale
// signature.
func TestSigV4RequestNeverResentStale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		aws := &awsProvider{up: start.Add(7 * time.Minute)}
		var rec recorder
		p := hostPolicy
		p.OnAttempt = rec.on
		ctx := withDeadline(t, 8*time.Minute)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse", strings.NewReader(`{"messages":[]}`))
		require.NoError(t, err)
		signV4(req)
		resp, err := mustNew(t, aws, p).RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, 502, resp.StatusCode, "the last reply, for the SDK to sign again")
		assert.Equal(t, 3*time.Minute, time.Since(start), "no wait past the signature's life")
		assert.Equal(t, []time.Duration{0, 15 * time.Second, time.Minute, 3 * time.Minute}, aws.ages)
		for _, age := range aws.ages {
			assert.LessOrEqual(t, age, 5*time.Minute, "no stale signature sent")
		}
		assert.Equal(t, []time.Duration{15 * time.Second, 45 * time.Second, 2 * time.Minute, 0}, rec.retryIns())
		assert.Empty(t, resp.Header.Get("X-Should-Retry"), "not given up on the provider: a fresh signature may go")
	})
}

// A longer ride under SigV4 wraps the SDK call in Do: each attempt signs
// afresh, so the host schedule rides the whole 7-minute outage.
func TestSigV4LongerRideThroughDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		aws := &awsProvider{up: start.Add(7 * time.Minute)}
		ctx := withDeadline(t, 8*time.Minute)
		status, err := Do(ctx, hostPolicy, func(ctx context.Context) (int, error) {
			// What client.Converse does on each call: build, sign, send.
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse", strings.NewReader(`{}`))
			if err != nil {
				return 0, Permanent(err)
			}
			signV4(req)
			resp, err := aws.RoundTrip(req)
			if err != nil {
				return 0, err
			}
			resp.Body.Close()
			if resp.StatusCode >= 500 {
				return resp.StatusCode, fmt.Errorf("status %d", resp.StatusCode)
			}
			return resp.StatusCode, nil
		})
		require.NoError(t, err)
		assert.Equal(t, 200, status)
		assert.Equal(t, 7*time.Minute, time.Since(start))
		for _, age := range aws.ages {
			assert.Zero(t, age, "every attempt signed afresh")
		}
	})
}

// The limits: the deadline less the reserve, and a signature's expiry,
// whichever comes first.
func TestLimits(t *testing.T) {
	now := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	var none limits
	assert.Equal(t, stopNone, none.allows(now.Add(1000*time.Hour)))
	assert.True(t, none.before(time.Second).IsZero())
	l := limits{giveUp: now.Add(time.Minute), signed: now.Add(5 * time.Minute)}
	assert.Equal(t, stopNone, l.allows(now.Add(time.Minute)), "at the limit itself")
	assert.Equal(t, stopDeadline, l.allows(now.Add(time.Minute+1)))
	assert.Equal(t, now.Add(50*time.Second), l.before(10*time.Second))
	l = limits{giveUp: now.Add(10 * time.Minute), signed: now.Add(5 * time.Minute)}
	assert.Equal(t, stopSigned, l.allows(now.Add(6*time.Minute)))
	assert.Equal(t, now.Add(5*time.Minute), l.latest())
}
