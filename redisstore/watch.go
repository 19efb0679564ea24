package redisstore

import (
	"cmp"
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmretry/llmretry/store"
	"github.com/redis/go-redis/v9"
)

// watcher is one Watch registration.
type watcher struct {
	fn  func(key string, f store.Facts)
	seq uint64 // the order it was added in: notices reach watchers in it
}

// subscription is the Store's one subscription to its channel, shared by
// all its watchers: started by the first Watch, ended when the last
// watcher stops or the Store closes. It proves itself alive: after
// pingAfter without a message it sends PING, and a subscription that does
// not answer within Options.Timeout is dropped and made again (so is one
// that fails), so a connection that silently stopped delivering (a NAT or
// a failover that neither delivers nor closes) is found within
// pingAfter + Timeout. What was published meanwhile is lost (a
// coordinator re-reads the keys it has calls for once a probe interval).
type subscription struct {
	ctx    context.Context // ends on stop: the goroutine's waits, and dials
	cancel context.CancelFunc

	ready     chan struct{} // closed once Redis confirmed the subscription
	readyOnce sync.Once
}

// Watch calls fn, on the Store's subscription goroutine, with a key's
// name and facts whenever a Store over the same Redis, in this process or
// another, changes them, until stop is called (stop may be called more
// than once). Notices may be late, repeated, out of order (Version orders
// them) or lost; each time the subscription is made again (after a
// failure, or a silent drop its pings found), fn is called once with an
// empty name and zero Facts, as the store.Store contract says, since
// what was published meanwhile is lost. fn must return promptly and must
// not call the Store. A notice reaches the Store's watchers one after the
// other, in the order they were added.
//
// Watch returns once Redis has confirmed the Store's subscription, so that
// no change made after it returns is missed while Redis is healthy, or
// after Options.Timeout if Redis does not answer (the subscription then
// goes on trying). A watcher added to a running subscription does not
// wait.
func (s *Store) Watch(fn func(key string, f store.Facts)) (stop func()) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return func() {}
	}
	s.added++
	w := &watcher{fn: fn, seq: s.added}
	s.watchers[w] = struct{}{}
	if s.sub == nil {
		ctx, cancel := context.WithCancel(context.Background())
		s.sub = &subscription{ctx: ctx, cancel: cancel, ready: make(chan struct{})}
		s.subs.Add(1)
		go s.listen(s.sub)
	}
	sub := s.sub
	s.mu.Unlock()
	sub.wait(s.opts.Timeout)
	var once sync.Once
	return func() { once.Do(func() { s.unwatch(w) }) }
}

// wait waits until the subscription is confirmed, for at most d.
func (sub *subscription) wait(d time.Duration) {
	select {
	case <-sub.ready:
		return
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-sub.ready:
	case <-sub.ctx.Done():
	case <-t.C:
	}
}

// unwatch removes w, and ends the subscription if w was the last watcher.
func (s *Store) unwatch(w *watcher) {
	s.mu.Lock()
	delete(s.watchers, w)
	var sub *subscription
	if len(s.watchers) == 0 {
		sub, s.sub = s.sub, nil
	}
	s.mu.Unlock()
	if sub != nil {
		sub.stop()
	}
}

// stop ends the subscription; its goroutine ends soon after.
func (sub *subscription) stop() { sub.cancel() }

// pingAfter is how long a subscription waits for a message before it
// sends PING to prove itself alive: 4 × Options.Timeout (1 s by default),
// at least 100 ms.
func (s *Store) pingAfter() time.Duration { return max(4*s.opts.Timeout, 100*time.Millisecond) }

// listen subscribes, hands each notice to the watchers, and subscribes
// again whenever the subscription fails or goes silent, until it is
// stopped.
func (s *Store) listen(sub *subscription) {
	defer s.subs.Done()
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		select {
		case <-sub.ctx.Done():
			return
		case <-retry.C:
		}
		s.subscribe(sub)
		// Not at once: a Redis that refuses is asked again each Timeout.
		retry.Reset(s.opts.Timeout)
	}
}

// subscribe makes one subscription and receives from it until it fails,
// goes silent or is stopped; the PubSub is closed when it returns.
func (s *Store) subscribe(sub *subscription) {
	// Every dial, handshake and read below ends within Timeout (or
	// pingAfter), if the client honours its context's deadline
	// (ContextTimeoutEnabled) or has timeouts of its own no longer.
	ctx, cancel := context.WithTimeout(sub.ctx, s.opts.Timeout)
	ps := s.client.Subscribe(ctx, s.channel())
	cancel()
	// Stop closes the subscription's connection: a read in progress ends.
	closed := make(chan struct{})
	stopClose := context.AfterFunc(sub.ctx, func() {
		defer close(closed)
		_ = ps.Close()
	})
	defer func() {
		if stopClose() {
			_ = ps.Close()
		} else {
			<-closed
		}
	}()

	pinged := false
	for {
		wait := s.pingAfter()
		if pinged {
			wait = s.opts.Timeout
		}
		ctx, cancel := context.WithTimeout(sub.ctx, wait)
		m, err := ps.ReceiveTimeout(ctx, wait)
		cancel()
		if sub.ctx.Err() != nil {
			return
		}
		if err != nil {
			if !timeout(err) || pinged {
				return // failed, or silent: subscribe again
			}
			ctx, cancel := context.WithTimeout(sub.ctx, s.opts.Timeout)
			err = ps.Ping(ctx)
			cancel()
			if err != nil {
				return
			}
			pinged = true
			continue
		}
		pinged = false
		switch m := m.(type) {
		case *redis.Subscription:
			// The first, or a new one after a failure, a silent drop or
			// go-redis's own reconnect: what was published in between is
			// lost, so the watchers are told to read their keys again.
			first := false
			sub.readyOnce.Do(func() {
				first = true
				close(sub.ready)
			})
			if !first {
				s.dispatch("", store.Facts{})
			}
		case *redis.Message:
			if name, f, ok := s.notice(m.Payload); ok {
				s.dispatch(name, f)
			}
		}
	}
}

