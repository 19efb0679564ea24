package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/llmretry/llmretry/store"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Whatever a message on the changes channel holds, decoding it never
// panics, and what it accepts is in range.
func FuzzDecodeNotice(f *testing.F) {
	// v ds du np pu w n, then b e fu mi c ca cu s (the pace and the limit
	// on calls in flight), then the lengths of the prober and the name.
	const z8 = " 0 0 0 0 0 0 0 0 0 0 0 0" // b … s and sp … tu
	for _, seed := range []string{
		"1 2 3 4 5 6 7" + z8 + " 0 3\nabc502 Bad Gateway",
		"1759000000000000 1759000000000 1759000015000 1759000005000 0 0 0" + z8 + " 5 21\nabcdeapi.example.com#0011223344556677",
		"1759000000000000 0 0 0 0 0 0 10 1000000 1759000010000000 8 2000000 1759000000000000 1759000030000 3 0 0 0 0 0 15\napi.example.com",
		"1759000000000000 0 0 0 0 0 0 10 6667 1759000000066670 0 0 0 0 0 0 0 0 0 0 15\napi.example.com",
		"1 0 0 0 0 0 0 1073741825 1 1 0 0 0 0 0 0 0 0 0 0 1\nx",
		"1 0 0 0 0 0 0 1 1 9007199254740993 0 0 0 0 0 0 0 0 0 0 1\nx",
		"1 0 0 0 0 0 0 0 0 0 1048577 -2 0 0 1048577 0 0 0 0 0 1\nx",
		"1 0 0 0 0 0 0 0 0 0 8 1 -1 1e19 0 0 0 0 0 0 1\nx",
		"0 0 0 0 0 0 0" + z8 + " 9223372036854775807 1\nx",
		"0 0 0 0 0 0 0" + z8 + " 1 9223372036854775807\nx",
		"0 0 0 0 0 0 0" + z8 + " 9223372036854775807 9223372036854775807\nx",
		"0 0 0 0 0 0 0" + z8 + " -1 2\nxy",
		"1 1e19 0 0 0 0 0" + z8 + " 0 1\nx",
		"1 0 0 0 99999999999999999 0 0" + z8 + " 0 1\nx",
		"1 0 0 0 0 315360000000000 0" + z8 + " 0 1\nx",
		"18446744073709551615 0 0 0 0 0 0" + z8 + " 0 1\nx",
		"1 0 0 0 0 0 0" + z8 + " 0 0\n",
		"1 0 0 0 0 0 0" + z8 + " 0 1",
		"1 0 0 0 0 0 0 0 1\nx", // the old format
		"1 0 0 0 0 0 0" + z8 + " 0 1 1\nx",
		"\n",
		"",
		"1 0 0 0 0 0 0" + z8 + " 0 1\nx" + strings.Repeat("r", 1<<12),
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
		for _, tm := range []time.Time{facts.DownSince, facts.DownUntil, facts.NextProbe, facts.ProbeUntil, facts.WaitUntil, facts.CapUntil} {
			assert.True(t, tm.IsZero() || tm.UnixMilli() > 0 && tm.UnixMilli() <= maxMS, "time %v", tm)
		}
		for _, tm := range []time.Time{facts.Full, facts.CutAt} {
			assert.True(t, tm.IsZero() || tm.UnixMicro() > 0 && tm.UnixMicro() <= maxUS, "time %v", tm)
		}
		assert.True(t, facts.Grow >= 0 && facts.Grow <= maxMS*time.Microsecond, "Grow %v", facts.Grow)
		assert.True(t, facts.Burst >= 0 && facts.Burst <= maxBurst, "Burst %d", facts.Burst)
		assert.True(t, facts.Every >= 0 && facts.Every <= maxMS*time.Microsecond, "Every %v", facts.Every)
		for _, n := range []int{facts.Retries, facts.MaxInFlight, facts.InFlight} {
			assert.True(t, n >= 0 && n <= maxCount, "count %d", n)
		}
	})
}

