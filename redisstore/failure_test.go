package redisstore_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/redisstore"
	"github.com/llmretry/llmretry/redisstore/internal/fleet"
	"github.com/llmretry/llmretry/store"
	"github.com/redis/go-redis/v9"
)

// logBuffer collects the messages of a Store's log records, at Info and
// above as slog's own handlers do by default. It is a slog.Handler.
type logBuffer struct {
	mu   sync.Mutex
	msgs []string
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(b) }

func (b *logBuffer) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (b *logBuffer) Handle(_ context.Context, r slog.Record) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.msgs = append(b.msgs, r.Message)
	return nil
}

// WithAttrs and WithGroup return b: only the messages are kept.
func (b *logBuffer) WithAttrs([]slog.Attr) slog.Handler { return b }
func (b *logBuffer) WithGroup(string) slog.Handler      { return b }

// messages returns the records' messages.
func (b *logBuffer) messages() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.msgs)
}

// wantLogs checks that a Store logged exactly the records want names (by
// a part of their message).
func wantLogs(t *testing.T, b *logBuffer, want ...string) {
	t.Helper()
	got := b.messages()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.Contains(got[i], want[i])
	}
	if !ok {
		t.Errorf("the Store logged %q, want records about %q", got, want)
	}
}

const (
	testProbe   = 300 * time.Millisecond
	testRelease = 50 * time.Millisecond
)

// newTransport returns a coordinated Transport over st with a short probe
// interval; its base's connections are closed when t ends.
func newTransport(t *testing.T, st store.Store) http.RoundTripper {
	t.Helper()
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.Proxy = nil
	t.Cleanup(base.CloseIdleConnections)
	rt, err := llmretry.NewCoordinated(base, llmretry.Policy{
		Waits:   []time.Duration{200 * time.Millisecond, 400 * time.Millisecond},
		Reserve: 100 * time.Millisecond,
	}, coordination.Config{ProbeInterval: testProbe, ReleaseSpread: testRelease, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// callResult is what one call through a Transport came to.
type callResult struct {
	status   int
	err      error
	sent     int // attempts that went out not as the probe
	end      time.Time
	attempts []llmretry.Attempt
}

// send makes one call as process proc through rt, under a 10-s deadline.
func send(rt http.RoundTripper, url string, proc int) callResult {
	return sendAs(rt, url, "Bearer sk-failure-test", proc, 10*time.Second)
}

// crowd sends n calls at once as process proc and checks that every one
// answered 200 by latest.
func crowd(t *testing.T, rt http.RoundTripper, url string, proc, n int, latest time.Time) []callResult {
	t.Helper()
	out := make([]callResult, n)
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() { out[i] = send(rt, url, proc) })
	}
	wg.Wait()
	for i, r := range out {
		if r.err != nil || r.status != http.StatusOK {
			t.Errorf("call %d: status %d, error %v", i, r.status, r.err)
		}
		if r.end.After(latest) {
			t.Errorf("call %d answered %v after the bound", i, r.end.Sub(latest))
		}
	}
	return out
}

// A Redis that refuses connections: every call answers through the
// outage, coordinated in-process, and the Store logs the failure once.
func TestRedisUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	var logs logBuffer
	st := newStore(t, newClient(t, addr), redisstore.Options{Logger: logs.logger()})
	rt := newTransport(t, st)

	start := time.Now()
	const outage = 1500 * time.Millisecond
	prov := fleet.NewProvider(fleet.Outage(start, outage, http.StatusBadGateway))
	defer prov.Close()
	const calls = 10
	crowd(t, rt, prov.URL, 0, calls, start.Add(outage+testProbe+testRelease+time.Second))
	during := arrivedBefore(prov.Requests(), start.Add(outage))
	// The calls' first failures (they start together), then one probe at
	// most every 0.8 probe intervals.
	if max := calls + 1 + int(outage/(testProbe*8/10)); during > max {
		t.Errorf("%d requests reached the provider during the outage, want at most %d: not coordinated in-process", during, max)
	}
	wantLogs(t, &logs, "Redis calls fail")
}

