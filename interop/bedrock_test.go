package interop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	brtypes "github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/aws/smithy-go"
	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// drainConverseStream reads a ConverseStream reply to its end and returns
// the stream's error.
func drainConverseStream(out *bedrockruntime.ConverseStreamOutput) error {
	_, err := converseStreamText(out)
	return err
}

// converseStreamText reads a ConverseStream reply to its end and returns
// the text of its deltas and the stream's error.
func converseStreamText(out *bedrockruntime.ConverseStreamOutput) (string, error) {
	stream := out.GetStream()
	defer stream.Close()
	var text strings.Builder
	for ev := range stream.Events() {
		if d, ok := ev.(*brtypes.ConverseStreamOutputMemberContentBlockDelta); ok {
			if t, ok := d.Value.Delta.(*brtypes.ContentBlockDeltaMemberText); ok {
				text.WriteString(t.Value)
			}
		}
	}
	return text.String(), stream.Err()
}

// drainInvokeStream reads an InvokeModelWithResponseStream reply to its end
// and returns the stream's error.
func drainInvokeStream(out *bedrockruntime.InvokeModelWithResponseStreamOutput) error {
	_, err := invokeStreamChunks(out)
	return err
}

// invokeStreamChunks reads an InvokeModelWithResponseStream reply to its
// end and returns the model events it carried and the stream's error.
func invokeStreamChunks(out *bedrockruntime.InvokeModelWithResponseStreamOutput) ([]string, error) {
	stream := out.GetStream()
	defer stream.Close()
	var chunks []string
	for ev := range stream.Events() {
		if c, ok := ev.(*brtypes.ResponseStreamMemberChunk); ok {
			chunks = append(chunks, string(c.Value.Bytes))
		}
	}
	return chunks, stream.Err()
}

// bedrockOp is one Bedrock Runtime operation, called through a client and
// reduced to its text or its error.
type bedrockOp struct {
	name   string
	path   string        // the request path, as the provider sees it
	answer testkit.Reply // the provider's success in this operation's format
	call   func(ctx context.Context, c *bedrockruntime.Client) (string, error)
}

// bedrockOps are the two request/response operations.
func bedrockOps() []bedrockOp {
	return []bedrockOp{
		{
			name: "Converse", path: "/model/" + bedrockModel + "/converse", answer: testkit.BedrockConverse("Hello! How can I help?"),
			call: func(ctx context.Context, c *bedrockruntime.Client) (string, error) {
				out, err := c.Converse(ctx, bedrockConverseInput())
				if err != nil {
					return "", err
				}
				msg, ok := out.Output.(*brtypes.ConverseOutputMemberMessage)
				if !ok || len(msg.Value.Content) == 0 {
					return "", fmt.Errorf("no message in %T", out.Output)
				}
				text, _ := msg.Value.Content[0].(*brtypes.ContentBlockMemberText)
				if text == nil {
					return "", fmt.Errorf("no text in %T", msg.Value.Content[0])
				}
				return text.Value, nil
			},
		},
		{
			name: "InvokeModel", path: "/model/" + bedrockModel + "/invoke", answer: testkit.BedrockInvoke("Hello! How can I help?"),
			call: func(ctx context.Context, c *bedrockruntime.Client) (string, error) {
				out, err := c.InvokeModel(ctx, bedrockInvokeInput())
				if err != nil {
					return "", err
				}
				var msg struct {
					Content []struct{ Text string } `json:"content"`
				}
				if err := json.Unmarshal(out.Body, &msg); err != nil || len(msg.Content) == 0 {
					return "", fmt.Errorf("no message in %q: %v", out.Body, err)
				}
				return msg.Content[0].Text, nil
			},
		},
	}
}

// bedrockInvokeInput is an InvokeModel request with an Anthropic body.
func bedrockInvokeInput() *bedrockruntime.InvokeModelInput {
	return &bedrockruntime.InvokeModelInput{
		ModelId: aws.String(bedrockModel), ContentType: aws.String("application/json"), Accept: aws.String("application/json"),
		Body: []byte(bedrockInvokeBody),
	}
}

// bedrockInvokeStreamInput is bedrockInvokeInput for
// InvokeModelWithResponseStream.
func bedrockInvokeStreamInput() *bedrockruntime.InvokeModelWithResponseStreamInput {
	in := bedrockInvokeInput()
	return &bedrockruntime.InvokeModelWithResponseStreamInput{ModelId: in.ModelId, ContentType: in.ContentType, Accept: in.Accept, Body: in.Body}
}

