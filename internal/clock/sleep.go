// Package clock holds the one way llmretry waits: a sleep that a
// context's end cuts short, used by the core (a retry's wait, Do's) and by
// the coordination engine (a release spread, a paced turn).
package clock

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends, whichever comes first; it returns
// ctx's error if ctx ended first (or had ended already). A d of zero or
// less returns at once.
func Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