// Whatever a key's hash in Redis holds (a field rewritten by anyone with
// access to Redis), the scripts read it as facts in range or as nothing,
// the Store's answer decodes, TakeSend's slot is in range, and the key's
// expiry stays within the horizon. Run against miniredis (its Lua is not
// Redis's, but the sanitizing is plain string matching); the attack tests
// run the same shapes against a real redis-server.
func FuzzHashFields(f *testing.F) {
	now := time.Now().UnixMilli()
	tenYears := int64(10 * 365 * 24 * time.Hour / time.Millisecond)
	num := func(n int64) string { return strconv.FormatInt(n, 10) }
	nopace := [7]string{"0", "0", "0", "0", "0", "0", "0"}
	// v, ds, du, np, r, p, pu, w; b, e, fu (µs), mi, gr (µs), ca (µs), cu;
	// a tally's owner and value ("n:seq:until", until in µs; no tally if
	// both are empty).
	type seed struct {
		facts [8]string
		pace  [7]string
		tally [2]string
	}
	nowUS := func(d time.Duration) string { return num(now*1000 + d.Microseconds()) }
	var none [2]string
	clean := [8]string{num(now * 1000), "0", "0", "0", "", "", "0", "0"}
	limited := [7]string{"0", "0", "0", "8", "2000000", num((now - 5000) * 1000), num(now + 30000)}
	for _, sd := range []seed{
		// Tallies, as a Store writes them and as it never would.
		{clean, limited, [2]string{"0123456789abcdef", "3:7:" + nowUS(time.Minute)}},
		{clean, limited, [2]string{"0123456789abcdef", "0:18446744073709551615:" + nowUS(time.Minute)}},
		{clean, limited, [2]string{"evil", "1048577:1:" + nowUS(time.Minute)}},
		{clean, limited, [2]string{"evil", "5:1:" + nowUS(10*365*24*time.Hour)}},
		{clean, limited, [2]string{"evil", "-5:1:" + nowUS(time.Minute)}},
		{clean, limited, [2]string{"evil", "5:007:" + nowUS(time.Minute)}},
		{clean, limited, [2]string{"evil", "5:123456789012345678901:" + nowUS(time.Minute)}},
		{clean, limited, [2]string{"evil", "nan:inf:1e19"}},
		{clean, limited, [2]string{"evil", "5:1:" + nowUS(time.Minute) + ":x"}},
		{clean, limited, [2]string{strings.Repeat("o", 129), "5:1:" + nowUS(time.Minute)}},
		{clean, limited, [2]string{"", "5:1:" + nowUS(time.Minute)}},
		{clean, limited, [2]string{"evil", strings.Repeat("9", 1<<12)}},
		{[8]string{num(now * 1000), num(now), num(now + tenYears), "0", "502 Bad Gateway", "evil", num(now + tenYears), "0"}, nopace, none},
		{[8]string{num(now * 1000), num(now), num(now + 15000), "0", "502", "evil", "10000000000000000000", "0"}, nopace, none},
		{[8]string{num(now * 1000), "0", "0", "0", "429", "", "0", num(now + tenYears)}, nopace, none},
		{[8]string{"9223372036854775807", "nan", "inf", "-inf", strings.Repeat("x", 1<<20), "p", "-5", "1e19"}, nopace, none},
		{[8]string{"", " ", "0x10", "1.5", "", strings.Repeat("p", 100), "+1", "007"}, nopace, none},
		{[8]string{num(now * 1000), num(now), num(now + 15000), num(now + tenYears), "502", "", "0", "0"}, nopace, none},
		// The pace and the limit, as a Store writes them.
		{[8]string{num(now * 1000), "0", "0", "0", "", "", "0", "0"},
			[7]string{"10", "1000000", num((now + 10000) * 1000), "8", "2000000", num((now - 5000) * 1000), num(now + 30000)}, none},
		// A limit grown past its bound: the cap a Report takes the smaller of.
		{[8]string{num(now * 1000), "0", "0", "0", "", "", "0", "0"},
			[7]string{"0", "0", "0", "1048576", "1", "1", num(now + 30000)}, none},
		// A Full ten years off, or past 2^53 µs; a huge Every and Burst.
		{[8]string{num(now * 1000), "0", "0", "0", "", "", "0", "0"},
			[7]string{"1", "1000000", num((now + tenYears) * 1000), "0", "0", "0", "0"}, none},
		{[8]string{num(now * 1000), "0", "0", "0", "", "", "0", "0"},
			[7]string{"1", "1", "9007199254740993", "0", "0", "0", "0"}, none},
		{[8]string{num(now * 1000), "0", "0", "0", "", "", "0", "0"},
			[7]string{"99999999999999", num(tenYears * 1000), num((now + 1000) * 1000), "0", "0", "0", "0"}, none},
		// Burst 0 (the slot after Full), Every 1 µs.
		{[8]string{num(now * 1000), "0", "0", "0", "", "", "0", "0"},
			[7]string{"0", "1", num((now + 5000) * 1000), "0", "0", "0", "0"}, none},
		// Malformed pace and limit fields.
		{[8]string{num(now * 1000), "0", "0", "0", "", "", "0", "0"},
			[7]string{"-1", "nan", "1e16", "1e19", "-2", "inf", "-5"}, none},
		{[8]string{num(now * 1000), "0", "0", "0", "", "", "0", "0"},
			[7]string{"1.5", " 1", strings.Repeat("9", 40), "1048577", num(tenYears * 1000), num((now + tenYears) * 1000), num(now + tenYears)}, none},
	} {
		a := append(append(sd.facts[:], sd.pace[:]...), sd.tally[:]...)
		f.Add(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16])
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
	f.Fuzz(func(t *testing.T, v, ds, du, np, r, p, pu, w, b, e, fu, mi, gr, ca, cu, owner, tally string) {
		ctx := context.Background()
		name := "api.example.com"
		kf, kt := s.keys(name)[0], s.keys(name)[3]
		m.FlushAll()
		m.HSet(kf, "v", v, "ds", ds, "du", du, "np", np, "r", r, "p", p, "pu", pu, "w", w,
			"b", b, "e", e, "fu", fu, "mi", mi, "gr", gr, "ca", ca, "cu", cu)
		if owner != "" || tally != "" {
			m.HSet(kt, owner, tally)
		}
		at := time.Now().Truncate(time.Millisecond)
		inRange := func(f store.Facts) {
			for _, tm := range []time.Time{f.DownUntil, f.NextProbe, f.ProbeUntil, f.WaitUntil, f.CutAt, f.CapUntil} {
				assert.False(t, tm.After(at.Add(horizon)), "a time beyond the horizon: %v", tm)
			}
			assert.False(t, f.Full.After(at.Add(2*horizon)), "a Full beyond two horizons: %v", f.Full)
			assert.LessOrEqual(t, f.Every, horizon, "an Every beyond the horizon")
			assert.LessOrEqual(t, f.Grow, horizon, "a Grow beyond the horizon")
			assert.True(t, f.Burst >= 0 && f.Burst <= maxBurst, "Burst %d", f.Burst)
			assert.True(t, f.MaxInFlight >= 0 && f.MaxInFlight <= maxCount, "MaxInFlight %d", f.MaxInFlight)
			assert.True(t, f.InFlight >= 0 && f.InFlight <= maxCount, "InFlight %d", f.InFlight)
			assert.LessOrEqual(t, len(f.Reason), maxReason)
			assert.LessOrEqual(t, len(f.Prober), maxProber)
		}
		f, err := s.Load(ctx, name, at)
		require.NoError(t, err)
		inRange(f)
		until := at.Add(5 * time.Second)
		f, slot, ok, err := s.TakeSend(ctx, name, store.Lease{Holder: "s", At: at, Until: until}, 2)
		require.NoError(t, err)
		inRange(f)
		if ok {
			assert.False(t, slot.Before(at) || slot.After(until), "a slot granted outside [At, Until]: %v", slot.Sub(at))
		} else {
			assert.True(t, slot.IsZero() || slot.After(until) && !slot.After(at.Add(2*horizon)), "a refused slot: %v", slot)
		}
		f, _, err = s.TakeProbe(ctx, name, store.Lease{Holder: "h", At: at, Until: until})
		require.NoError(t, err)
		inRange(f)
		assert.False(t, f.ProbeUntil.After(at.Add(10*time.Second)), "a lease longer than two of the caller's: %v", f.ProbeUntil.Sub(at))
		f, err = s.Report(ctx, name, store.Report{At: at, Evidence: store.ProviderDown, Reason: "502", DownFor: 15 * time.Second, NextProbe: at.Add(5 * time.Second), Prober: "h",
			Burst: 10, Every: time.Second, Full: at.Add(10 * time.Second), Cut: true, Grow: time.Second, CapUntil: at.Add(30 * time.Second),
			Owner: "fz", Unleased: 3, Seq: 2, TallyUntil: at.Add(time.Minute)})
		require.NoError(t, err)
		inRange(f)
		assert.GreaterOrEqual(t, f.InFlight, 3, "the tally just reported")
		assert.True(t, f.Capped(at) && f.MaxInFlight == max(f.InFlight, 1), "a cut is the calls in flight counted: %+v", f)
		f, err = s.Release(ctx, name, "s", at)
		require.NoError(t, err)
		inRange(f)
		assert.LessOrEqual(t, m.TTL(kf), horizon+time.Minute)
		assert.LessOrEqual(t, m.TTL(kt), horizon+time.Minute)
	})
}

