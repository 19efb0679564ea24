package redisstore_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/llmretry/llmretry/redisstore"
	"github.com/llmretry/llmretry/redisstore/internal/fleet"
	"github.com/llmretry/llmretry/store"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The attacks of issue 18, each against a real redis-server: what anyone
// who can write to the fleet's Redis (no Secret needed) can send it.

const testAuth = "Bearer sk-failure-test" // send's credential

// boundedClient returns a client of addr whose dials, handshakes and reads
// honour the Store's deadlines (as the package doc advises), closed when
// t ends.
func boundedClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// sendAs makes one call as process proc through rt, with Authorization
// auth (none if empty), under deadline d.
func sendAs(rt http.RoundTripper, url, auth string, proc int, d time.Duration) callResult {
	var res callResult
	var mu sync.Mutex
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ctx = llmretry.WithPolicy(ctx, llmretry.Policy{
		Waits:   []time.Duration{200 * time.Millisecond, 400 * time.Millisecond},
		Reserve: 100 * time.Millisecond,
		OnAttempt: func(a llmretry.Attempt) {
			mu.Lock()
			defer mu.Unlock()
			res.attempts = append(res.attempts, a)
			if !a.Probe {
				res.sent++
			}
		},
	})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(`{}`))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.Header.Set("X-Fleet-Proc", strconv.Itoa(proc))
	resp, err := (&http.Client{Transport: rt}).Do(req)
	res.end, res.err = time.Now(), err
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		res.status = resp.StatusCode
	}
	return res
}

// host returns the host:port of a provider's URL.
func host(url string) string { return strings.TrimPrefix(url, "http://") }

// nameOf returns st's name for the key of calls to url with auth.
func nameOf(st *redisstore.Store, url, auth string) string {
	if auth == "" {
		return st.Key(host(url), nil)
	}
	return st.Key(host(url), []byte("Authorization\x00"+auth+"\x00"))
}

// hashOf returns the Redis key of a provider key's facts.
func hashOf(prefix, name string) string { return prefix + "{" + name + "}:f" }

// ms is t in Unix milliseconds, as the hash holds it.
func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// us is t in Unix microseconds, as the hash holds it.
func us(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

// clockVersion is a version as Redis's clock would give it now.
func clockVersion() string { return strconv.FormatInt(time.Now().UnixMicro(), 10) }

// within runs fn and fails t if it has not returned within d (a wedged
// call: fn's goroutine is left behind, and the binary's leak check fails
// too).
func within(t *testing.T, d time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: still running after %v", what, d)
	}
}

const tenYears = 10 * 365 * 24 * time.Hour

// withinHorizon checks that each of keys expires within the Store's
// horizon: no later than 11 minutes from now.
func withinHorizon(t *testing.T, attacker *redis.Client, keys ...string) {
	t.Helper()
	for _, k := range keys {
		ttl, err := attacker.PTTL(context.Background(), k).Result()
		require.NoError(t, err)
		assert.LessOrEqual(t, ttl, 11*time.Minute, "the Store set %s's TTL to %v", k, ttl)
	}
}

