package redisstore_test

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/llmretry/llmretry/redisstore"
	"github.com/llmretry/llmretry/store"
	"github.com/llmretry/llmretry/store/storetest"
	"github.com/redis/go-redis/v9"
)

// The Store keeps the store.Store contract against a real redis-server,
// with two Stores (two clients) over one server as the fleet.
func TestContract(t *testing.T) {
	srv := startRedis(t)
	storetest.Run(t, func(t *testing.T) []store.Store {
		p := prefix(t)
		return []store.Store{
			newStore(t, newClient(t, srv.Addr), redisstore.Options{Prefix: p, Timeout: roomyTimeout}),
			newStore(t, newClient(t, srv.Addr), redisstore.Options{Prefix: p, Timeout: roomyTimeout}),
		}
	})
}

// The scripts keep it on miniredis too: a fast check that needs no server.
func TestContractMiniredis(t *testing.T) {
	m := miniredis.RunT(t)
	storetest.Run(t, func(t *testing.T) []store.Store {
		p := prefix(t)
		return []store.Store{
			newStore(t, newClient(t, m.Addr()), redisstore.Options{Prefix: p, Timeout: roomyTimeout}),
			newStore(t, newClient(t, m.Addr()), redisstore.Options{Prefix: p, Timeout: roomyTimeout}),
		}
	})
}

// And on a Redis Cluster of three masters: each script's two keys share
// a hash tag, so every operation runs on one slot; changes reach every
// subscriber whichever node they were published on.
func TestContractCluster(t *testing.T) {
	c := startCluster(t)
	cluster := func(t *testing.T) *redis.ClusterClient {
		cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
		t.Cleanup(func() { _ = cl.Close() })
		return cl
	}
	storetest.Run(t, func(t *testing.T) []store.Store {
		p := prefix(t)
		return []store.Store{
			newStore(t, cluster(t), redisstore.Options{Prefix: p, Timeout: roomyTimeout}),
			newStore(t, cluster(t), redisstore.Options{Prefix: p, Timeout: roomyTimeout}),
		}
	})
}