// answerOf builds a script's answer from data, as a hostile or broken
// server might: each value a tag byte (0 an int64 of the next 8 bytes,
// 1 a string of the next byte's length, 2 nil, 3 a float) until data ends.
func answerOf(data []byte) []any {
	var v []any
	for len(data) > 0 {
		tag := data[0]
		data = data[1:]
		switch tag % 4 {
		case 0:
			var x int64
			for i := 0; i < 8 && len(data) > 0; i++ {
				x = x<<8 | int64(data[0])
				data = data[1:]
			}
			v = append(v, x)
		case 1:
			n := 0
			if len(data) > 0 {
				n, data = int(data[0]), data[1:]
			}
			n = min(n, len(data))
			v = append(v, string(data[:n]))
			data = data[n:]
		case 2:
			v = append(v, nil)
		case 3:
			v = append(v, 1.5)
		}
	}
	return v
}

// bytesOf is answerOf's inverse for int64s and strings.
func bytesOf(v ...any) []byte {
	var b []byte
	for _, x := range v {
		switch x := x.(type) {
		case int64:
			b = append(b, 0)
			for i := 7; i >= 0; i-- {
				b = append(b, byte(x>>(8*i)))
			}
		case string:
			b = append(b, 1, byte(len(x)))
			b = append(b, x...)
		}
	}
	return b
}

