package llmretry

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		p     Policy
		field string
	}{
		{Policy{Waits: []time.Duration{time.Second, -1}}, "Waits[1]"},
		{Policy{Reserve: -time.Second}, "Reserve"},
		{Policy{MaxRetries: -1}, "MaxRetries"},
		{Policy{MaxWait: -1}, "MaxWait"},
		{Policy{MaxRetryAfter: -1}, "MaxRetryAfter"},
	}
	for _, c := range cases {
		err := c.p.Validate()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "Policy."+c.field)
		rt, err := New(nil, c.p)
		assert.Nil(t, rt)
		assert.ErrorContains(t, err, c.field)
	}
	assert.NoError(t, Policy{}.Validate())
	assert.NoError(t, Policy{Waits: []time.Duration{0, time.Second}, MaxRetries: 3}.Validate())
}

// Validate refuses negative bounds.
func TestValidateTimeouts(t *testing.T) {
	for _, p := range []Policy{{AttemptTimeout: -1}, {FirstEventTimeout: -1}, {StreamIdleTimeout: -1}} {
		err := p.Validate()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "Timeout is negative")
		_, err = New(nil, p)
		assert.Error(t, err)
	}
	assert.NoError(t, Policy{AttemptTimeout: time.Second, FirstEventTimeout: time.Second, StreamIdleTimeout: time.Second}.Validate())
}

// The zero Policy retries under an http.Client's 30-s Timeout (and a 30-s
// context): a reserve of 60 s would have left no room for any retry.
func TestZeroPolicyRetriesUnderAShortDeadline(t *testing.T) {
	for _, viaContext := range []bool{false, true} {
		t.Run(map[bool]string{false: "client timeout", true: "context deadline"}[viaContext], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(testkit.Fail(502), testkit.Fail(502), testkit.OK())
				client := &http.Client{Transport: mustNew(t, prov, Policy{})}
				ctx := context.Background()
				if viaContext {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
					defer cancel()
				} else {
					client.Timeout = 30 * time.Second
				}
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, testURL, strings.NewReader(`{"model":"m"}`))
				require.NoError(t, err)
				resp, err := client.Do(req)
				require.NoError(t, err)
				assert.Equal(t, 200, resp.StatusCode)
				assert.Equal(t, `{"answer":42}`, bodyOf(t, resp))
				assert.Equal(t, 3, prov.Attempts())
			})
		})
	}
}

// The zero Reserve scales with the deadline: a fifth of the time left,
// never more than defaultReserve; an explicit Reserve keeps its meaning.
func TestReserveFor(t *testing.T) {
	cases := []struct {
		reserve, left, want time.Duration
	}{
		{0, 30 * time.Second, 6 * time.Second},
		{0, 2 * time.Minute, 24 * time.Second},
		{0, 5 * time.Minute, defaultReserve},
		{0, time.Hour, defaultReserve},
		{0, -time.Second, 0},
		{10 * time.Second, 30 * time.Second, 10 * time.Second},
		{2 * time.Minute, 30 * time.Second, 2 * time.Minute},
	}
	for _, c := range cases {
		p := Policy{Reserve: c.reserve}
		assert.Equal(t, c.want, p.reserveFor(c.left), "Reserve %v, %v left", c.reserve, c.left)
	}
}

// The default reserve is a share of the time left when the call starts,
// not when its first attempt fails: of a 30-s deadline 6 s are kept, so
// after a first attempt that took 23 s a retry 2 s later does not fit.
func TestDefaultReserveCountsFromTheStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &silentThen{silent: 1}
		ctx := withDeadline(t, 30*time.Second)
		_, err := post(t, mustNew(t, base, Policy{Waits: []time.Duration{2 * time.Second}, AttemptTimeout: 23 * time.Second}), ctx)
		assert.ErrorIs(t, err, ErrNoTimeLeft)
		starts, _ := base.attempts()
		assert.Len(t, starts, 1)

		base = &silentThen{silent: 1}
		resp, err := post(t, mustNew(t, base, Policy{Waits: []time.Duration{time.Second}, AttemptTimeout: 23 * time.Second}), withDeadline(t, 30*time.Second))
		require.NoError(t, err, "at 24 s: just fits")
		resp.Body.Close()
	})
}

// Validate names every field it refuses, not only the first.
func TestValidateNamesEveryField(t *testing.T) {
	err := Policy{Waits: []time.Duration{-1}, Reserve: -1, MaxRetries: -1, StreamIdleTimeout: -1}.Validate()
	require.Error(t, err)
	for _, field := range []string{"Policy.Waits[0]", "Policy.Reserve", "Policy.MaxRetries", "Policy.StreamIdleTimeout"} {
		assert.Contains(t, err.Error(), field)
	}
}