// Forged messages on the changes channel, of every malformed shape: no
// process dies, the subscription goes on delivering, each is counted, and
// the Store logs the transition once each way.
func TestForgedNotices(t *testing.T) {
	srv := startRedis(t)
	p := prefix(t)
	var logs logBuffer
	a := newStore(t, newClient(t, srv.Addr), redisstore.Options{Prefix: p, Logger: logs.logger()})
	b := newStore(t, newClient(t, srv.Addr), redisstore.Options{Prefix: p})
	rt := newTransport(t, a) // its coordinator watches a
	got := make(chan store.Facts, 16)
	stop := a.Watch(func(k string, f store.Facts) {
		if k == "good" {
			got <- f
		}
	})
	defer stop()

	// A notice: v ds du np pu w n, then b e fu mi gr ca cu s, then the
	// lengths of the prober and the name.
	const pace = " 0 0 0 0 0 0 0 0" // b … s, all zero
	ahead := strconv.FormatInt(time.Now().Add(48*time.Hour).UnixMicro(), 10)
	forged := []string{
		"0 0 0 0 0 0 0" + pace + " 9223372036854775807 1\nx", // the issue's: lp+ln overflows
		"0 0 0 0 0 0 0" + pace + " 1 9223372036854775807\nx",
		"0 0 0 0 0 0 0" + pace + " 9223372036854775807 9223372036854775807\nx",
		"0 0 0 0 0 0 0" + pace + " 2 -1\nxy",
		"1 0 0 0 99999999999999999999 0 0" + pace + " 0 1\nx",               // not an int64
		"1 0 0 0 1e19 0 0" + pace + " 0 1\nx",                               // not an integer
		"1 0 0 0 9999999999999999 0 0" + pace + " 0 1\nx",                   // a time past maxMS
		"1 0 0 0 0 0 -1" + pace + " 0 1\nx",                                 // a negative count
		"18014398509481984 0 0 0 0 0 0" + pace + " 0 1\nx",                  // a version past 2^53
		ahead + " 0 0 0 0 0 0" + pace + " 0 1\nx",                           // ahead of any clock
		"1 0 0 0 0 0 0 1073741825 1000000 0 0 0 0 0 0 0 0 0 0 0 1\nx",       // a Burst past maxBurst
		"1 0 0 0 0 0 0 1 -1000000 0 0 0 0 0 0 0 0 0 0 0 1\nx",               // a negative Every
		"1 0 0 0 0 0 0 1 1000000 9007199254740993 0 0 0 0 0 0 0 0 0 0 1\nx", // a Full past 2^53 µs
		"1 0 0 0 0 0 0 1 1000000 1e16 0 0 0 0 0 0 0 0 0 0 1\nx",             // a Full not an integer
		"1 0 0 0 0 0 0 0 0 0 8 -2 0 0 0 0 0 0 0 0 1\nx",                     // a negative Grow
		"1 0 0 0 0 0 0 0 0 0 1048577 0 0 0 0 0 0 0 0 0 1\nx",                // a limit past maxCount
		"1 0 0 0 0 0 0 0 0 0 8 1 nan 0 0 0 1\nx",                            // a CutAt not a number
		"1 0 0 0 0 0 0 0 0 0 8 1 0 99999999999999999999 0 0 0 0 0 0 1\nx",   // a CapUntil not an int64
		"1 0 0 0 0 0 0 0 0 0 0 0 0 0 -1 0 0 0 0 0 1\nx",                     // a negative InFlight
		"1 0 0 0 0 0 0 0 0 0 0 0 0 0 1048577 0 0 0 0 0 1\nx",                // an InFlight past maxCount
		"1 0 0 0 0 0 0" + pace + " 0 0\n",                                   // no name
		"1 0 0 0 0 0 0" + pace + " 0 5\nx",                                  // a name longer than the message
		"1 0 0 0 0 0 0" + pace + " 0 1",                                     // no newline
		"1 0 0 0 0 0 0 0 1\nx",                                              // the old format: 9 fields
		"1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1\nx",                                // 16 fields
		"1 0 0 0 0 0 0" + pace + " 0 1 1\nx",                                // 18 fields
		"1 0 0 0 0 0 0" + pace + " 0 1\nx" + strings.Repeat("r", 1<<20),     // a 1 MB reason
		"1 0 0 0 0 0 0" + strings.Repeat(" 0", 400) + " 0 1\nx",             // a head past its bound
		"",
		"\x00\xff\xfe",
	}
	attacker := newClient(t, srv.Addr)
	for _, m := range forged {
		require.NoError(t, attacker.Publish(context.Background(), p+"changes", m).Err())
	}
	// A Store's notice after them: the listener survived, and delivers.
	now := time.Now()
	_, err := b.Report(context.Background(), "good", store.Report{At: now, Evidence: store.ProviderDown,
		Reason: "502 Bad Gateway", DownFor: time.Minute, NextProbe: now})
	require.NoError(t, err)
	select {
	case f := <-got:
		assert.True(t, f.Down(time.Now()))
	case <-time.After(5 * time.Second):
		t.Fatal("no notice after the forged ones: the subscription died")
	}
	assert.Equal(t, uint64(len(forged)), a.Malformed())
	wantLogs(t, &logs, "dropped malformed", "well-formed again")

	// The process still coordinates: a call answers.
	prov := fleet.NewProvider(fleet.Outage(time.Now(), 0, http.StatusOK))
	defer prov.Close()
	r := send(rt, prov.URL, 0)
	assert.NoError(t, r.err)
	assert.Equal(t, http.StatusOK, r.status)
}

