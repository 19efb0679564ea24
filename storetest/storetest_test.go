package storetest

import (
	"testing"

	"github.com/llmretry/llmretry"
)

// A test written against the old path, with the old names, still compiles
// and runs the whole contract (here over the in-process store).
func TestRunForwards(t *testing.T) {
	//lint:ignore SA1019 the old spelling, kept compiling on purpose
	Run(t, func(t *testing.T) []llmretry.Store {
		s := llmretry.NewMemoryStore()
		//lint:ignore SA1019 the old spelling, kept compiling on purpose
		return []llmretry.Store{s, s}
	})
}