// timeout reports whether err is a read that timed out.
func timeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// notice decodes a message on the channel; a malformed one is counted and
// dropped, as is one whose version is further ahead of this process's
// clock than any Redis clock would be (versions are Redis's clock, in
// microseconds).
func (s *Store) notice(msg string) (string, store.Facts, bool) {
	name, f, ok := decodeNotice(msg)
	if ok && (name == "" || f.Version > uint64(time.Now().Add(versionSlack).UnixMicro())) {
		ok = false // an empty name is this package's own word to re-read every key
	}
	if !ok {
		s.dropped(1, "a notice")
		return "", store.Facts{}, false
	}
	s.dropped(0, "")
	return name, f, true
}

// versionSlack is how far ahead of this process's clock a notice's
// version may be: Redis's clock may differ from it, not by this much.
const versionSlack = time.Hour

// dispatch calls every watcher with a notice, one after the other, in the
// order they were added: a watcher added after a Transport's (a test's,
// say) hears of a change only once the Transport has taken it in.
func (s *Store) dispatch(name string, f store.Facts) {
	s.mu.Lock()
	ws := make([]*watcher, 0, len(s.watchers))
	for w := range s.watchers {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	slices.SortFunc(ws, func(a, b *watcher) int { return cmp.Compare(a.seq, b.seq) })
	for _, w := range ws {
		w.fn(name, f)
	}
}

// Limits on what a notice or a script's answer may hold: what no Store of
// this fleet writes is malformed, and dropped.
const (
	// maxMS is the largest time, in Unix milliseconds, a Store accepts
	// (the year 33658): fifteen digits, exact in a Lua number.
	maxMS = 999_999_999_999_999
	// maxVersion is the largest Version: exact in a Lua number (2^53).
	maxVersion = 1 << 53
	// maxProber, maxName and maxReason bound a lease holder's name (a
	// coordinator's is about 20 bytes), a key's name (a host and 17
	// bytes) and a failure's kind ("502 Bad Gateway").
	maxProber = 64
	maxName   = 512
	maxReason = 256
	// maxRetries bounds the count of live retry leases.
	maxRetries = 1 << 20
	// maxUS is the largest time, in Unix microseconds, a Store accepts
	// for a pace's Full (the year 2255): exact in a Lua number (2^53).
	maxUS = 1 << 53
	// maxBurst bounds a pace's Burst (far above any provider's request
	// limit); maxCount a limit on calls in flight, a tally, and the calls
	// in flight counted (send leases and tallies). The scripts hold the
	// same bounds.
	maxBurst = 1 << 30
	maxCount = 1 << 20
	// maxOwner bounds a tally's owner (a process's name: llmretry's are
	// 16 bytes); the scripts hold the same bound, and read a hash of more
	// than 4,096 tallies as malformed.
	maxOwner = 128
)

// maxHead bounds a notice's first line: 17 numbers of at most 19 digits,
// and their spaces.
const maxHead = 400

// decodeNotice reads a published change (see scripts.go):
// "v ds du np pu w n b e fu mi gr ca cu s len(p) len(name)\n" + p + name +
// r. Anything else —
// a field that is not a number in range, lengths that do not fit the
// message, an empty name — is not a notice: ok is false. It never panics,
// whatever msg holds (FuzzDecodeNotice).
func decodeNotice(msg string) (name string, f store.Facts, ok bool) {
	head, rest, found := strings.Cut(msg, "\n")
	if !found || len(head) > maxHead {
		return "", store.Facts{}, false
	}
	fields := strings.Fields(head)
	if len(fields) != numFacts+2 {
		return "", store.Facts{}, false
	}
	var n [numFacts + 2]int64
	for i, field := range fields {
		x, err := strconv.ParseInt(field, 10, 64)
		if err != nil || x < 0 {
			return "", store.Facts{}, false
		}
		n[i] = x
	}
	lp, ln := n[numFacts], n[numFacts+1]
	// Compared one at a time, never summed: a sum may overflow.
	if lp > maxProber || ln == 0 || ln > maxName || lp > int64(len(rest)) || ln > int64(len(rest))-lp {
		return "", store.Facts{}, false
	}
	prober, name, reason := rest[:lp], rest[lp:lp+ln], rest[lp+ln:]
	if len(reason) > maxReason {
		return "", store.Facts{}, false
	}
	f, ok = facts([numFacts]int64(n[:numFacts]), prober, reason)
	return name, f, ok
}