// poisonDown runs an outage of key Y through st's process while an
// attacker rewrites Y's hash once it is down with fields (pairs), and
// checks that every call answers within a probe interval and a margin of
// the provider's recovery: someone probes, whatever the hash said.
func poisonDown(t *testing.T, fields func(now time.Time) []any) {
	srv := startRedis(t)
	p := prefix(t)
	st := newStore(t, boundedClient(t, srv.Addr), redisstore.Options{Prefix: p})
	rt := newTransport(t, st)
	counter := newClient(t, srv.Addr)

	start := time.Now()
	const outage = 1500 * time.Millisecond
	prov := fleet.NewProvider(fleet.Outage(start, outage, http.StatusBadGateway))
	defer prov.Close()
	hash := hashOf(p, nameOf(st, prov.URL, testAuth))
	attacker := newClient(t, srv.Addr)
	poisoned := make(chan int, 1) // the scripts run before the poison
	go func() {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
			if ds, _ := attacker.HGet(context.Background(), hash, "ds").Result(); ds != "" && ds != "0" {
				before := scripts(t, counter)
				if err := attacker.HSet(context.Background(), hash, fields(time.Now())...).Err(); err != nil {
					t.Error(err)
				}
				poisoned <- before
				return
			}
			time.Sleep(10 * time.Millisecond) // polling a real server, bounded
		}
		t.Error("the key never went down in Redis")
		poisoned <- 0
	}()
	bound := start.Add(outage + 2*testProbe + testRelease + time.Second)
	var res []callResult
	within(t, 20*time.Second, "the crowd", func() { res = crowd(t, rt, prov.URL, 0, 5, bound) })
	before := <-poisoned
	n := scripts(t, counter) - before
	// Per probe interval a handful of scripts (a lease asked for, a
	// re-check, the probe's answer), and a few per call.
	took := time.Since(start)
	assert.LessOrEqual(t, n, 5*int(took/testProbe+1)+30, "%d scripts in %v after the poison: a refused lease spun", n, took)
	t.Logf("%d scripts in the %v after the poison; slowest call +%v after the recovery", n, took.Round(time.Millisecond), lastEnd(res).Sub(start.Add(outage)).Round(time.Millisecond))

	// Deleted: the key is clean again at once, in Redis and for calls.
	require.NoError(t, attacker.Del(context.Background(), hash).Err())
	r := send(rt, prov.URL, 0)
	assert.NoError(t, r.err)
	assert.Equal(t, http.StatusOK, r.status)
}

// lastEnd returns the latest end of res.
func lastEnd(res []callResult) time.Time {
	var last time.Time
	for _, r := range res {
		if r.end.After(last) {
			last = r.end
		}
	}
	return last
}

// A key's hash rewritten with a down state and a probe lease ten years
// long: the lease is none this fleet wrote, a probe goes, and the calls
// answer when the provider is back (before: held to their deadline,
// nobody allowed to probe).
func TestPoisonedLeaseTenYears(t *testing.T) {
	poisonDown(t, func(now time.Time) []any {
		return []any{"v", clockVersion(), "ds", ms(now), "du", ms(now.Add(tenYears)), "p", "evil", "pu", ms(now.Add(tenYears))}
	})
}

// A lease end above int64 (1e19): Lua and Go read it alike, as nothing;
// no refused lease spins (before: 11,000–17,000 TakeProbe scripts in 3 s,
// past the calls' deadlines).
func TestPoisonedLeaseBeyondInt64(t *testing.T) {
	poisonDown(t, func(now time.Time) []any {
		return []any{"v", clockVersion(), "p", "evil", "pu", "10000000000000000000"}
	})
}

// NaN, infinities, a negative and a 1 MB reason in the hash: read as
// nothing or dropped.
func TestPoisonedFieldsMalformed(t *testing.T) {
	poisonDown(t, func(now time.Time) []any {
		return []any{"v", "nan", "du", "inf", "np", "-inf", "p", "evil", "pu", "-5", "w", "1e400", "r", strings.Repeat("r", 1<<20)}
	})
}