// aws-sdk-go-v2 bedrockruntime under llmretry with the SDK's retryer off
// (aws.NopRetryer): a 502 from the edge, a 429 ThrottlingException, then
// the answer, after the schedule's 5 s and 10 s. The SDK sets no GetBody
// (testdata/clients/bedrock_*.http), so llmretry keeps one in-memory copy
// of the body for the retries. The SDK signs once, and
// llmretry resends the signed request as it is: the same X-Amz-Date and
// Authorization on every attempt, and the SDK's own attempt header stays
// at attempt=1; max=1.
func TestBedrockRidesOutOutage(t *testing.T) {
	for _, op := range bedrockOps() {
		t.Run(op.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(testkit.BadGateway(), testkit.BedrockThrottled(), op.answer)
				var rec recorder
				rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{5 * time.Second, 10 * time.Second}, OnAttempt: rec.on})
				client := bedrockClient(rt, noAWSRetries)

				start := time.Now()
				text, err := op.call(context.Background(), client)
				require.NoError(t, err)
				assert.Equal(t, "Hello! How can I help?", text)

				assert.Equal(t, 3, prov.Attempts(), "exactly the policy's attempts")
				assert.Equal(t, []time.Duration{5 * time.Second, 10 * time.Second}, prov.Gaps())
				assert.Equal(t, 15*time.Second, time.Since(start))
				assert.Equal(t, []int{502, 429, 200}, rec.statuses())
				assert.Equal(t, []string{"attempt=1; max=1", "attempt=1; max=1", "attempt=1; max=1"}, prov.HeaderValues("Amz-Sdk-Request"))
				calls := prov.Received()
				for _, c := range calls {
					assert.Equal(t, op.path, c.Path)
					assert.Equal(t, calls[0].Body, c.Body, "every attempt carries the whole body")
					assert.Equal(t, calls[0].Header.Get("X-Amz-Date"), c.Header.Get("X-Amz-Date"), "signed once, at the first attempt")
					assert.Equal(t, calls[0].Header.Get("Authorization"), c.Header.Get("Authorization"))
				}
				assert.True(t, strings.HasPrefix(calls[0].Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential="+dummyAWSKeyID+"/"), "SigV4")
			})
		})
	}
}

// ConverseStream and InvokeModelWithResponseStream are marked as streams
// only by their paths (/converse-stream, /invoke-with-response-stream):
// the body is the same as the non-streaming call's, and there is no
// Accept header (bedrock_*_stream.http in testdata/clients). llmretry
// knows these paths: a 503 before the stream starts is the caller's, sent
// once unless RetryStreams is set. The stream itself, once started, is
// never resent.
func TestBedrockStream(t *testing.T) {
	parts := []string{"Hel", "lo", "! How", " can I", " help?"}
	ops := []struct {
		name   string
		path   string
		stream testkit.Reply
		call   func(ctx context.Context, c *bedrockruntime.Client) (string, error)
	}{
		{
			name: "ConverseStream", path: "/model/" + bedrockModel + "/converse-stream", stream: bedrockConverseStream(parts...),
			call: func(ctx context.Context, c *bedrockruntime.Client) (string, error) {
				out, err := c.ConverseStream(ctx, bedrockConverseStreamInput())
				if err != nil {
					return "", err
				}
				return converseStreamText(out)
			},
		},
		{
			name: "InvokeModelWithResponseStream", path: "/model/" + bedrockModel + "/invoke-with-response-stream", stream: bedrockInvokeStream(parts...),
			call: func(ctx context.Context, c *bedrockruntime.Client) (string, error) {
				out, err := c.InvokeModelWithResponseStream(ctx, bedrockInvokeStreamInput())
				if err != nil {
					return "", err
				}
				chunks, err := invokeStreamChunks(out)
				var text strings.Builder
				for _, ch := range chunks {
					var ev struct {
						Delta struct{ Text string } `json:"delta"`
					}
					if json.Unmarshal([]byte(ch), &ev) == nil {
						text.WriteString(ev.Delta.Text)
					}
				}
				return text.String(), err
			},
		},
	}
	for _, op := range ops {
		t.Run(op.name+"/succeeds", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(op.stream)
				text, err := op.call(context.Background(), bedrockClient(retrying(t, prov, llmretry.Policy{}), noAWSRetries))
				require.NoError(t, err)
				assert.Equal(t, "Hello! How can I help?", text, "every event arrived")
				require.Equal(t, 1, prov.Attempts())
				assert.Equal(t, op.path, prov.Received()[0].Path)
			})
		})

		t.Run(op.name+"/503 first: sent once by default", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(testkit.BedrockUnavailable(), op.stream)
				rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}})
				_, err := op.call(context.Background(), bedrockClient(rt, noAWSRetries))
				require.Error(t, err)
				assert.True(t, llmretry.IsStream(prov.Received()[0].Request(t)))
				assert.Equal(t, 1, prov.Attempts(), "the caller got the first attempt's 503")
			})
		})

		t.Run(op.name+"/503 first, RetryStreams: retried", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(testkit.BedrockUnavailable(), op.stream)
				rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: true})
				text, err := op.call(context.Background(), bedrockClient(rt, noAWSRetries))
				require.NoError(t, err, "the retry got the stream")
				assert.Equal(t, "Hello! How can I help?", text)
				assert.Equal(t, 2, prov.Attempts())
				assert.Equal(t, []time.Duration{2 * time.Second}, prov.Gaps())
			})
		})
	}
}

