package coord_test

import (
	"testing"

	"github.com/llmretry/llmretry/internal/coord"
	"github.com/llmretry/llmretry/store"
	"github.com/llmretry/llmretry/store/storetest"
)

// The in-process store keeps the Store contract (the Redis store runs the
// same checks in redisstore/).
func TestMemoryStoreContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) []store.Store {
		s := coord.NewMemoryStore()
		return []store.Store{s, s}
	})
}