// Whatever a script answers, decoding it never panics, and what it
// accepts is in range.
func FuzzDecodeAnswer(f *testing.F) {
	now := time.Now()
	ms, us := now.UnixMilli(), now.UnixMicro()
	good := []any{us, ms, ms + 15000, ms + 5000, int64(0), int64(0), int64(1), "", "502 Bad Gateway", int64(1), int64(0),
		int64(10), int64(1000000), us + 10_000_000, int64(8), int64(2000000), us, ms + 30000, int64(3), us}
	f.Add(bytesOf(good...))
	for _, bad := range []any{int64(-1), int64(maxUS + 1), int64(1 << 62), "x"} {
		for _, at := range []int{6, 11, 12, 13, 14, 15, 16, 17, 18, 19} {
			v := append([]any(nil), good...)
			v[at] = bad
			f.Add(bytesOf(v...))
		}
	}
	f.Add(bytesOf(good[:11]...)) // the old answer
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := decode(answerOf(data))
		if err != nil {
			return
		}
		fs := a.f
		assert.LessOrEqual(t, fs.Version, uint64(maxVersion))
		assert.True(t, fs.Burst >= 0 && fs.Burst <= maxBurst && fs.Every >= 0, "pace %+v", fs)
		assert.True(t, fs.Full.IsZero() || fs.Full.UnixMicro() > 0 && fs.Full.UnixMicro() <= maxUS, "Full %v", fs.Full)
		assert.True(t, a.slot.IsZero() || a.slot.UnixMicro() > 0 && a.slot.UnixMicro() <= maxUS, "slot %v", a.slot)
		for _, n := range []int{fs.Retries, fs.MaxInFlight, fs.InFlight} {
			assert.True(t, n >= 0 && n <= maxCount, "count %d", n)
		}
	})
}

