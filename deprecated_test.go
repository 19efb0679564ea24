package llmretry

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/llmretry/llmretry/store"
	"github.com/stretchr/testify/assert"
)

// Code written against the old names compiles: a store of either kind
// serves as the other.
var (
	_ Store       = NewMemoryStore()
	_ store.Store = Store(nil)
)

// The deprecated names are the store package's own types, constants and
// sentinel, not copies of them.
func TestDeprecatedStoreNames(t *testing.T) {
	for _, pair := range []struct{ old, now reflect.Type }{
		{reflect.TypeFor[Store](), reflect.TypeFor[store.Store]()},
		{reflect.TypeFor[Facts](), reflect.TypeFor[store.Facts]()},
		{reflect.TypeFor[Report](), reflect.TypeFor[store.Report]()},
		{reflect.TypeFor[Lease](), reflect.TypeFor[store.Lease]()},
		{reflect.TypeFor[Evidence](), reflect.TypeFor[store.Evidence]()},
	} {
		assert.Equal(t, pair.now, pair.old, "%v is an alias", pair.old)
	}
	assert.Equal(t, []store.Evidence{store.NoEvidence, store.ProviderUp, store.ProviderDown},
		[]Evidence{NoEvidence, ProviderUp, ProviderDown})
	assert.Same(t, store.ErrUnreachable, ErrStoreUnreachable, "the same value")
	err := fmt.Errorf("redisstore: load: %w", store.ErrUnreachable)
	assert.True(t, errors.Is(err, ErrStoreUnreachable), "errors.Is matches the old name")
	assert.EqualError(t, ErrStoreUnreachable, "llmretry: store unreachable", "its text is unchanged")
}
