package coordination

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/llmretry/llmretry/store"
)

// Config turns on coordinated ride-through for a Transport made by
// llmretry.NewCoordinated: what the calls it carries to one provider key
// share, and how (see the package doc).
//
// The zero Config coordinates with the defaults its fields state, in an
// in-process store of the Transport's own, and records no hold. A Config
// is a value: NewCoordinated keeps its own copy and never modifies it; the
// Store and the OnHold it holds are the caller's, shared with whatever
// else holds them. The Transport's coordination is safe for concurrent
// use.
type Config struct {
	// ProbeInterval is the longest time between two probes while a key is
	// down; each interval is a random 0–20 % shorter. Zero means 5 s.
	ProbeInterval time.Duration
	// ReleaseSpread is the window within which the held calls are sent
	// when their key comes back, each at a random moment. Zero means 1 s.
	ReleaseSpread time.Duration
	// RetryBudget is the share (0 to 1) of a key's calls in flight that
	// may be sending a retry on their own schedule at once (Envoy's retry
	// budget). Zero means 0.2; 1 turns the budget off.
	RetryBudget float64
	// MinRetries is the number of concurrent retries the budget always
	// allows. Zero means 3.
	MinRetries int
	// Store keeps the facts the calls share. Nil means an in-process store
	// of the Transport's own (of NewMemoryStore's kind); a shared store
	// (NewMemoryStore's among a process's Transports, redisstore's among a
	// fleet's processes) makes every Transport that uses it coordinate as
	// one. Transports may share a Store; a Transport made with a shared
	// Store watches it for changes for as long as the Transport is
	// reachable.
	Store store.Store
	// OnHold, if set, is called when a call of the Transport is held back
	// before an attempt and again when the hold ends (see Hold). It runs
	// on the held call's goroutine with no lock held, once the shared
	// state is consistent: it delays that call alone, and a panic in it
	// reaches that call's caller and leaves no lease held and no budget
	// spent. Many calls are held at once: it must be safe for concurrent
	// use. Nil records nothing. LogHolds returns one that logs.
	OnHold func(Hold)
}

// Validate reports whether c can be used: nil if it can, else an error
// that names every field that cannot (a negative duration or count, a
// RetryBudget outside 0 to 1 or NaN), one "llmretry: " line each, joined
// with errors.Join. llmretry.NewCoordinated calls it.
func (c Config) Validate() error {
	var errs []error
	if c.ProbeInterval < 0 {
		errs = append(errs, fmt.Errorf("llmretry: coordination.Config.ProbeInterval is negative (%v)", c.ProbeInterval))
	}
	if c.ReleaseSpread < 0 {
		errs = append(errs, fmt.Errorf("llmretry: coordination.Config.ReleaseSpread is negative (%v)", c.ReleaseSpread))
	}
	if math.IsNaN(c.RetryBudget) || c.RetryBudget < 0 || c.RetryBudget > 1 {
		errs = append(errs, fmt.Errorf("llmretry: coordination.Config.RetryBudget is %v, not between 0 and 1", c.RetryBudget))
	}
	if c.MinRetries < 0 {
		errs = append(errs, fmt.Errorf("llmretry: coordination.Config.MinRetries is negative (%d)", c.MinRetries))
	}
	return errors.Join(errs...)
}