// What the caller of bedrockruntime sees once llmretry gives up (k = 2,
// NopRetryer, so 3 attempts): always a *smithy.OperationError. For a
// response it wraps *awshttp.ResponseError with the status and, when the
// body is Bedrock's JSON, the modelled exception (*types.ThrottlingException,
// *types.ServiceUnavailableException); an edge's HTML page fails to
// deserialize. For a failed connection the chain is kept: errors.As
// reaches *llmretry.Exhausted and errors.Is the cause.
func TestBedrockExhausted(t *testing.T) {
	tests := []struct {
		name    string
		failure testkit.Reply
		status  int
		check   func(t *testing.T, err error)
	}{
		{
			name: "503 ServiceUnavailableException", failure: testkit.BedrockUnavailable(), status: 503,
			check: func(t *testing.T, err error) {
				var ex *brtypes.ServiceUnavailableException
				require.ErrorAs(t, err, &ex)
				assert.Equal(t, "Bedrock is unable to process your request.", ex.ErrorMessage())
			},
		},
		{
			name: "429 ThrottlingException", failure: testkit.BedrockThrottled(), status: 429,
			check: func(t *testing.T, err error) {
				var ex *brtypes.ThrottlingException
				require.ErrorAs(t, err, &ex)
				assert.Equal(t, "ThrottlingException", ex.ErrorCode())
			},
		},
		{
			name: "502 HTML from the edge", failure: testkit.BadGateway(), status: 502,
			check: func(t *testing.T, err error) {
				var apiErr smithy.APIError
				assert.False(t, errors.As(err, &apiErr), "no modelled error: the body is not Bedrock's JSON")
				assert.Contains(t, err.Error(), "deserialization failed")
			},
		},
		{
			name: "connection refused", failure: testkit.Refused(),
			check: func(t *testing.T, err error) {
				var ex *llmretry.Exhausted
				require.ErrorAs(t, err, &ex)
				assert.Equal(t, layerK+1, ex.Attempts)
				assert.ErrorIs(t, err, syscall.ECONNREFUSED)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(tt.failure)
				_, err := bedrockClient(retrying(t, prov, layerPolicy()), noAWSRetries).Converse(context.Background(), bedrockConverseInput())
				require.Error(t, err)
				var opErr *smithy.OperationError
				require.ErrorAs(t, err, &opErr)
				assert.Equal(t, "Converse", opErr.OperationName)
				if tt.status != 0 {
					var re *awshttp.ResponseError
					require.ErrorAs(t, err, &re)
					assert.Equal(t, tt.status, re.HTTPStatusCode())
					assert.Equal(t, "false", re.Response.Header.Get("X-Should-Retry"), "llmretry's mark, which the SDK ignores")
					assert.False(t, errors.As(err, new(*llmretry.Exhausted)), "a response is never turned into an llmretry error")
				}
				tt.check(t, err)
				assert.Equal(t, layerK+1, prov.Attempts())
			})
		})
	}
}

