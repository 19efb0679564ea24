package redisstore_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/llmretry/llmretry/redisstore"
	"github.com/llmretry/llmretry/redisstore/internal/fleet"
	"github.com/llmretry/llmretry/store"
)

// Redis keeps a key a minute past its last live fact, and no longer: its
// memory is bounded by the keys in use. Expiry is only that bound: facts
// lapse by the callers' times.
func TestExpiry(t *testing.T) {
	m, st, key, now := expiryStore(t)
	ctx := context.Background()
	if _, err := st.Report(ctx, key, store.Report{At: now, Evidence: store.ProviderDown, Reason: "502 Bad Gateway",
		DownFor: 15 * time.Second, NextProbe: now.Add(5 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	hash := hashOf("x:", key)
	if ttl := m.TTL(hash); ttl != 75*time.Second {
		t.Errorf("the facts' hash expires in %v, want 75 s (15 s down + a minute)", ttl)
	}
	if _, ok, err := st.TakeRetry(ctx, key, store.Lease{Holder: "r", At: now, Until: now.Add(10 * time.Minute)}, 3); err != nil || !ok {
		t.Fatalf("TakeRetry: %v %v", ok, err)
	}
	if ttl := m.TTL("x:{" + key + "}:retries"); ttl != 11*time.Minute {
		t.Errorf("the retry leases expire in %v, want 11 min", ttl)
	}
	if ttl := m.TTL(hash); ttl != 11*time.Minute {
		t.Errorf("the facts' hash expires in %v with a retry lease live for 10 min, want 11 min", ttl)
	}
	if _, err := st.Release(ctx, key, "r", now); err != nil {
		t.Fatal(err)
	}
	if ttl := m.TTL(hash); ttl != 75*time.Second {
		t.Errorf("after the release the hash expires in %v, want 75 s", ttl)
	}
	expireAll(t, m, 76*time.Second)
}

// A pace, a limit on calls in flight and send leases keep a key as long
// as they live, and a minute more; no longer.
func TestExpiryPace(t *testing.T) {
	m, st, key, now := expiryStore(t)
	ctx := context.Background()
	hash, sends := hashOf("x:", key), "x:{"+key+"}:sends"
	for _, step := range []struct {
		name     string
		do       func() error
		hashTTL  time.Duration
		sendsTTL time.Duration // 0: no such key
	}{
		{"a pace full at +20 s", func() error {
			_, err := st.Report(ctx, key, store.Report{At: now, Evidence: store.ProviderUp, Burst: 10, Every: 2 * time.Second, Full: now.Add(20 * time.Second)})
			return err
		}, 80 * time.Second, 0},
		{"a limit until +30 s", func() error {
			_, err := st.Report(ctx, key, store.Report{At: now, Evidence: store.ProviderUp, Cut: true, CapUntil: now.Add(30 * time.Second)})
			return err
		}, 90 * time.Second, 0},
		{"a send lease until +2 min", func() error {
			_, _, ok, err := st.TakeSend(ctx, key, store.Lease{Holder: "s", At: now, Until: now.Add(2 * time.Minute)}, 4)
			if err == nil && !ok {
				t.Error("the send was not granted")
			}
			return err
		}, 3 * time.Minute, 3 * time.Minute},
		{"its release", func() error {
			_, err := st.Release(ctx, key, "s", now)
			return err
		}, 90 * time.Second, 0},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if ttl := m.TTL(hash); ttl != step.hashTTL {
			t.Errorf("after %s the facts' hash expires in %v, want %v", step.name, ttl, step.hashTTL)
		}
		if ttl := m.TTL(sends); m.Exists(sends) && ttl != step.sendsTTL || !m.Exists(sends) && step.sendsTTL != 0 {
			t.Errorf("after %s the send leases expire in %v (exist: %v), want %v", step.name, ttl, m.Exists(sends), step.sendsTTL)
		}
	}
	expireAll(t, m, 91*time.Second)
}

// A tally keeps a key as long as it lives, and a minute more; an ended
// one is kept that minute with its seq (a late count cannot bring it
// back), and no key is left without an expiry, even one that holds
// nothing but an ended tally.
func TestExpiryTally(t *testing.T) {
	m, st, key, now := expiryStore(t)
	ctx := context.Background()
	hash, tallies := hashOf("x:", key), "x:{"+key+"}:tallies"
	tally := func(owner string, n int, seq uint64, until time.Duration) store.Facts {
		t.Helper()
		f, err := st.Report(ctx, key, store.Report{At: now, Evidence: store.ProviderUp, Owner: owner, Unleased: n, Seq: seq, TallyUntil: now.Add(until)})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	tally("a", 0, 1, time.Minute)
	if m.Exists(hash) || !m.Exists(tallies) || m.TTL(tallies) != time.Minute {
		t.Errorf("a count of 0 on a new key: facts' hash exists %v, tallies' TTL %v; want none, a minute", m.Exists(hash), m.TTL(tallies))
	}
	if f := tally("b", 2, 1, 4*time.Minute); f.InFlight != 2 || m.TTL(hash) != 5*time.Minute || m.TTL(tallies) != 5*time.Minute {
		t.Errorf("a tally of 2 until +4 min: %d in flight, the hashes expire in %v and %v; want 2, 5 min", f.InFlight, m.TTL(hash), m.TTL(tallies))
	}
	if f := tally("b", 0, 2, 4*time.Minute); f.InFlight != 0 || m.TTL(hash) != time.Minute || m.TTL(tallies) != time.Minute {
		t.Errorf("its end: %d in flight, the hashes expire in %v and %v; want 0, a minute", f.InFlight, m.TTL(hash), m.TTL(tallies))
	}
	if f := tally("b", 5, 1, 4*time.Minute); f.InFlight != 0 {
		t.Errorf("a late count brought an ended tally back: %d in flight", f.InFlight)
	}
	expireAll(t, m, 61*time.Second)
}

// expiryStore returns a miniredis, a Store on it with the prefix x:, a
// key's name and the time now, to the millisecond as Redis keeps it.
func expiryStore(t *testing.T) (*miniredis.Miniredis, *redisstore.Store, string, time.Time) {
	t.Helper()
	m := miniredis.RunT(t)
	st := newStore(t, newClient(t, m.Addr()), redisstore.Options{Prefix: "x:", Timeout: roomyTimeout})
	return m, st, st.Key("api.example.com", []byte("k")), time.Now().Truncate(time.Millisecond)
}

// expireAll moves m's clock on by d and checks that Redis then holds no
// key.
func expireAll(t *testing.T, m *miniredis.Miniredis, d time.Duration) {
	t.Helper()
	m.FastForward(d)
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("Redis still holds %q", keys)
	}
}

// An Owner no process of the fleet would have is refused before Redis.
func TestReportOwnerTooLong(t *testing.T) {
	m := miniredis.RunT(t)
	st := newStore(t, newClient(t, m.Addr()), redisstore.Options{Timeout: roomyTimeout})
	now := time.Now()
	_, err := st.Report(context.Background(), "api.example.com", store.Report{At: now, Evidence: store.ProviderUp,
		Owner: strings.Repeat("o", 129), Unleased: 1, Seq: 1, TallyUntil: now.Add(time.Minute)})
	if err == nil || !strings.Contains(err.Error(), "Owner") {
		t.Errorf("a 129-byte Owner: %v, want an error", err)
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("Redis holds %q", keys)
	}
	if _, err := st.Report(context.Background(), "api.example.com", store.Report{At: now, Evidence: store.ProviderUp,
		Owner: strings.Repeat("o", 128), Unleased: 1, Seq: 1, TallyUntil: now.Add(time.Minute)}); err != nil {
		t.Errorf("a 128-byte Owner: %v", err)
	}
}

// A dump of Redis after an outage holds no credential: names carry the
// host and a keyed hash, values the facts and the failure's kind.
func TestNoCredentialInRedis(t *testing.T) {
	m := miniredis.RunT(t)
	st := newStore(t, newClient(t, m.Addr()), redisstore.Options{Timeout: roomyTimeout})
	rt := newTransport(t, st)
	start := time.Now()
	prov := fleet.NewProvider(fleet.Outage(start, 700*time.Millisecond, http.StatusBadGateway))
	defer prov.Close()
	const secret = "sk-failure-test"
	crowd(t, rt, prov.URL, 0, 3, start.Add(5*time.Second))

	var dump strings.Builder
	for _, k := range m.Keys() {
		dump.WriteString(k + "\n")
		if strings.HasSuffix(k, ":f") {
			fields, _ := m.HKeys(k)
			for _, f := range fields {
				dump.WriteString(f + "=" + m.HGet(k, f) + "\n")
			}
		}
	}
	if !strings.Contains(dump.String(), "llmretry:{127.0.0.1:") {
		t.Fatalf("no key of the provider in Redis:\n%s", dump.String())
	}
	for _, leak := range []string{secret, "Bearer", "Authorization"} {
		if strings.Contains(dump.String(), leak) {
			t.Errorf("Redis holds %q:\n%s", leak, dump.String())
		}
	}
	t.Logf("Redis after the outage:\n%s", dump.String())
}

// A notice carries any key name and reason whole, whatever bytes they
// hold.
func TestNoticeEncoding(t *testing.T) {
	m := miniredis.RunT(t)
	c := newClient(t, m.Addr())
	a := newStore(t, c, redisstore.Options{Timeout: roomyTimeout})
	b := newStore(t, c, redisstore.Options{Timeout: roomyTimeout})
	got := make(chan string, 4)
	stop := b.Watch(func(k string, f store.Facts) { got <- k + "|" + f.Reason + "|" + f.Prober })
	defer stop()
	name := "we ird\n{host}:1#00"
	now := time.Now()
	if _, err := a.Report(context.Background(), name, store.Report{At: now, Evidence: store.ProviderDown,
		Reason: "5 0\n2 {x}", DownFor: time.Minute, NextProbe: now}); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if want := name + "|5 0\n2 {x}|"; s != want {
			t.Errorf("notice %q, want %q", s, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no notice")
	}
}

// New refuses what it cannot use.
func TestNewOptions(t *testing.T) {
	c := newClient(t, "127.0.0.1:1")
	for _, tc := range []struct {
		opts redisstore.Options
		want string
	}{
		{redisstore.Options{}, "Secret has 0 bytes"},
		{redisstore.Options{Secret: []byte("short")}, "Secret has 5 bytes"},
		{redisstore.Options{Secret: testSecret, Prefix: "a{b}:"}, "brace"},
		{redisstore.Options{Secret: testSecret, Timeout: -1}, "Timeout is negative"},
	} {
		if _, err := redisstore.New(c, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "redisstore: ") {
			t.Errorf("New(%+v): %v, want an error about %q", tc.opts, err, tc.want)
		}
	}
	if _, err := redisstore.New(nil, redisstore.Options{Secret: testSecret}); err == nil {
		t.Error("New(nil client) made a Store")
	}
}
