package clock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// Sleep waits its time, returns at once for none, and ends with the
// context: at once if it had ended, at its end if it ends first.
func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		assert.NoError(t, Sleep(context.Background(), time.Second))
		assert.Equal(t, time.Second, time.Since(start))
		assert.NoError(t, Sleep(context.Background(), -time.Second))
		assert.Equal(t, time.Second, time.Since(start), "no wait for a negative duration")

		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		assert.ErrorIs(t, Sleep(ctx, time.Hour), context.DeadlineExceeded)
		assert.Equal(t, 1100*time.Millisecond, time.Since(start), "cut short by the context")
		assert.ErrorIs(t, Sleep(ctx, 0), context.DeadlineExceeded, "an ended context, even for no wait")
	})
}
