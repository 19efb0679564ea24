package coord

import (
	"math/rand/v2"
	"sync/atomic"
)

// inflight counts the calls inside RoundTrip for one provider key. Every
// coordinated call adds itself and leaves, so one busy key would have all
// its calls write one cache line; the count is striped over lines instead,
// each call on a stripe of its own choosing, and summed only when asked
// (by the retry budget and the sweep).
//
// A swept key is closed: a call that finds it closed after adding itself
// leaves again and looks the key up anew. The zero inflight is open and
// counts nothing.
type inflight struct {
	stripes [inflightStripes]struct {
		n atomic.Int32
		_ [60]byte // one stripe per cache line
	}
	closed atomic.Bool
}

// inflightStripes is how many stripes a count has: enough for the cores of
// a machine that runs an agent host to rarely share one.
const inflightStripes = 8

// enter adds a call and returns its stripe, or false (and adds nothing) if
// the count is closed.
func (c *inflight) enter() (int, bool) {
	i := int(rand.Uint32() % inflightStripes)
	c.stripes[i].n.Add(1)
	if c.closed.Load() {
		c.stripes[i].n.Add(-1)
		return 0, false
	}
	return i, true
}

// leave removes a call that entered on stripe i.
func (c *inflight) leave(i int) { c.stripes[i].n.Add(-1) }

// load returns the number of calls in.
func (c *inflight) load() int32 {
	var n int32
	for i := range c.stripes {
		n += c.stripes[i].n.Load()
	}
	return n
}

// close closes the count if no call is in, and reports whether it did. A
// call entering meanwhile either sees it closed or is seen, and the count
// stays open.
func (c *inflight) close() bool {
	c.closed.Store(true)
	if c.load() != 0 {
		c.closed.Store(false)
		return false
	}
	return true
}
