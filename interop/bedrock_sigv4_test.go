package interop

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// AWS refuses a SigV4 signature older than this.
const sigV4MaxAge = 5 * time.Minute

// amzDate is SigV4's X-Amz-Date layout.
const amzDate = "20060102T150405Z"

// sigV4Age returns how old the signature of what reached the provider was
// when it arrived, or false if the request was not signed.
func sigV4Age(c testkit.Call) (time.Duration, bool) {
	signed, err := time.Parse(amzDate, c.Header.Get("X-Amz-Date"))
	if err != nil {
		return 0, false
	}
	return c.At.Sub(signed), true
}

// sigV4Outage is a Bedrock that answers 502 until down has passed since
// start, and then the answer; like AWS, it refuses with 403
// InvalidSignatureException any request whose signature is more than 5
// minutes older than its clock, or unsigned.
func sigV4Outage(start time.Time, down time.Duration) *testkit.Provider {
	return testkit.NewProviderFunc(func(c testkit.Call, _ int) testkit.Reply {
		signed, err := time.Parse(amzDate, c.Header.Get("X-Amz-Date"))
		if err != nil || c.At.Sub(signed) > sigV4MaxAge {
			return testkit.BedrockSignatureExpired(signed, c.At)
		}
		if c.At.Sub(start) < down {
			return testkit.BadGateway()
		}
		return testkit.BedrockConverse("Hello! How can I help?")
	})
}

// The host schedule of a long agent turn: Waits 15 s, 45 s, 2 min, 4 min,
// a 1-minute reserve, an 8-minute deadline.
var hostSchedule = llmretry.Policy{
	Waits:   []time.Duration{15 * time.Second, 45 * time.Second, 2 * time.Minute, 4 * time.Minute},
	Reserve: time.Minute,
}

const hostDeadline = 8 * time.Minute

// A Transport under the SDK resends the request the SDK signed. Through a
// 7-minute outage on the host schedule, its fifth attempt would go at
// 7 min with the signature made at 0, which AWS refuses (403
// InvalidSignatureException): llmretry must not send it, and return the
// last 502 instead. The first four attempts (0, 15 s, 1 min, 3 min) carry
// a signature at most 3 minutes old.
//
// This depends on llmretry refusing to resend a SigV4-signed request whose
// X-Amz-Date is more than 5 minutes old; without that it fails, with a
// stale fifth attempt and a 403 reaching the caller.
func TestBedrockSigV4NeverResentStale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := sigV4Outage(time.Now(), 7*time.Minute)
		client := bedrockClient(retrying(t, prov, hostSchedule), noAWSRetries)
		ctx, cancel := context.WithTimeout(context.Background(), hostDeadline)
		defer cancel()

		_, err := client.Converse(ctx, bedrockConverseInput())
		require.Error(t, err, "the outage outlasts what one signature can ride")

		calls := prov.Received()
		for i, c := range calls {
			age, signed := sigV4Age(c)
			require.True(t, signed, "attempt %d is signed", i+1)
			assert.LessOrEqual(t, age, sigV4MaxAge, "attempt %d reached the provider with a stale signature (%v old)", i+1, age)
		}
		assert.Equal(t, 4, len(calls), "the attempts at 0, 15 s, 1 min and 3 min; none at 7 min")
		var re *awshttp.ResponseError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, 502, re.HTTPStatusCode(), "the last 502, not AWS's 403 for an expired signature")
	})
}

// The ride that outlasts a signature: llmretry.Do around client.Converse.
// Each Do attempt is a fresh SDK call, which signs again, so every request
// carries a fresh X-Amz-Date and the whole 7-minute outage is ridden on
// the host schedule: calls at 0, 15 s, 1 min, 3 min and 7 min, the last
// answered. The client's own Transport passes requests straight through
// inside Do (no multiplied attempts). A response llmretry would not retry
// (a 400, say) is marked Permanent so Do stops at once.
func TestBedrockDoResignsEachAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		prov := sigV4Outage(start, 7*time.Minute)
		client := bedrockClient(retrying(t, prov, hostSchedule), noAWSRetries)
		ctx, cancel := context.WithTimeout(context.Background(), hostDeadline)
		defer cancel()
		var rec recorder
		policy := hostSchedule
		policy.OnAttempt = rec.on

		out, err := llmretry.Do(ctx, policy, func(ctx context.Context) (*bedrockruntime.ConverseOutput, error) {
			return converseRetryable(ctx, client, bedrockConverseInput())
		})
		require.NoError(t, err)
		require.NotNil(t, out)

		calls := prov.Received()
		var at []time.Duration
		for i, c := range calls {
			age, signed := sigV4Age(c)
			require.True(t, signed)
			assert.Zero(t, age, "attempt %d signed when it was sent", i+1)
			at = append(at, c.At.Sub(start))
		}
		assert.Equal(t, []time.Duration{0, 15 * time.Second, time.Minute, 3 * time.Minute, 7 * time.Minute}, at)
		assert.Len(t, rec.attempts, 5, "one Do attempt per provider attempt")
		assert.Equal(t, []string{"attempt=1; max=1"}, slices.Compact(prov.HeaderValues("Amz-Sdk-Request")), "every request is a first SDK attempt")
	})

	t.Run("a 400 is not retried", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.BedrockError(400, "ValidationException", "The provided model identifier is invalid."))
			client := bedrockClient(retrying(t, prov, hostSchedule), noAWSRetries)
			_, err := llmretry.Do(context.Background(), hostSchedule, func(ctx context.Context) (*bedrockruntime.ConverseOutput, error) {
				return converseRetryable(ctx, client, bedrockConverseInput())
			})
			var ex *llmretry.Exhausted
			require.ErrorAs(t, err, &ex)
			assert.Equal(t, 1, ex.Attempts)
			var re *awshttp.ResponseError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, 400, re.HTTPStatusCode())
			assert.Equal(t, 1, prov.Attempts())
		})
	})
}

// converseRetryable calls Converse and marks an error llmretry would not
// retry (a response whose status is not retryable) with llmretry.Permanent,
// so that llmretry.Do gives up at once on it.
func converseRetryable(ctx context.Context, client *bedrockruntime.Client, in *bedrockruntime.ConverseInput) (*bedrockruntime.ConverseOutput, error) {
	out, err := client.Converse(ctx, in)
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.Response != nil && !llmretry.Retryable(re.Response.Response, nil) {
		return nil, llmretry.Permanent(err)
	}
	return out, err
}