// A ten-year server wait, in the hash or only in a forged notice: calls
// go on (a wait longer than any this process honours is read as none),
// the Store never sets the hash's TTL beyond its own lifetimes, and the
// key is clean once the hash is deleted (before: every call failed at
// once, the TTL became ten years, and the process refused calls after the
// hash was deleted, until it restarted).
func TestPoisonedWait(t *testing.T) {
	srv := startRedis(t)
	p := prefix(t)
	st := newStore(t, boundedClient(t, srv.Addr), redisstore.Options{Prefix: p})
	rt := newTransport(t, st)
	var first atomic.Bool
	prov := fleet.NewProvider(func(time.Time, []fleet.Request) fleet.Answer {
		if first.CompareAndSwap(false, true) {
			return fleet.Answer{Status: http.StatusBadGateway} // makes the process report, and read the hash
		}
		return fleet.Answer{Status: http.StatusOK}
	})
	defer prov.Close()
	name := nameOf(st, prov.URL, testAuth)
	hash := hashOf(p, name)
	attacker := newClient(t, srv.Addr)
	ctx := context.Background()
	wait := time.Now().Add(tenYears)
	require.NoError(t, attacker.HSet(ctx, hash, "v", clockVersion(), "w", ms(wait), "r", "429 Too Many Requests").Err())

	for i := range 3 {
		r := send(rt, prov.URL, 0)
		require.NoError(t, r.err, "call %d", i)
		assert.Equal(t, http.StatusOK, r.status, "call %d", i)
	}
	withinHorizon(t, attacker, hash)

	// Deleted: calls go.
	require.NoError(t, attacker.Del(ctx, hash).Err())
	r := send(rt, prov.URL, 0)
	assert.NoError(t, r.err)
	assert.Equal(t, http.StatusOK, r.status)

	// Only in a forged notice.
	heard := make(chan struct{}, 1)
	stop := st.Watch(func(k string, f store.Facts) {
		if k == name && f.Waiting(time.Now()) {
			heard <- struct{}{}
		}
	})
	defer stop()
	notice := clockVersion() + " 0 0 0 0 " + ms(wait) + " 0 0 0 0 0 0 0 0 0 0 0 0 0 0 " + strconv.Itoa(len(name)) + "\n" + name + "429 Too Many Requests"
	require.NoError(t, attacker.Publish(ctx, p+"changes", notice).Err())
	select {
	case <-heard:
	case <-time.After(5 * time.Second):
		t.Fatal("the forged notice never arrived")
	}
	for i := range 3 {
		r := send(rt, prov.URL, 0)
		assert.NoError(t, r.err, "call %d after the forged notice", i)
		assert.Equal(t, http.StatusOK, r.status, "call %d after the forged notice", i)
	}
}

// holeProxy relays TCP connections to a server, until black-holed: then
// the connections open at that moment stay open and silent — what is
// written to them is taken and dropped, nothing comes back — as behind a
// NAT or a failover that neither delivers nor closes, while new
// connections are relayed as before.
type holeProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[*holeConn]struct{}
	wg    sync.WaitGroup
}

// holeConn is one relayed connection.
type holeConn struct {
	down, up net.Conn
	hole     atomic.Bool
}

func newHoleProxy(t *testing.T, target string) *holeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &holeProxy{ln: ln, target: target, conns: map[*holeConn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.down.Close()
			c.up.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *holeProxy) addr() string { return p.ln.Addr().String() }

func (p *holeProxy) accept() {
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			down.Close()
			continue
		}
		c := &holeConn{down: down, up: up}
		p.mu.Lock()
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { c.relay(down, up) })
		p.wg.Go(func() { c.relay(up, down) })
	}
}

// relay copies from src to dst until src fails, dropping what it reads
// once the connection is black-holed.
func (c *holeConn) relay(src, dst net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !c.hole.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// blackHole silences every connection open now.
func (p *holeProxy) blackHole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.hole.Store(true)
	}
}

