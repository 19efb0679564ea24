package coord

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The count sums its stripes; a count with calls in does not close; a
// closed count takes no call.
func TestInflight(t *testing.T) {
	var c inflight
	assert.Zero(t, c.load(), "the zero inflight counts nothing")
	var wg sync.WaitGroup
	stripes := make(chan int, 100)
	for range 100 {
		wg.Go(func() {
			i, ok := c.enter()
			require.True(t, ok)
			stripes <- i
		})
	}
	wg.Wait()
	close(stripes)
	assert.Equal(t, int32(100), c.load())
	assert.False(t, c.close(), "calls are in")
	last, ok := c.enter()
	require.True(t, ok, "a count that failed to close stays open")
	for i := range stripes {
		c.leave(i)
	}
	assert.Equal(t, int32(1), c.load())
	c.leave(last)
	assert.Zero(t, c.load())
	assert.True(t, c.close())
	_, ok = c.enter()
	assert.False(t, ok, "closed: the caller looks the key up anew")
	assert.Zero(t, c.load(), "a refused call adds nothing")
}