// The SDK's retryer set-ups under llmretry (k = 2) against a provider
// that always fails: aws.NopRetryer and RetryMaxAttempts: 1 leave exactly
// llmretry's 3 attempts; the default standard retryer (3 attempts) starts
// a fresh llmretry call for each of its own, 3 × 3 = 9, for responses and
// failed connections alike (it ignores X-Should-Retry). Its attempt header
// shows the nesting, and its X-Amz-Date that the SDK signs each of its
// attempts afresh.
func TestBedrockRetryerSetups(t *testing.T) {
	setups := []struct {
		name string
		opts []func(*bedrockruntime.Options)
		want int
		sdk  []string // Amz-Sdk-Request per provider attempt
	}{
		{"Retryer: aws.NopRetryer{}", []func(*bedrockruntime.Options){noAWSRetries}, layerK + 1,
			slices.Repeat([]string{"attempt=1; max=1"}, 3)},
		{"RetryMaxAttempts: 1", []func(*bedrockruntime.Options){func(o *bedrockruntime.Options) { o.RetryMaxAttempts = 1 }}, layerK + 1,
			slices.Repeat([]string{"attempt=1; max=1"}, 3)},
		{"default retryer", nil, 3 * (layerK + 1),
			slices.Concat(slices.Repeat([]string{"attempt=1; max=3"}, 3), slices.Repeat([]string{"attempt=2; max=3"}, 3), slices.Repeat([]string{"attempt=3; max=3"}, 3))},
	}
	for _, s := range setups {
		for _, failure := range []struct {
			name string
			r    testkit.Reply
		}{{"503", testkit.BedrockUnavailable()}, {"conn refused", testkit.Refused()}} {
			t.Run(s.name+"/"+failure.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					prov := testkit.NewProvider(failure.r)
					_, err := bedrockClient(retrying(t, prov, layerPolicy()), s.opts...).Converse(context.Background(), bedrockConverseInput())
					require.Error(t, err)
					assert.Equal(t, s.want, prov.Attempts())
					assert.Equal(t, s.sdk, prov.HeaderValues("Amz-Sdk-Request"))
					// The SDK signs each of its attempts afresh; llmretry's
					// resends repeat the signature they were given.
					assert.Len(t, slices.Compact(prov.HeaderValues("X-Amz-Date")), len(slices.Compact(slices.Clone(s.sdk))), "one signing time per SDK attempt")
				})
			})
		}
	}
}

// With a deadline, the default retryer spends llmretry's reserve. A 10-s
// deadline, a 3-s Reserve, Waits 1 s, 2 s (the last repeating), and a 503
// that takes 1 s to come back: llmretry alone (NopRetryer) makes 3
// attempts and returns at 6 s with 4 s left, more than the reserve. Under
// the default retryer the first llmretry call ends the same way; then the
// SDK waits its own jitter (under 50 ms, then under 100 ms) and starts two
// more llmretry calls, whose first attempts llmretry always sends: 5
// attempts, returning after 8 s with under 2 s left, less than the
// reserve.
func TestBedrockDefaultRetryerSpendsTheReserve(t *testing.T) {
	const (
		deadline = 10 * time.Second
		reserve  = 3 * time.Second
	)
	policy := llmretry.Policy{Waits: []time.Duration{time.Second, 2 * time.Second}, Reserve: reserve}
	slow503 := testkit.BedrockUnavailable().After(time.Second)

	// ride returns the provider's attempts and the time left before the
	// deadline when Converse returned.
	ride := func(t *testing.T, opts ...func(*bedrockruntime.Options)) (int, time.Duration) {
		prov := testkit.NewProvider(slow503)
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		_, err := bedrockClient(retrying(t, prov, policy), opts...).Converse(ctx, bedrockConverseInput())
		left := time.Until(must(ctx.Deadline()))
		var ex *brtypes.ServiceUnavailableException
		require.ErrorAs(t, err, &ex, "the last 503, not the deadline")
		return prov.Attempts(), left
	}

	synctest.Test(t, func(t *testing.T) {
		n, left := ride(t, noAWSRetries)
		t.Logf("NopRetryer: %d attempts, %v left", n, left)
		assert.Equal(t, 3, n)
		assert.Equal(t, 4*time.Second, left, "at least the reserve left")
	})
	synctest.Test(t, func(t *testing.T) {
		n, left := ride(t)
		t.Logf("default retryer: %d attempts, %v left", n, left)
		assert.Equal(t, 5, n, "3 from the first llmretry call, 1 from each of the SDK's retries")
		assert.Less(t, left, reserve, "returned inside the reserve")
		assert.Greater(t, left, 2*time.Second-150*time.Millisecond, "the SDK's jitter for a 503: under 50 ms, then under 100 ms")
	})
}

// must returns v, dropping ok (for a context known to have a deadline).
func must[T any](v T, _ bool) T { return v }

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
		assert.Len(t, rec.All(), 5, "one Do attempt per provider attempt")
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
