package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmretry/llmretry/redisstore"
	"github.com/llmretry/llmretry/store"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A key's pace, limit, lesson and send leases rewritten with what no
// Store writes — garbage, a Full ten years off or past 2^53 µs, a Burst
// past its bound, a Grow ten years long, a lesson's spacing ten years long
// or its next send ten years off, a send lease ten years long — against a real
// redis-server: every operation answers within Timeout with facts in
// range, counts what it dropped, and the next script writes the key back
// clean; the key's TTL stays within the horizon.
func TestPoisonedPace(t *testing.T) {
	st, p, attacker := poisonable(t)
	ctx := context.Background()
	now := time.Now()
	for _, tc := range []struct {
		name   string
		fields []any
		sends  []redis.Z // forged send leases
	}{
		{"garbage", []any{"b", "nan", "e", "-1", "fu", "1e400", "mi", "inf", "gr", "x", "ca", "-inf", "cu", strings.Repeat("9", 1<<16)}, nil},
		{"a Full ten years off", []any{"b", "1", "e", "1000000", "fu", us(now.Add(tenYears))}, nil},
		{"a Full past 2^53 µs", []any{"b", "1", "e", "1000000", "fu", "9007199254740993"}, nil},
		{"an Every ten years long", []any{"b", "1", "e", strconv.FormatInt(int64(tenYears/time.Microsecond), 10), "fu", us(now.Add(time.Minute))}, nil},
		{"a Burst past its bound", []any{"b", "1073741825", "e", "1000", "fu", us(now.Add(time.Second))}, nil},
		{"a limit past its bound", []any{"mi", "1048577", "ca", us(now), "cu", ms(now.Add(time.Minute))}, nil},
		{"a Grow ten years long", []any{"mi", "1", "gr", strconv.FormatInt(int64(tenYears/time.Microsecond), 10), "ca", us(now), "cu", ms(now.Add(time.Minute))}, nil},
		{"a CutAt ten years off", []any{"mi", "1", "ca", us(now.Add(tenYears)), "cu", ms(now.Add(time.Minute))}, nil},
		{"a limit ten years long", []any{"mi", "1", "ca", us(now), "cu", ms(now.Add(tenYears))}, nil},
		{"a send lease ten years long", []any{"v", clockVersion()}, []redis.Z{{Score: float64(now.Add(tenYears).UnixMilli()), Member: "evil"}}},
		{"a lesson of garbage", []any{"sp", "nan", "fl", "-1", "nx", "1e400", "tu", "inf"}, nil},
		{"a spacing ten years long", []any{"sp", strconv.FormatInt(int64(tenYears/time.Microsecond), 10), "nx", us(now), "tu", ms(now.Add(time.Minute))}, nil},
		{"a next send ten years off", []any{"sp", "1000000", "nx", us(now.Add(tenYears)), "tu", ms(now.Add(time.Minute))}, nil},
		{"a lesson ten years long", []any{"sp", "1000000", "nx", us(now), "tu", ms(now.Add(tenYears))}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "api.poison.test#" + strings.ReplaceAll(tc.name, " ", "-")
			hash := hashOf(p, name)
			require.NoError(t, attacker.HSet(ctx, hash, append([]any{"v", clockVersion()}, tc.fields...)...).Err())
			if tc.sends != nil {
				require.NoError(t, attacker.ZAdd(ctx, p+"{"+name+"}:sends", tc.sends...).Err())
			}
			before := st.Malformed()
			at := time.Now()
			inRange := func(op string, f store.Facts) {
				t.Helper()
				assert.False(t, f.Paced(at) && f.Full.After(at.Add(2*10*time.Minute)), "%s: a Full %v off", op, f.Full.Sub(at))
				assert.LessOrEqual(t, f.Every, 10*time.Minute, "%s: Every", op)
				assert.LessOrEqual(t, f.Grow, 10*time.Minute, "%s: Grow", op)
				assert.False(t, f.CutAt.After(at.Add(10*time.Minute)), "%s: a CutAt %v off", op, f.CutAt.Sub(at))
				assert.False(t, f.Capped(at) && f.CapUntil.After(at.Add(10*time.Minute)), "%s: a limit %v long", op, f.CapUntil.Sub(at))
				assert.LessOrEqual(t, f.InFlight, 0, "%s: a forged send lease counted", op)
				assert.True(t, f.Burst >= 0 && f.MaxInFlight >= 0, "%s: %+v", op, f)
				assert.LessOrEqual(t, f.Spacing, 10*time.Minute, "%s: Spacing", op)
				assert.False(t, f.Taught(at) && f.Next.After(at.Add(2*10*time.Minute)), "%s: a Next %v off", op, f.Next.Sub(at))
				assert.False(t, f.Taught(at) && f.TaughtUntil.After(at.Add(10*time.Minute+store.LessonHold)), "%s: a lesson %v long", op, f.TaughtUntil.Sub(at))
			}
			within(t, 2*time.Second, "the operations", func() {
				f, err := st.Load(ctx, name, at)
				require.NoError(t, err)
				inRange("Load", f)
				f, slot, ok, err := st.TakeSend(ctx, name, store.Lease{Holder: "h", At: at, Until: at.Add(5 * time.Second)}, 0)
				require.NoError(t, err)
				inRange("TakeSend", f)
				assert.True(t, !ok || !slot.After(at.Add(5*time.Second)), "a slot granted after Until")
				f, err = st.Report(ctx, name, store.Report{At: at, Evidence: store.ProviderUp})
				require.NoError(t, err)
				inRange("Report", f)
			})
			cleaned(t, st, name, at, before)
			withinHorizon(t, attacker, hash)
		})
	}
}

