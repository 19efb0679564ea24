package llmretry

import "github.com/llmretry/llmretry/store"

// The store contract — the interface a store implements, the values its
// methods take and return, and its sentinel error — moved to package
// github.com/llmretry/llmretry/store, which serves store authors the way
// database/sql/driver serves driver authors. The names below keep code
// written against the old ones compiling for one release: each is the
// same type, constant or value as the one it names (an alias, not a copy),
// so a store written for either satisfies both, and errors.Is matches
// ErrStoreUnreachable and store.ErrUnreachable alike. They are kept for
// one release.

// Store is store.Store.
//
// Deprecated: use store.Store.
type Store = store.Store

// Facts is store.Facts.
//
// Deprecated: use store.Facts.
type Facts = store.Facts

// Report is store.Report.
//
// Deprecated: use store.Report.
type Report = store.Report

// Lease is store.Lease.
//
// Deprecated: use store.Lease.
type Lease = store.Lease

// Evidence is store.Evidence.
//
// Deprecated: use store.Evidence.
type Evidence = store.Evidence

// The Evidence values, as store declares them.
const (
	// NoEvidence is store.NoEvidence.
	//
	// Deprecated: use store.NoEvidence.
	NoEvidence = store.NoEvidence
	// ProviderUp is store.ProviderUp.
	//
	// Deprecated: use store.ProviderUp.
	ProviderUp = store.ProviderUp
	// ProviderDown is store.ProviderDown.
	//
	// Deprecated: use store.ProviderDown.
	ProviderDown = store.ProviderDown
)

// ErrStoreUnreachable is store.ErrUnreachable: the same value.
//
// Deprecated: use store.ErrUnreachable.
var ErrStoreUnreachable = store.ErrUnreachable