// A process whose open connections to Redis are black-holed (new ones
// fine): its subscription finds out and subscribes again within a few
// Timeouts, and meanwhile the process reads the key it has calls for
// again once a probe interval, so another process's Retry-After holds its
// calls (before: the subscription never noticed, and 5 of 5 calls went
// out inside the wait).
func TestBlackHoledSubscription(t *testing.T) {
	srv := startRedis(t)
	p := prefix(t)
	px := newHoleProxy(t, srv.Addr)
	const timeout = 100 * time.Millisecond // the subscription pings after 400 ms of silence
	a := newStore(t, boundedClient(t, px.addr()), redisstore.Options{Prefix: p, Timeout: timeout})
	b := newStore(t, boundedClient(t, srv.Addr), redisstore.Options{Prefix: p})
	rtA, rtB := newTransport(t, a), newTransport(t, b)

	var (
		mu     sync.Mutex
		waitAt time.Time // when B's 429 was answered
	)
	const retryAfter = 4 * time.Second
	holed := fleet.NewProvider(func(at time.Time, seen []fleet.Request) fleet.Answer {
		mu.Lock()
		defer mu.Unlock()
		if waitAt.IsZero() && len(seen) >= 2 {
			waitAt = at
			return fleet.Answer{Status: http.StatusTooManyRequests, RetryAfter: strconv.Itoa(int(retryAfter / time.Second))}
		}
		return fleet.Answer{Status: http.StatusOK}
	})
	defer holed.Close()

	// Both know the key; A's pool holds a connection.
	require.Equal(t, http.StatusOK, sendAs(rtA, holed.URL, testAuth, 0, 5*time.Second).status)
	require.Equal(t, http.StatusOK, sendAs(rtB, holed.URL, testAuth, 1, 5*time.Second).status)
	_, err := a.Load(context.Background(), "warm", time.Now())
	require.NoError(t, err)
	heard := make(chan string, 64)
	stop := a.Watch(func(k string, _ store.Facts) {
		select {
		case heard <- k:
		default:
		}
	})
	defer stop()

	px.blackHole()
	holedAt := time.Now()
	// B meets a 429 with Retry-After: shared through Redis.
	var wg sync.WaitGroup
	wg.Go(func() {
		r := sendAs(rtB, holed.URL, testAuth, 1, 10*time.Second)
		assert.NoError(t, r.err, "B's call")
	})
	var end time.Time
	for deadline := time.Now().Add(5 * time.Second); end.IsZero(); {
		mu.Lock()
		if !waitAt.IsZero() {
			end = waitAt.Add(retryAfter)
		}
		mu.Unlock()
		require.True(t, time.Now().Before(deadline), "B met no 429")
		time.Sleep(5 * time.Millisecond) // polling the provider, bounded
	}

	// A calls, one every 100 ms, for 3 s after the drop.
	var res []callResult
	var rmu sync.Mutex
	calls := 0
	for ; time.Since(holedAt) < 3*time.Second; calls++ {
		wg.Go(func() {
			r := sendAs(rtA, holed.URL, testAuth, 0, 10*time.Second)
			rmu.Lock()
			res = append(res, r)
			rmu.Unlock()
		})
		time.Sleep(100 * time.Millisecond) // spacing the calls
	}
	// Meanwhile the subscription came back: a notice published now is
	// heard.
	for len(heard) > 0 {
		<-heard
	}
	now := time.Now()
	_, err = b.Report(context.Background(), "marker", store.Report{At: now, Evidence: store.ProviderDown, DownFor: time.Second, NextProbe: now})
	require.NoError(t, err)
	timeoutC := time.After(3 * time.Second)
	for k := ""; k != "marker"; {
		select {
		case k = <-heard:
		case <-timeoutC:
			t.Fatalf("A heard nothing published %v after its connections were black-holed", time.Since(holedAt).Round(time.Millisecond))
		}
	}
	wg.Wait()

	// A few probe intervals after the drop (a re-read that met a
	// black-holed connection costs one interval in-process), A sent
	// nothing before B's wait was over.
	settled := holedAt.Add(4 * testProbe)
	early, late := 0, 0
	for _, r := range holed.Requests() {
		if r.Proc == 0 && r.At.After(holedAt) && r.At.Before(end) {
			early++
			if r.At.After(settled) {
				late++
			}
		}
	}
	t.Logf("A's %d calls: %d requests inside B's wait, %d of them after %v", calls, early, late, settled.Sub(holedAt))
	assert.Zero(t, late, "A's calls were sent inside B's wait %v after its connections were black-holed", settled.Sub(holedAt))
	for i, r := range res {
		assert.NoError(t, r.err, "A's call %d", i)
	}
}

