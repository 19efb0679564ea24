package coordination

import (
	"github.com/llmretry/llmretry/internal/memstore"
	"github.com/llmretry/llmretry/store"
)

// NewMemoryStore returns an empty in-process store.Store: the kind
// llmretry.NewCoordinated makes for each Transport whose Config.Store is
// nil. Share one among several Transports of a process (with different
// policies, say) to have their calls to a provider coordinate as one.
//
// It names a key by its host and 8 hex digits of a hash of the credential
// seeded per store (the same in every Transport that shares it). It is
// safe for concurrent use, starts no goroutine, and forgets a key a minute
// after its last fact lapsed. It also keeps which provider keys' models
// refused a prefill (store.PrefillRefusals), for the Transports that share
// it. The caller owns it, and may drop it once no
// Transport uses it. Its facts live only in this process: a fleet shares a
// store such as redisstore's.
func NewMemoryStore() store.Store { return memstore.New() }
