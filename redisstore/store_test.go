package redisstore_test

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/redisstore"
	"github.com/llmretry/llmretry/storetest"
)

// The Store keeps the llmretry.Store contract against a real redis-server,
// with two Stores (two clients) over one server as the fleet.
func TestContract(t *testing.T) {
	srv := startRedis(t)
	storetest.Run(t, func(t *testing.T) []llmretry.Store {
		p := prefix(t)
		return []llmretry.Store{
			newStore(t, newClient(t, srv.Addr), redisstore.Options{Prefix: p}),
			newStore(t, newClient(t, srv.Addr), redisstore.Options{Prefix: p}),
		}
	})
}

// The scripts keep it on miniredis too: a fast check that needs no server.
func TestContractMiniredis(t *testing.T) {
	m := miniredis.RunT(t)
	storetest.Run(t, func(t *testing.T) []llmretry.Store {
		p := prefix(t)
		return []llmretry.Store{
			newStore(t, newClient(t, m.Addr()), redisstore.Options{Prefix: p}),
			newStore(t, newClient(t, m.Addr()), redisstore.Options{Prefix: p}),
		}
	})
}
