package coord_test

// What a key's 429s teach it (taught.go) through coordinated Transports,
// against a provider whose headers state a per-minute figure while it
// enforces a bucket of a tenth of it (issue 31).

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// 60 calls at once, the zero Policy, against a bucket of 10 refilled at
// 1/s whose headers state 60: read alone they pace the key at 6 a second.
// The first 429s state the wait for one request (1 s): the lesson's floor
// is the bucket's true interval, every later send goes at it, no 429
// reaches the provider after the first came back, and the calls are
// answered as soon as the bucket allows (the 60th admitted at 50 s). An
// hour later the lesson has lapsed: a call goes straight out, with no
// store call.
func TestCoordinatedBelievesThe429(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const calls, gen = 60, 2 * time.Second
		b := newBucket(10, time.Second, gen)
		b.stated = 60
		st := &testkit.Store{Store: coordination.NewMemoryStore()}
		rt, err := llmretry.NewCoordinated(b, llmretry.Policy{}, coordination.Config{Store: st})
		require.NoError(t, err)
		results := callMany(t, rt, b.start, calls, 0, 10*time.Minute, nil)
		last := time.Duration(0)
		for _, r := range results {
			require.NoError(t, r.err)
			last = max(last, r.at)
		}
		f := load(t, st, "api.example.com")
		assert.Equal(t, time.Second, f.Floor, "the bucket's true interval")
		assert.True(t, f.Taught(time.Now()))
		assert.Zero(t, b.refusedAfter(0), "no 429 after the first burst's")
		assert.GreaterOrEqual(t, last, 52*time.Second)
		assert.LessOrEqual(t, last, 53*time.Second, "at the bucket's pace, not slower")

		time.Sleep(time.Hour)
		assert.False(t, load(t, st, "api.example.com").Taught(time.Now()), "the lesson lapsed")
		before := st.Calls()
		require.NoError(t, callMany(t, rt, b.start, 1, 0, time.Minute, nil)[0].err)
		assert.Equal(t, before, st.Calls(), "a quiet key again: no store call")
	})
}

// The same bucket whose 429s state no wait: nothing proves its interval,
// so each 429 at the pace's turn cuts the key's rate to 0.7 of what it was
// until the sends fit (turns granted before a cut keep their instants, and
// some of them meet 429s too): each such 429 the pace's error, not the
// call's: under the zero Policy every call answers all the same. The
// price of a silent provider is turns: those granted before a cut keep
// their instants, and each spends a 429 until the queue's turns are the
// cut pace's (34 in this run; a stated wait proves the interval at the
// first 429, above, and costs none).
func TestCoordinatedMispacedSpendsOneRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const calls, gen = 40, 2 * time.Second
		b := newBucket(10, time.Second, gen)
		b.stated, b.silent = 60, true
		st := &testkit.Store{Store: coordination.NewMemoryStore()}
		rt, err := llmretry.NewCoordinated(b, llmretry.Policy{}, coordination.Config{Store: st})
		require.NoError(t, err)
		results := callMany(t, rt, b.start, calls, 0, 10*time.Minute, nil)
		for i, r := range results {
			assert.NoError(t, r.err, "call %d", i)
		}
		late := b.refusedAfter(0)
		assert.Positive(t, late, "the pace was wrong, and was told")
		assert.LessOrEqual(t, late, calls, "at most one a call, past the first burst's")
		assert.True(t, load(t, st, "api.example.com").Taught(time.Now()))
		t.Logf("%d 429s after the first burst's", late)
	})
}