// decode takes the answer a script gives, field by field, and refuses
// each new field out of range.
func TestDecodeAnswer(t *testing.T) {
	now := time.Now()
	ms, us := now.UnixMilli(), now.UnixMicro()
	good := []any{us, ms, ms + 15000, ms + 5000, int64(0), int64(0), int64(1), "", "502 Bad Gateway", int64(1), int64(0),
		int64(10), int64(1000000), us + 10_000_000, int64(8), int64(2000000), us, ms + 30000, int64(3), us + 1,
		int64(1500000), int64(1000000), us + 1_500_000, ms + 60000}
	a, err := decode(good)
	require.NoError(t, err)
	assert.Equal(t, store.Facts{Version: uint64(us), DownSince: time.UnixMilli(ms), DownUntil: time.UnixMilli(ms + 15000),
		NextProbe: time.UnixMilli(ms + 5000), Reason: "502 Bad Gateway", Retries: 1,
		Burst: 10, Every: time.Second, Full: time.UnixMicro(us + 10_000_000),
		MaxInFlight: 8, Grow: 2 * time.Second, CutAt: time.UnixMicro(us), CapUntil: time.UnixMilli(ms + 30000), InFlight: 3,
		Spacing: 1500 * time.Millisecond, Floor: time.Second, Next: time.UnixMicro(us + 1_500_000), TaughtUntil: time.UnixMilli(ms + 60000)}, a.f)
	assert.True(t, a.granted)
	assert.Equal(t, time.UnixMicro(us+1), a.slot)
	for _, tc := range []struct {
		name string
		at   int
		v    any
	}{
		{"a negative Burst", 11, int64(-1)},
		{"a Burst past its bound", 11, int64(maxBurst + 1)},
		{"a negative Every", 12, int64(-1)},
		{"a Full past 2^53 µs", 13, int64(maxUS + 1)},
		{"a limit past its bound", 14, int64(maxCount + 1)},
		{"a negative Grow", 15, int64(-1)},
		{"a Grow past maxMS µs", 15, int64(maxMS + 1)},
		{"a negative CutAt", 16, int64(-1)},
		{"a CutAt past 2^53 µs", 16, int64(maxUS + 1)},
		{"a CapUntil past maxMS", 17, int64(maxMS + 1)},
		{"an InFlight past its bound", 18, int64(maxCount + 1)},
		{"a slot past 2^53 µs", 19, int64(maxUS + 1)},
		{"a slot that is a string", 19, "1"},
		{"a Full that is nil", 13, nil},
		{"a negative Spacing", 20, int64(-1)},
		{"a Floor past maxMS µs", 21, int64(maxMS + 1)},
		{"a Next past 2^53 µs", 22, int64(maxUS + 1)},
		{"a TaughtUntil past maxMS", 23, int64(maxMS + 1)},
		{"a TaughtUntil that is a string", 23, "1"},
	} {
		v := append([]any(nil), good...)
		v[tc.at] = tc.v
		_, err := decode(v)
		assert.Error(t, err, tc.name)
	}
	_, err = decode(good[:11])
	assert.Error(t, err, "the old, shorter answer")
	_, err = decode(good[:20])
	assert.Error(t, err, "the answer before lessons")
}