// oneBadKey checks that a store error on key X, whose Redis data or slot
// is broken, leaves key Y coordinated through Redis: process A's calls to
// X fail in Redis (X's provider is down, so A reports); right after, A
// meets a 429 with Retry-After on Y; B, told through Redis, sends nothing
// to Y before the wait is over (before: A's fallback took every key, its
// report of the wait stayed in A, and B sent 10 of 10 calls inside it).
func oneBadKey(t *testing.T, a, b *redisstore.Store, provX *fleet.Provider, authY string, provY *fleet.Provider, waitAt func() time.Time) {
	t.Helper()
	// A's store tells when a Report on X failed.
	nameX, failed := nameOf(a, provX.URL, ""), make(chan struct{}, 1)
	spyA := &testkit.Store{Store: a, After: func(op testkit.Op, key string, err error) {
		if op == testkit.OpReport && err != nil && key == nameX {
			select {
			case failed <- struct{}{}:
			default:
			}
		}
	}}
	rtA, rtB := newTransport(t, spyA), newTransport(t, b)
	nameY := nameOf(a, provY.URL, authY)
	heard := make(chan struct{}, 1)
	stop := b.Watch(func(k string, f store.Facts) {
		if k == nameY && f.Waiting(time.Now()) {
			select {
			case heard <- struct{}{}:
			default:
			}
		}
	})
	defer stop()

	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { sendAs(rtA, provX.URL, "", 0, 2*time.Second) }) // fails: X is down
	select {
	case <-failed:
	case <-time.After(5 * time.Second):
		t.Fatal("A's report on X did not fail")
	}
	wg.Go(func() {
		r := sendAs(rtA, provY.URL, authY, 0, 10*time.Second)
		assert.NoError(t, r.err, "A's call to Y")
	})
	select {
	case <-heard:
	case <-time.After(2 * time.Second):
		t.Error("B heard nothing of A's wait on Y")
	}
	end := waitAt().Add(2 * time.Second)
	require.False(t, end.IsZero(), "A met no 429 on Y")
	var calls sync.WaitGroup
	for range 10 {
		calls.Go(func() {
			r := sendAs(rtB, provY.URL, authY, 1, 10*time.Second)
			assert.NoError(t, r.err, "B's call to Y")
		})
	}
	calls.Wait()
	inside := 0
	for _, r := range provY.Requests() {
		if r.Proc == 1 && r.At.Before(end) {
			inside++
		}
	}
	assert.Zero(t, inside, "%d of B's 10 calls to Y went out inside A's wait", inside)
}

// waitOnce returns a provider that answers its first request 429 with
// Retry-After: 2 and then 200, and when it did.
func waitOnce(t *testing.T) (*fleet.Provider, func() time.Time) {
	var mu sync.Mutex
	var at time.Time
	p := fleet.NewProvider(func(now time.Time, seen []fleet.Request) fleet.Answer {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 {
			at = now
			return fleet.Answer{Status: http.StatusTooManyRequests, RetryAfter: "2"}
		}
		return fleet.Answer{Status: http.StatusOK}
	})
	t.Cleanup(p.Close)
	return p, func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return at
	}
}

// One key's Redis data of the wrong type (WRONGTYPE on every script) beside
// a healthy key.
func TestWrongTypeKey(t *testing.T) {
	srv := startRedis(t)
	p := prefix(t)
	a := newStore(t, boundedClient(t, srv.Addr), redisstore.Options{Prefix: p})
	b := newStore(t, boundedClient(t, srv.Addr), redisstore.Options{Prefix: p})
	provX := fleet.NewProvider(fleet.Outage(time.Now(), time.Hour, http.StatusBadGateway))
	defer provX.Close()
	provY, waitAt := waitOnce(t)
	attacker := newClient(t, srv.Addr)
	require.NoError(t, attacker.RPush(context.Background(), hashOf(p, nameOf(a, provX.URL, "")), "not a hash").Err())
	oneBadKey(t, a, b, provX, testAuth, provY, waitAt)
}

