package llmretry

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Transport's call and Do run the same rounds: for the same policy,
// deadline and Asker answers, a provider that always fails and a tool that
// always fails see their attempts at the same times, the Asker is asked
// after the same attempts, and both stop for the same reason.
func TestRoundsAreTheSameForTransportAndDo(t *testing.T) {
	cases := []struct {
		name     string
		policy   Policy
		deadline time.Duration // 0: none
		answers  []bool        // nil: no Asker
		asked    []int         // the attempts after which the Asker is asked
		gaps     []time.Duration
		reason   error
	}{
		{
			name:   "no Asker",
			policy: Policy{Waits: []time.Duration{time.Second, 2 * time.Second}},
			gaps:   []time.Duration{time.Second, 2 * time.Second},
			reason: ErrRetriesSpent,
		},
		{
			name:    "no at once",
			policy:  Policy{Waits: []time.Duration{time.Second}},
			answers: []bool{false},
			asked:   []int{2},
			gaps:    []time.Duration{time.Second},
			reason:  ErrRetriesSpent,
		},
		{
			name:    "two yeses, then no",
			policy:  Policy{Waits: []time.Duration{time.Second, 2 * time.Second}},
			answers: []bool{true, true, false},
			asked:   []int{3, 6, 9},
			gaps:    []time.Duration{time.Second, 2 * time.Second, 0, time.Second, 2 * time.Second, 0, time.Second, 2 * time.Second},
			reason:  ErrRetriesSpent,
		},
		{
			// Attempts at 0, 10, 20 s | yes | 20, 30, 40 | yes | 40, 50,
			// 60 | yes | 60 at once (60 s left: the reserve), then no time
			// for the next wait.
			name:     "yes under a deadline",
			policy:   Policy{Waits: []time.Duration{10 * time.Second}, MaxRetries: 2, Reserve: time.Minute},
			deadline: 2 * time.Minute,
			answers:  []bool{true},
			asked:    []int{3, 6, 9},
			gaps:     []time.Duration{10 * time.Second, 10 * time.Second, 0, 10 * time.Second, 10 * time.Second, 0, 10 * time.Second, 10 * time.Second, 0},
			reason:   ErrNoTimeLeft,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// Each runs with a context of its own, its deadline counted
				// from its start.
				run := func(name string, call func(context.Context, Policy) error, attempts func() int, gaps func() []time.Duration) {
					ctx := context.Background()
					if tc.deadline > 0 {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, tc.deadline)
						defer cancel()
					}
					p := tc.policy
					var ask *asked
					if tc.answers != nil {
						ask = &asked{answers: tc.answers}
						p.OnExhausted = ask
					}
					err := call(ctx, p)
					var ex *Exhausted
					require.ErrorAs(t, err, &ex, name)
					assert.ErrorIs(t, ex.Reason, tc.reason, name)
					assert.Equal(t, len(tc.gaps)+1, attempts(), name)
					assert.Equal(t, len(tc.gaps)+1, ex.Attempts, name)
					assert.Equal(t, tc.gaps, gaps(), name)
					if ask == nil {
						return
					}
					var after []int
					for _, q := range ask.questions() {
						after = append(after, q.Attempts)
						assert.Equal(t, ErrRetriesSpent, q.Reason, name)
					}
					assert.Equal(t, tc.asked, after, name)
				}

				prov := newProvider(refused)
				run("Transport", func(ctx context.Context, p Policy) error {
					resp, err := post(t, mustNew(t, prov.mock, p), ctx)
					assert.Nil(t, resp)
					return err
				}, prov.attempts, prov.gaps)

				tl := &tool{script: []error{errBusy}}
				run("Do", func(ctx context.Context, p Policy) error {
					_, err := Do(ctx, p, tl.call)
					return err
				}, tl.calls, tl.gaps)
			})
		})
	}
}
