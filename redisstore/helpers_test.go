package redisstore_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/llmretry/llmretry/redisstore"
	"github.com/llmretry/llmretry/redisstore/internal/redisserver"
	"github.com/redis/go-redis/v9"
)

// testSecret is the fleet's HMAC secret in the tests.
var testSecret = []byte("redisstore-test-secret-0123456789")

// startRedis starts a redis-server for t, ended when t ends. Without
// redis-server installed the test is skipped, unless it runs in CI (CI set),
// where it fails: CI must test against a real server.
func startRedis(t *testing.T) *redisserver.Server {
	t.Helper()
	if !redisserver.Installed() {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server is not installed (CI must install it: apt-get install -y redis-server)")
		}
		t.Skip("redis-server is not installed (apt-get install -y redis-server)")
	}
	srv, err := redisserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// startCluster starts a three-master Redis Cluster for t, ended when t
// ends; skipped or failed like startRedis without redis-server.
func startCluster(t *testing.T) *redisserver.Cluster {
	t.Helper()
	if !redisserver.Installed() {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server is not installed")
		}
		t.Skip("redis-server is not installed")
	}
	c, err := redisserver.StartCluster()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// newClient returns a client of addr, closed when t ends.
func newClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newStore returns a Store over client with opts (the test secret if none),
// closed when t ends (before the client: cleanups run last first).
// roomyTimeout is Options.Timeout for tests that are not about timeouts
// (the contract, the scripts): on a loaded 2-core machine under -race a
// burst of concurrent scripts overran the default 250 ms.
const roomyTimeout = 5 * time.Second

func newStore(t *testing.T, client redis.UniversalClient, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	if opts.Secret == nil {
		opts.Secret = testSecret
	}
	st, err := redisstore.New(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// prefix returns a Redis prefix unique to t.
func prefix(t *testing.T) string {
	r := strings.NewReplacer(" ", "_", "/", ":", "{", "(", "}", ")")
	return "test:" + r.Replace(t.Name()) + ":"
}
