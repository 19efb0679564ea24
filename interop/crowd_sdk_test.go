package interop

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A coordinated Transport under openai-go and anthropic-sdk-go with the
// SDKs' own retries left on (as shipped): 20 calls each through a 2-minute
// outage (502 for OpenAI, 529 for Anthropic) all come through within
// seconds of the recovery, at one probe per interval; and when the outage
// outlasts the turn, the calls give up without sending, and the SDKs' own
// retries of the HeldError send no more than the key's probes.
func TestCoordinatedUnderSDKs(t *testing.T) {
	const calls = 20
	sdks := []struct {
		name string
		down testkit.Reply
		call func(ctx context.Context, rt *llmretry.Transport) error
	}{
		{"openai-go", testkit.BadGateway(), func(ctx context.Context, rt *llmretry.Transport) error {
			c := openAIClient(fakeOpenAIURL, rt)
			_, err := c.Chat.Completions.New(ctx, openAIParams())
			return err
		}},
		{"anthropic-sdk-go", testkit.AnthropicOverloaded(), func(ctx context.Context, rt *llmretry.Transport) error {
			c := anthropicClient(fakeAnthropicURL, rt)
			_, err := c.Messages.New(ctx, anthropicParams())
			return err
		}},
	}
	for _, sdk := range sdks {
		for _, tc := range []struct {
			name     string
			outage   time.Duration
			deadline time.Duration
		}{
			{"rides through", 2 * time.Minute, turnDeadline},
			{"gives up without sending", time.Hour, 3 * time.Minute},
		} {
			t.Run(sdk.name+"/"+tc.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					tl := newTimeline(sdk.down, tc.outage)
					tl.faultTime = 100 * time.Millisecond
					rt, err := llmretry.NewCoordinated(tl, hostPolicy(), coordination.Config{})
					require.NoError(t, err)
					errs := make([]error, calls)
					done := make([]time.Duration, calls)
					var wg sync.WaitGroup
					for i := range calls {
						wg.Go(func() {
							ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
							defer cancel()
							errs[i] = sdk.call(ctx, rt)
							done[i] = time.Since(tl.start)
						})
					}
					wg.Wait()
					at := tl.attempts()
					// Each call's first attempt (and the SDK's own retries
					// of the first 5xx, while the key was not yet known to
					// be down), one probe per 4 s at most, and each call's
					// attempt after the recovery.
					probes := int(min(tc.outage, tc.deadline)/(defaultProbeInterval*4/5)) + 1
					if tc.outage < tc.deadline {
						for i, err := range errs {
							require.NoError(t, err, "call %d", i)
							assert.LessOrEqual(t, done[i]-tc.outage, 10*time.Second, "call %d: recovery lag", i)
						}
						assert.LessOrEqual(t, len(at), 3*calls+probes, "attempts: %v", at)
						return
					}
					// A call that can wait no longer ends with a HeldError
					// without sending. The SDK retries that error as a
					// new call, and a new call is sent only as the key's
					// probe, when one is due: so after the calls' deadline
					// minus reserve, at most one attempt per probe interval
					// reaches the provider, and an SDK error is either the
					// HeldError or that probe's own 5xx.
					for i, err := range errs {
						require.Error(t, err, "call %d", i)
						var held *coordination.HeldError
						if errors.As(err, &held) {
							assert.ErrorIs(t, err, llmretry.ErrNoTimeLeft, "call %d: the give-up says why through the SDK", i)
							continue
						}
						assert.Regexp(t, `5\d\d`, err.Error(), "call %d: neither a HeldError nor the probe's answer", i)
						if gave := llmretry.GaveUp(sdkHTTPResponse(err)); assert.NotNil(t, gave, "call %d: the probe's answer carries its record", i) {
							assert.Error(t, gave.Reason)
						}
					}
					giveUp := tc.deadline - hostPolicy().Reserve
					var late []time.Duration
					for _, a := range at {
						if a >= giveUp {
							late = append(late, a)
						}
					}
					for j := 1; j < len(late); j++ {
						assert.GreaterOrEqual(t, late[j]-late[j-1], defaultProbeInterval*4/5, "after the give-up only probes: %v", late)
					}
					assert.LessOrEqual(t, len(at), 3*calls+probes, "attempts: %v", at)
					t.Logf("%d calls, %d attempts, all gave up by %v", calls, len(at), slicesMax(done))
				})
			})
		}
	}
}

// slicesMax returns the largest of ds.
func slicesMax(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}
