package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/llmretry/llmretry"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Whatever a message on the changes channel holds, decoding it never
// panics, and what it accepts is in range.
func FuzzDecodeNotice(f *testing.F) {
	for _, seed := range []string{
		"1 2 3 4 5 6 7 0 3\nabc502 Bad Gateway",
		"1759000000000000 1759000000000 1759000015000 1759000005000 0 0 0 5 21\nabcdeapi.example.com#0011223344556677",
		"0 0 0 0 0 0 0 9223372036854775807 1\nx",
		"0 0 0 0 0 0 0 1 9223372036854775807\nx",
		"0 0 0 0 0 0 0 9223372036854775807 9223372036854775807\nx",
		"0 0 0 0 0 0 0 -1 2\nxy",
		"1 1e19 0 0 0 0 0 0 1\nx",
		"1 0 0 0 99999999999999999 0 0 0 1\nx",
		"1 0 0 0 0 315360000000000 0 0 1\nx",
		"18446744073709551615 0 0 0 0 0 0 0 1\nx",
		"1 0 0 0 0 0 0 0 0\n",
		"1 0 0 0 0 0 0 0 1",
		"1 0 0 0 0 0 0 0\nx",
		"1 0 0 0 0 0 0 0 1 1\nx",
		"\n",
		"",
		"1 0 0 0 0 0 0 0 1\nx" + strings.Repeat("r", 1<<12),
		"\x00\xff 1 2\n\x00",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		name, facts, ok := decodeNotice(msg)
		if !ok {
			return
		}
		assert.NotEmpty(t, name)
		assert.LessOrEqual(t, len(name), maxName)
		assert.LessOrEqual(t, len(facts.Prober), maxProber)
		assert.LessOrEqual(t, len(facts.Reason), maxReason)
		assert.LessOrEqual(t, facts.Version, uint64(maxVersion))
		for _, tm := range []time.Time{facts.DownSince, facts.DownUntil, facts.NextProbe, facts.ProbeUntil, facts.WaitUntil} {
			assert.True(t, tm.IsZero() || tm.UnixMilli() > 0 && tm.UnixMilli() <= maxMS, "time %v", tm)
		}
	})
}

// Whatever a key's hash in Redis holds (a field rewritten by anyone with
// access to Redis), the scripts read it as facts in range or as nothing,
// the Store's answer decodes, and the key's expiry stays within the
// horizon. Run against miniredis (its Lua is not Redis's, but the
// sanitizing is plain string matching); the attack tests run the same
// shapes against a real redis-server.
func FuzzHashFields(f *testing.F) {
	now := time.Now().UnixMilli()
	tenYears := int64(10 * 365 * 24 * time.Hour / time.Millisecond)
	num := func(n int64) string { return strconv.FormatInt(n, 10) }
	for _, seed := range [][8]string{
		{num(now * 1000), num(now), num(now + tenYears), "0", "502 Bad Gateway", "evil", num(now + tenYears), "0"},
		{num(now * 1000), num(now), num(now + 15000), "0", "502", "evil", "10000000000000000000", "0"},
		{num(now * 1000), "0", "0", "0", "429", "", "0", num(now + tenYears)},
		{"9223372036854775807", "nan", "inf", "-inf", strings.Repeat("x", 1<<20), "p", "-5", "1e19"},
		{"", " ", "0x10", "1.5", "", strings.Repeat("p", 100), "+1", "007"},
		{num(now * 1000), num(now), num(now + 15000), num(now + tenYears), "502", "", "0", "0"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3], seed[4], seed[5], seed[6], seed[7])
	}
	m := miniredis.NewMiniRedis()
	require.NoError(f, m.Start())
	f.Cleanup(m.Close)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	f.Cleanup(func() { _ = c.Close() })
	s, err := New(c, Options{Secret: []byte("fuzz-secret-0123456789"), Prefix: "fz:", Timeout: 5 * time.Second})
	require.NoError(f, err)
	f.Cleanup(func() { _ = s.Close() })
	horizon := time.Duration(s.longest.Load()) * time.Millisecond
	f.Fuzz(func(t *testing.T, v, ds, du, np, r, p, pu, w string) {
		ctx := context.Background()
		name := "api.example.com"
		kf := s.keys(name)[0]
		m.FlushAll()
		m.HSet(kf, "v", v, "ds", ds, "du", du, "np", np, "r", r, "p", p, "pu", pu, "w", w)
		at := time.Now().Truncate(time.Millisecond)
		inRange := func(f llmretry.Facts) {
			for _, tm := range []time.Time{f.DownUntil, f.NextProbe, f.ProbeUntil, f.WaitUntil} {
				assert.False(t, tm.After(at.Add(horizon)), "a time beyond the horizon: %v", tm)
			}
			assert.LessOrEqual(t, len(f.Reason), maxReason)
			assert.LessOrEqual(t, len(f.Prober), maxProber)
		}
		f, err := s.Load(ctx, name, at)
		require.NoError(t, err)
		inRange(f)
		f, _, err = s.TakeProbe(ctx, name, llmretry.Lease{Holder: "h", At: at, Until: at.Add(5 * time.Second)})
		require.NoError(t, err)
		inRange(f)
		assert.False(t, f.ProbeUntil.After(at.Add(10*time.Second)), "a lease longer than two of the caller's: %v", f.ProbeUntil.Sub(at))
		f, err = s.Report(ctx, name, llmretry.Report{At: at, Evidence: llmretry.ProviderDown, Reason: "502", DownFor: 15 * time.Second, NextProbe: at.Add(5 * time.Second), Prober: "h"})
		require.NoError(t, err)
		inRange(f)
		assert.LessOrEqual(t, m.TTL(kf), horizon+time.Minute)
	})
}