// One dead master in a Cluster beside two healthy ones: the keys on the
// healthy masters keep coordinating through Redis.
func TestDeadClusterMaster(t *testing.T) {
	c := startCluster(t)
	cluster := func() *redis.ClusterClient {
		cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = cl.Close() })
		return cl
	}
	p := prefix(t)
	clA := cluster()
	a := newStore(t, clA, redisstore.Options{Prefix: p})
	b := newStore(t, cluster(), redisstore.Options{Prefix: p})
	ctx := context.Background()
	master := func(key string) string {
		m, err := clA.MasterForKey(ctx, key)
		require.NoError(t, err)
		return m.Options().Addr
	}
	// X on a master that does not carry the changes channel (whose
	// master's death would silence notices fleet-wide: see docs/redis.md).
	var provX *fleet.Provider
	for provX == nil || master(hashOf(p, nameOf(a, provX.URL, ""))) == master(p+"changes") {
		provX = fleet.NewProvider(fleet.Outage(time.Now(), time.Hour, http.StatusBadGateway))
		t.Cleanup(provX.Close)
	}
	provY, waitAt := waitOnce(t)
	deadAddr := master(hashOf(p, nameOf(a, provX.URL, "")))
	authY := ""
	for i := 0; authY == ""; i++ {
		auth := "Bearer sk-cluster-" + strconv.Itoa(i)
		if master(hashOf(p, nameOf(a, provY.URL, auth))) != deadAddr {
			authY = auth
		}
	}
	c.Kill(deadAddr)
	oneBadKey(t, a, b, provX, authY, provY, waitAt)
}

// Close on a Redis that accepts connections and never answers, with a
// subscription and a script under way: at most Timeout and a second, and
// with the client's ContextTimeoutEnabled (as the package doc sets it) no
// goroutine left; with go-redis's defaults still bounded, with an error
// (before: 8.9 s, and never with ReadTimeout -1).
func TestCloseBlackHole(t *testing.T) {
	const timeout = 100 * time.Millisecond
	for _, tc := range []struct {
		name    string
		opts    redis.Options
		cleanly bool
	}{
		{"ContextTimeoutEnabled", redis.Options{ContextTimeoutEnabled: true}, true},
		{"defaults", redis.Options{}, false},
		{"ReadTimeout -1", redis.Options{ReadTimeout: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.Addr = blackhole(t)
			client := redis.NewClient(&opts)
			t.Cleanup(func() { _ = client.Close() })
			before := runtime.NumGoroutine()
			st, err := redisstore.New(client, redisstore.Options{Secret: testSecret, Timeout: timeout})
			require.NoError(t, err)
			stop := st.Watch(func(string, store.Facts) {})
			defer stop()
			_, err = st.Load(context.Background(), "k", time.Now())
			require.Error(t, err)

			began := time.Now()
			err = st.Close()
			took := time.Since(began)
			assert.LessOrEqual(t, took, timeout+time.Second+200*time.Millisecond, "Close took %v", took)
			t.Logf("Close took %v: %v", took.Round(time.Millisecond), err)
			require.NoError(t, st.Close(), "a second Close")
			if tc.cleanly {
				assert.NoError(t, err)
				assert.LessOrEqual(t, runtime.NumGoroutine(), before+1, "goroutines left after Close")
			} else if err != nil {
				assert.Contains(t, err.Error(), "ContextTimeoutEnabled")
			}
			// Closing the client ends whatever still waits on it, before
			// the leak check.
			_ = client.Close()
		})
	}
}

// More retry leases than any process holds (2^20 + 1 live members of the
// key's sorted set) are read as the most a process would write: the key
// answers (its budget full), it does not fail.
func TestPoisonedRetryCount(t *testing.T) {
	srv := startRedis(t)
	p := prefix(t)
	attacker := newClient(t, srv.Addr)
	st := newStore(t, newClient(t, srv.Addr), redisstore.Options{Prefix: p, Timeout: roomyTimeout})
	ctx, now := context.Background(), time.Now()
	name := st.Key("api.example.com", []byte("k"))
	kr := p + "{" + name + "}:retries"
	until := float64(now.Add(5 * time.Minute).UnixMilli())
	const n = 1<<20 + 1
	for i := 0; i < n; i += 50000 {
		pipe := attacker.Pipeline()
		for j := i; j < min(i+50000, n); j++ {
			pipe.ZAdd(ctx, kr, redis.Z{Score: until, Member: "h" + strconv.Itoa(j)})
		}
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
	}
	f, err := st.Load(ctx, name, now)
	require.NoError(t, err, "a count past its bound is read as the most a process would write, or nothing, not a failure of the key")
	assert.LessOrEqual(t, f.Retries, 1<<20)

	_, ok, err := st.TakeRetry(ctx, name, store.Lease{Holder: "me", At: now, Until: now.Add(time.Minute)}, 3)
	require.NoError(t, err)
	assert.False(t, ok)
}