// A key's tallies rewritten with what no Store writes — a count past its
// bound, a negative one, garbage, an end ten years off, a seq with a
// leading zero or past 20 digits, an owner past 128 bytes, a hash of more
// than 4,096 tallies — beside a process's real tally, against a real
// redis-server: no forged call in flight is counted (TakeSend is granted
// under the limit the real tally leaves room for), nothing wedges, what was
// dropped is counted, the next script writes the key back clean (the forged
// tallies deleted, the real one kept), and the key's TTL stays within the
// horizon.
func TestPoisonedTally(t *testing.T) {
	st, p, attacker := poisonable(t)
	ctx := context.Background()
	now := time.Now()
	soon := us(now.Add(time.Minute))
	many := map[string]any{}
	for i := range 4097 {
		many[strconv.Itoa(i)] = "1:1:" + soon
	}
	for _, tc := range []struct {
		name    string
		tallies map[string]any // forged, beside the real one
		wholly  bool           // the hash is dropped whole: the real tally too
	}{
		{"a count past its bound", map[string]any{"evil": "1048577:1:" + soon}, false},
		{"a negative count", map[string]any{"evil": "-5:1:" + soon}, false},
		{"garbage", map[string]any{"a": "nan", "b": "5:1", "c": "", "d": "5:1:" + soon + ":0", "e": "1e3:1:" + soon,
			"f": strings.Repeat("9", 1<<16), "g": " 5:1:" + soon}, false},
		{"an end ten years off", map[string]any{"evil": "5:1:" + us(now.Add(tenYears))}, false},
		{"an end past 2^53 µs", map[string]any{"evil": "5:1:9007199254740993"}, false},
		{"a seq with a leading zero", map[string]any{"evil": "5:007:" + soon}, false},
		{"a seq of 21 digits", map[string]any{"evil": "5:123456789012345678901:" + soon}, false},
		{"an owner of 129 bytes", map[string]any{strings.Repeat("o", 129): "5:1:" + soon}, false},
		{"an empty owner", map[string]any{"": "5:1:" + soon}, false},
		{"4,097 tallies", many, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "api.poison.test#" + strings.ReplaceAll(tc.name, " ", "-")
			tallies := p + "{" + name + "}:tallies"
			at := time.Now()
			// A limit of 3, and a real process's tally of 2.
			_, err := st.Report(ctx, name, store.Report{At: at, Evidence: store.ProviderUp, Cut: true, CapUntil: at.Add(time.Minute),
				Owner: "0123456789abcdef", Unleased: 2, Seq: 1, TallyUntil: at.Add(time.Minute)})
			require.NoError(t, err)
			f, err := st.Load(ctx, name, at)
			require.NoError(t, err)
			require.Equal(t, 2, f.InFlight, "the real tally")
			require.NoError(t, attacker.HSet(ctx, tallies, tc.tallies).Err())
			before := st.Malformed()
			real := 2
			if tc.wholly {
				real = 0
			}
			within(t, 2*time.Second, "the operations", func() {
				f, err := st.Load(ctx, name, at)
				require.NoError(t, err)
				assert.Equal(t, real, f.InFlight, "Load: the calls in flight counted")
				f, _, ok, err := st.TakeSend(ctx, name, store.Lease{Holder: "h", At: at, Until: at.Add(5 * time.Second)}, 3)
				require.NoError(t, err)
				assert.True(t, ok, "a send under a limit of 3 with %d counted in flight: refused", real)
				assert.Equal(t, real+1, f.InFlight, "TakeSend: the calls in flight counted")
				f, err = st.Report(ctx, name, store.Report{At: at, Evidence: store.ProviderUp, Cut: true, CapUntil: at.Add(time.Minute)})
				require.NoError(t, err)
				assert.Equal(t, real+1, f.MaxInFlight, "Report: a cut is the calls in flight counted, forged ones not")
			})
			cleaned(t, st, name, at, before)
			left, err := attacker.HKeys(ctx, tallies).Result()
			require.NoError(t, err)
			if tc.wholly {
				assert.Empty(t, left, "the over-long hash was kept")
			} else {
				assert.Equal(t, []string{"0123456789abcdef"}, left, "the tallies left")
			}
			withinHorizon(t, attacker, hashOf(p, name), tallies)
		})
	}
}

// poisonable starts a redis-server and returns a Store on it with a prefix
// of t's own, that prefix, and an attacker's client of the same server.
func poisonable(t *testing.T) (*redisstore.Store, string, *redis.Client) {
	t.Helper()
	srv := startRedis(t)
	p := prefix(t)
	st := newStore(t, boundedClient(t, srv.Addr), redisstore.Options{Prefix: p})
	return st, p, newClient(t, srv.Addr)
}

// cleaned checks that st counted something malformed since before, and
// that the script that did wrote name back clean: reading it again drops
// nothing.
func cleaned(t *testing.T, st *redisstore.Store, name string, at time.Time, before uint64) {
	t.Helper()
	assert.Greater(t, st.Malformed(), before, "nothing counted as malformed")
	after := st.Malformed()
	_, err := st.Load(context.Background(), name, at)
	require.NoError(t, err)
	assert.Equal(t, after, st.Malformed(), "the poison outlived a script that read it")
}
