package testkit

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmretry/llmretry/store"
)

// Op names a store.Store operation, as Store counts and reports them.
type Op int

// The operations a Store counts. (Key, which only names a key, and Watch
// are not counted.)
const (
	OpLoad Op = iota
	OpReport
	OpTakeProbe
	OpTakeRetry
	OpTakeSend
	OpRelease
	numOps
)

// String names the operation as the store.Store method it is.
func (op Op) String() string {
	switch op {
	case OpLoad:
		return "Load"
	case OpReport:
		return "Report"
	case OpTakeProbe:
		return "TakeProbe"
	case OpTakeRetry:
		return "TakeRetry"
	case OpTakeSend:
		return "TakeSend"
	case OpRelease:
		return "Release"
	}
	return "unknown"
}

// Store is a store.Store for tests: it passes every operation to the
// store it wraps, counting them (Calls), and misbehaves as its fields say:
// an operation may fail (Fail), answers may have lost their versions
// (Forgetful), the probe lease may be refused with facts no process wrote
// (Liar), notices may stop (Deaf, until Reconnect), and a test may watch
// each operation's result (After).
//
// Set its fields before the store is first used, and leave them; the zero
// Store is not usable: its Store must be set. A Store is safe for
// concurrent use if the store it wraps is, and its Fail and After are.
type Store struct {
	// Store is the store every operation goes to, unless Fail fails it.
	store.Store

	// Fail, if set, is asked before each operation on key: an error it
	// returns is the operation's, and the wrapped store is not called (a
	// key Redis holds in the wrong type, say, or a store unreachable:
	// wrap store.ErrUnreachable).
	Fail func(op Op, key string) error
	// Forgetful: every answer and notice says Version 0, as a store
	// restarted empty may.
	Forgetful bool
	// Liar: TakeProbe refuses every lease with facts that say the key is
	// down, nobody probes and the probe is due, under a new Version each
	// time: a store whose records no process of the fleet wrote.
	Liar bool
	// Deaf: Watch hears no notice (its subscription was silently
	// dropped) until Reconnect.
	Deaf bool
	// After, if set, is called after each operation on key with its
	// error (Fail's included), before the operation returns.
	After func(op Op, key string, err error)

	calls [numOps]atomic.Int64
	lies  atomic.Uint64
	mu    sync.Mutex
	deaf  []func(string, store.Facts) // Deaf's watchers, for Reconnect
}

// Calls returns how many operations of the kinds ops (of every kind if
// none) were asked of s, those Fail failed included.
func (s *Store) Calls(ops ...Op) int64 {
	if len(ops) == 0 {
		ops = []Op{OpLoad, OpReport, OpTakeProbe, OpTakeRetry, OpTakeSend, OpRelease}
	}
	var n int64
	for _, op := range ops {
		n += s.calls[op].Load()
	}
	return n
}

// Reconnect tells every watcher a Deaf store silenced that notices may
// have been lost (a notice with an empty key), as a store that made its
// subscription again does. Notices stay unheard after it.
func (s *Store) Reconnect() {
	s.mu.Lock()
	fns := slices.Clone(s.deaf)
	s.mu.Unlock()
	for _, fn := range fns {
		fn("", store.Facts{})
	}
}

// begin counts op on key and asks Fail.
func (s *Store) begin(op Op, key string) error {
	s.calls[op].Add(1)
	if s.Fail == nil {
		return nil
	}
	return s.Fail(op, key)
}

// end returns what op on key answered, its version forgotten if Forgetful,
// and tells After.
func (s *Store) end(op Op, key string, f store.Facts, err error) (store.Facts, error) {
	if s.Forgetful {
		f.Version = 0
	}
	if s.After != nil {
		s.After(op, key, err)
	}
	return f, err
}

// Load passes to the wrapped store's Load.
func (s *Store) Load(ctx context.Context, key string, now time.Time) (store.Facts, error) {
	if err := s.begin(OpLoad, key); err != nil {
		return s.end(OpLoad, key, store.Facts{}, err)
	}
	f, err := s.Store.Load(ctx, key, now)
	return s.end(OpLoad, key, f, err)
}

// Report passes to the wrapped store's Report.
func (s *Store) Report(ctx context.Context, key string, r store.Report) (store.Facts, error) {
	if err := s.begin(OpReport, key); err != nil {
		return s.end(OpReport, key, store.Facts{}, err)
	}
	f, err := s.Store.Report(ctx, key, r)
	return s.end(OpReport, key, f, err)
}

// TakeProbe passes to the wrapped store's TakeProbe, unless s is a Liar.
func (s *Store) TakeProbe(ctx context.Context, key string, l store.Lease) (store.Facts, bool, error) {
	if err := s.begin(OpTakeProbe, key); err != nil {
		f, err := s.end(OpTakeProbe, key, store.Facts{}, err)
		return f, false, err
	}
	if s.Liar {
		v := s.lies.Add(1)
		f, err := s.end(OpTakeProbe, key, store.Facts{Version: 1e6 + v, DownSince: l.At.Add(-time.Second), DownUntil: l.At.Add(time.Hour), NextProbe: l.At.Add(-time.Millisecond)}, nil)
		return f, false, err
	}
	f, ok, err := s.Store.TakeProbe(ctx, key, l)
	f, err = s.end(OpTakeProbe, key, f, err)
	return f, ok, err
}

// TakeRetry passes to the wrapped store's TakeRetry.
func (s *Store) TakeRetry(ctx context.Context, key string, l store.Lease, limit int) (store.Facts, bool, error) {
	if err := s.begin(OpTakeRetry, key); err != nil {
		f, err := s.end(OpTakeRetry, key, store.Facts{}, err)
		return f, false, err
	}
	f, ok, err := s.Store.TakeRetry(ctx, key, l, limit)
	f, err = s.end(OpTakeRetry, key, f, err)
	return f, ok, err
}

// TakeSend passes to the wrapped store's TakeSend.
func (s *Store) TakeSend(ctx context.Context, key string, l store.Lease, limit int) (store.Facts, time.Time, bool, error) {
	if err := s.begin(OpTakeSend, key); err != nil {
		f, err := s.end(OpTakeSend, key, store.Facts{}, err)
		return f, time.Time{}, false, err
	}
	f, at, ok, err := s.Store.TakeSend(ctx, key, l, limit)
	f, err = s.end(OpTakeSend, key, f, err)
	return f, at, ok, err
}

// Release passes to the wrapped store's Release.
func (s *Store) Release(ctx context.Context, key, holder string, now time.Time) (store.Facts, error) {
	if err := s.begin(OpRelease, key); err != nil {
		return s.end(OpRelease, key, store.Facts{}, err)
	}
	f, err := s.Store.Release(ctx, key, holder, now)
	return s.end(OpRelease, key, f, err)
}

// Watch passes to the wrapped store's Watch, the notices' versions
// forgotten if Forgetful; a Deaf store keeps fn for Reconnect and tells it
// nothing else.
func (s *Store) Watch(fn func(key string, f store.Facts)) (stop func()) {
	if s.Deaf {
		s.mu.Lock()
		s.deaf = append(s.deaf, fn)
		s.mu.Unlock()
		return func() {}
	}
	if !s.Forgetful {
		return s.Store.Watch(fn)
	}
	return s.Store.Watch(func(key string, f store.Facts) {
		f.Version = 0
		fn(key, f)
	})
}

var _ store.Store = (*Store)(nil)
