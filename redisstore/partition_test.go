package redisstore_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmretry/llmretry/redisstore"
	"github.com/llmretry/llmretry/redisstore/internal/fleet"
	"github.com/redis/go-redis/v9"
)

// proxy relays TCP connections to a server until cut: then it drops them
// all and every new one at once, as a network partition that refuses
// would; heal lets them through again.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.setCut(true)
		p.wg.Wait()
	})
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { _, _ = io.Copy(up, c); up.Close() })
		p.wg.Go(func() { _, _ = io.Copy(c, up); c.Close() })
	}
}

// setCut cuts (dropping every connection) or heals the proxy.
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

// scripts returns how many scripts the server c talks to has run.
func scripts(t *testing.T, c *redis.Client) int {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Error(err)
		return 0
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				c, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
				n += c
			}
		}
	}
	return n
}

// A process cut off from Redis for longer than the down state lives
// there (Redis keeps its data) coordinates on its own meanwhile; when the
// partition heals, Redis's older facts do not set it spinning: it asks
// Redis a few times per probe interval, as before.
func TestPartitionHeals(t *testing.T) {
	srv := startRedis(t)
	px := newProxy(t, srv.Addr)
	st := newStore(t, newClient(t, px.addr()), redisstore.Options{Prefix: prefix(t)})
	rt := newTransport(t, st)

	start := time.Now()
	const outage = 3 * time.Second
	prov := fleet.NewProvider(fleet.Outage(start, outage, http.StatusBadGateway))
	defer prov.Close()
	cut := time.AfterFunc(500*time.Millisecond, func() { px.setCut(true) })
	defer cut.Stop()
	// Cut for 4 probe intervals: Redis's down state (3 intervals past the
	// last failure it heard of) lapses meanwhile.
	healAt := start.Add(500*time.Millisecond + 4*testProbe)
	counter := newClient(t, srv.Addr)
	healed := make(chan int, 1) // the scripts run before the partition healed
	heal := time.AfterFunc(time.Until(healAt), func() {
		healed <- scripts(t, counter)
		px.setCut(false)
	})
	defer heal.Stop()
	crowd(t, rt, prov.URL, 0, 5, start.Add(outage+testProbe+testRelease+time.Second))
	after := scripts(t, counter)
	before := <-healed
	since := time.Since(healAt)
	// Per probe interval a process asks for the lease, reports the probe,
	// re-checks: a handful of scripts, and a few more for each call's
	// first failure and release.
	if max := 5*int(since/testProbe+1) + 20; after-before > max {
		t.Errorf("%d scripts in the %v after the partition healed, want at most %d", after-before, since.Round(time.Millisecond), max)
	}
	t.Logf("%d scripts in the %v after the partition healed", after-before, since.Round(time.Millisecond))
}
