package testkit_test

import (
	"sync"
	"testing"

	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
)

// A Log keeps what it is told, in order, from many goroutines at once;
// All copies it, Take hands it over and forgets it.
func TestLog(t *testing.T) {
	var l testkit.Log[int]
	assert.Empty(t, l.All(), "the zero Log is empty")
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() { l.Add(i) })
	}
	wg.Wait()
	assert.Len(t, l.All(), 100)
	all := l.All()
	all[0] = -1
	assert.NotEqual(t, -1, l.All()[0], "All's slice is the caller's")

	var seq testkit.Log[string]
	add := seq.Add // as a callback
	add("a")
	add("b")
	assert.Equal(t, []string{"a", "b"}, seq.Take())
	assert.Empty(t, seq.Take(), "taken")
	add("c")
	assert.Equal(t, []string{"c"}, seq.All())
}
