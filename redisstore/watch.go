package redisstore

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/redis/go-redis/v9"
)

// watcher is one Watch registration.
type watcher struct {
	fn func(key string, f llmretry.Facts)
}

// subscription is the Store's one subscription to its channel, shared by
// all its watchers: started by the first Watch, ended when the last
// watcher stops or the Store closes. go-redis reconnects and subscribes
// again by itself after a failure; what was published meanwhile is lost
// (a coordinator re-checks the keys it holds calls for once a probe
// interval).
type subscription struct {
	ctx    context.Context // ends the first subscribe's dial on stop
	cancel context.CancelFunc

	ready     chan struct{} // closed once Redis confirmed the subscription
	readyOnce sync.Once

	mu      sync.Mutex
	ps      *redis.PubSub // set once subscribed
	stopped bool
}

// Watch calls fn, on the Store's subscription goroutine, with a key's
// name and facts whenever a Store over the same Redis, in this process or
// another, changes them, until stop is called (stop may be called more
// than once). Notices may be late, repeated, out of order (Version orders
// them) or lost. fn must return promptly and must not call the Store.
//
// Watch returns once Redis has confirmed the Store's subscription, so that
// no change made after it returns is missed while Redis is healthy, or
// after Options.Timeout if Redis does not answer (the subscription then
// goes on trying). A watcher added to a running subscription does not
// wait.
func (s *Store) Watch(fn func(key string, f llmretry.Facts)) (stop func()) {
	w := &watcher{fn: fn}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return func() {}
	}
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
func (sub *subscription) stop() {
	sub.cancel()
	sub.mu.Lock()
	sub.stopped = true
	ps := sub.ps
	sub.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
	}
}

// listen subscribes and hands each notice to the watchers until the
// subscription is stopped.
func (s *Store) listen(sub *subscription) {
	defer s.subs.Done()
	// The health check pings the server after 3 s without a message, and
	// connects again when the ping fails: both within a short bound, as is
	// the first subscribe.
	bound := max(4*s.opts.Timeout, time.Second)
	ctx, cancel := context.WithTimeout(sub.ctx, bound)
	ps := s.client.Subscribe(ctx, s.channel())
	cancel()
	sub.mu.Lock()
	if sub.stopped {
		sub.mu.Unlock()
		_ = ps.Close()
		return
	}
	sub.ps = ps
	sub.mu.Unlock()
	ch := ps.ChannelWithSubscriptions(redis.WithChannelPingTimeout(bound), redis.WithChannelReconnectTimeout(bound))
	for m := range ch {
		switch m := m.(type) {
		case *redis.Subscription:
			// The first, or a new one after a reconnect (what was
			// published in between is lost).
			sub.readyOnce.Do(func() { close(sub.ready) })
		case *redis.Message:
			if name, f, ok := decodeNotice(m.Payload); ok {
				s.dispatch(name, f)
			}
		}
	}
}

// dispatch calls every watcher with a notice.
func (s *Store) dispatch(name string, f llmretry.Facts) {
	s.mu.Lock()
	fns := make([]func(string, llmretry.Facts), 0, len(s.watchers))
	for w := range s.watchers {
		fns = append(fns, w.fn)
	}
	s.mu.Unlock()
	for _, fn := range fns {
		fn(name, f)
	}
}

// decodeNotice reads a published change (see scripts.go):
// "v ds du np pu w n len(p) len(name)\n" + p + name + r.
func decodeNotice(msg string) (name string, f llmretry.Facts, ok bool) {
	head, rest, found := strings.Cut(msg, "\n")
	fields := strings.Fields(head)
	if !found || len(fields) != 9 {
		return "", llmretry.Facts{}, false
	}
	var n [9]int64
	for i, field := range fields {
		x, err := strconv.ParseInt(field, 10, 64)
		if err != nil || x < 0 {
			return "", llmretry.Facts{}, false
		}
		n[i] = x
	}
	lp, ln := n[7], n[8]
	if lp+ln > int64(len(rest)) {
		return "", llmretry.Facts{}, false
	}
	prober, name, reason := rest[:lp], rest[lp:lp+ln], rest[lp+ln:]
	return name, facts([7]int64(n[:7]), prober, reason), true
}
