// Package storetest is the old home of the store contract's test, kept
// for one release so that tests written against it still compile. It
// forwards to github.com/llmretry/llmretry/store/storetest.
//
// Deprecated: use github.com/llmretry/llmretry/store/storetest.
package storetest

import (
	"testing"

	"github.com/llmretry/llmretry/store"
	current "github.com/llmretry/llmretry/store/storetest"
)

// NoticeWait is how long Run waits for a Watch notice before it fails.
//
// Deprecated: use storetest.NoticeWait of
// github.com/llmretry/llmretry/store/storetest.
const NoticeWait = current.NoticeWait

// Run tests the stores that stores returns, as Run of
// github.com/llmretry/llmretry/store/storetest does (llmretry.Store is
// store.Store).
//
// Deprecated: use storetest.Run of
// github.com/llmretry/llmretry/store/storetest.
func Run(t *testing.T, stores func(t *testing.T) []store.Store) {
	t.Helper()
	current.Run(t, stores)
}