// blackhole is a server that accepts connections and never answers: a
// Redis too slow to be of use.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(io.Discard, c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// A Redis that never answers: each Store call fails within its Timeout
// (the client's own read timeout is far longer), every call answers
// through the outage, and Close leaves no goroutine behind.
func TestRedisSlow(t *testing.T) {
	addr := blackhole(t)
	client := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 2 * time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	var logs logBuffer
	const timeout = 100 * time.Millisecond
	st := newStore(t, client, redisstore.Options{Timeout: timeout, Logger: logs.logger()})

	began := time.Now()
	_, err := st.Load(context.Background(), st.Key("api.example.com", nil), began)
	if took := time.Since(began); err == nil || took > timeout+200*time.Millisecond {
		t.Fatalf("Load on a Redis that never answers: %v after %v (Timeout %v)", err, took, timeout)
	}
	if !strings.HasPrefix(err.Error(), "redisstore: load: ") {
		t.Errorf("error %q", err)
	}

	rt := newTransport(t, st)
	start := time.Now()
	const outage = 1500 * time.Millisecond
	prov := fleet.NewProvider(fleet.Outage(start, outage, http.StatusBadGateway))
	defer prov.Close()
	crowd(t, rt, prov.URL, 0, 10, start.Add(outage+testProbe+testRelease+time.Second+timeout))
	wantLogs(t, &logs, "Redis calls fail")
}

// Redis killed and started again (empty): the processes coordinate on
// their own meanwhile, then through Redis again; each Store logs the
// failure and the return once.
func TestRedisRejoin(t *testing.T) {
	srv := startRedis(t)
	var logsA, logsB logBuffer
	p := prefix(t)
	stA := newStore(t, newClient(t, srv.Addr), redisstore.Options{Prefix: p, Logger: logsA.logger()})
	stB := newStore(t, newClient(t, srv.Addr), redisstore.Options{Prefix: p, Logger: logsB.logger()})
	a, b := newTransport(t, stA), newTransport(t, stB)

	var (
		mu     sync.Mutex
		downAt time.Time // the current outage's start; zero before the first
	)
	prov := fleet.NewProvider(func(at time.Time, _ []fleet.Request) fleet.Answer {
		mu.Lock()
		defer mu.Unlock()
		if !downAt.IsZero() && at.Before(downAt.Add(time.Second)) {
			return fleet.Answer{Status: http.StatusBadGateway}
		}
		return fleet.Answer{Status: http.StatusOK}
	})
	defer prov.Close()
	outage := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		downAt = time.Now()
		return downAt
	}

	// Both processes know the key.
	crowd(t, a, prov.URL, 0, 1, time.Now().Add(time.Second))
	crowd(t, b, prov.URL, 1, 1, time.Now().Add(time.Second))

	// Redis dies; an outage passes, each process coordinating alone.
	srv.Kill()
	start := outage()
	bound := time.Second + testProbe + testRelease + time.Second
	var wg sync.WaitGroup
	wg.Go(func() { crowd(t, a, prov.URL, 0, 5, start.Add(bound)) })
	crowd(t, b, prov.URL, 1, 5, start.Add(bound))
	wg.Wait()
	alone := time.Now()

	// Redis is back, empty.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		_, errA := stA.Load(context.Background(), "x", time.Now())
		_, errB := stB.Load(context.Background(), "x", time.Now())
		if errA == nil && errB == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis did not answer again within 5 s: %v, %v", errA, errB)
		}
		time.Sleep(50 * time.Millisecond) // polling a restarted server, bounded
	}
	// The coordinators use Redis again one probe interval after their last
	// failed store call.
	time.Sleep(time.Until(alone.Add(testProbe)))

	// A meets a new outage; B, told through Redis, sends nothing into it
	// but probes.
	notices := make(chan store.Facts, 64)
	stopWatch := stB.Watch(func(_ string, f store.Facts) {
		select {
		case notices <- f:
		default:
		}
	})
	defer stopWatch()
	start = outage()
	first := make(chan callResult, 1)
	go func() { first <- send(a, prov.URL, 0) }()
	// B's calls go once B has heard of A's failure (B's coordinator hears
	// of it in the same dispatch as this watcher).
	for timeout := time.After(5 * time.Second); ; {
		select {
		case f := <-notices:
			if !f.Down(time.Now()) {
				continue
			}
		case <-timeout:
			t.Fatal("B heard nothing of A's failure within 5 s")
		}
		break
	}
	for i, r := range crowd(t, b, prov.URL, 1, 5, start.Add(bound)) {
		for _, at := range r.attempts {
			if !at.Probe && at.Response != nil && at.Response.StatusCode == http.StatusBadGateway {
				t.Errorf("B's call %d was sent into the outage A had reported (attempt %d)", i, at.N)
			}
		}
	}
	if r := <-first; r.err != nil || r.status != http.StatusOK {
		t.Errorf("A's call: %d %v", r.status, r.err)
	}
	wantLogs(t, &logsA, "Redis calls fail", "Redis answers again")
	wantLogs(t, &logsB, "Redis calls fail", "Redis answers again")
}
