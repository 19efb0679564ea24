package llmretry_test

import (
	"testing"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/storetest"
)

// The in-process store keeps the Store contract (the Redis store runs the
// same checks in redisstore/).
func TestMemoryStoreContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) []llmretry.Store {
		s := llmretry.NewMemoryStore()
		return []llmretry.Store{s, s}
	})
}
