package testkit

import (
	"slices"
	"sync"
)

// Log collects what a callback is told, in order: a Policy's OnAttempt
// records, a coordination.Config's OnHold records. Pass its Add as the
// callback. A Log is safe for concurrent use; the zero Log is empty and
// ready. It keeps what it is given.
type Log[T any] struct {
	mu  sync.Mutex
	all []T
}

// Add appends x.
func (l *Log[T]) Add(x T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, x)
}

// All returns what was added so far, oldest first, in a slice of its own.
func (l *Log[T]) All() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.all)
}

// Take returns what was added since the last Take, oldest first, and
// forgets it.
func (l *Log[T]) Take() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	all := l.all
	l.all = nil
	return all
}
