package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmretry/llmretry/store"
	"github.com/redis/go-redis/v9"
)

// Store is a store.Store on Redis: every process whose Transports use
// a Store over the same Redis (and the same Options.Prefix and Secret)
// coordinates its calls to a provider key with every other, as if they
// were one process. Facts live in Redis; held calls, their timers and the
// choice of the next probe stay in each process, which keeps a local view
// of each key fed by the Store's answers and its Watch notices (a Redis
// channel), so a call to a quiet key makes no Redis call, but for one
// re-read of each key per probe interval while it has calls.
//
// Every method is safe for concurrent use. Each Redis call is bounded by
// Options.Timeout, whatever the client's own timeouts; a failed or slow
// call returns an error, upon which the coordinator goes on in-process for
// one probe interval and then tries Redis again (see store.Store). No
// Redis error reaches an llmretry caller.
//
// The client belongs to the caller: the Store never closes it. Close the
// Store (which ends its subscription) before the client. The zero Store is
// not usable: New makes one.
type Store struct {
	client  redis.UniversalClient
	opts    Options // resolved
	cluster bool    // client is a Cluster client: a node's failure concerns its slots' keys only

	seq     atomic.Uint64 // numbers Redis calls in the order they begin
	failing atomic.Bool   // Redis calls fail (for logging changes only)
	hmu     sync.Mutex    // orders changes of failing
	since   uint64        // the call that made the last change

	longest   atomic.Int64  // the horizon: the longest lifetime, in ms, of a fact this Store was asked to write
	malformed atomic.Uint64 // notices and fields dropped as malformed
	bad       atomic.Bool   // the last data read was malformed (for logging changes only)
	keyWarned atomic.Int64  // when (Unix ns) a key's failure was last logged

	mu       sync.Mutex
	closed   bool
	watchers map[*watcher]struct{}
	added    uint64         // watchers ever added: the next one's seq
	sub      *subscription  // nil while nobody watches
	subs     sync.WaitGroup // subscription goroutines
	calls    sync.WaitGroup // Redis calls in flight
}

// errClosed is what a closed Store's methods return.
var errClosed = errors.New("redisstore: Store closed")

// errOwner is what Report returns for a Report.Owner longer than maxOwner
// bytes: no process of the fleet names itself so (llmretry's are 16 hex
// digits), and the scripts read such a tally as malformed.
var errOwner = errors.New("an Owner longer than 128 bytes")

// New returns a Store over client, which may be any go-redis client (a
// single node, Sentinel's failover client or a Cluster: all Redis keys of
// one provider key share a hash tag). It makes no Redis call; an
// unreachable Redis shows only when the Store is used, as failing calls.
// An Options field that cannot be used is an error.
func New(client redis.UniversalClient, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	o, err := opts.resolved()
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	s := &Store{client: client, opts: o, watchers: map[*watcher]struct{}{}}
	s.longest.Store(minHorizon.Milliseconds())
	_, s.cluster = client.(*redis.ClusterClient)
	return s, nil
}

// minHorizon is the least horizon: the longest lifetime of a fact any
// Store writes before it learns its callers' (an llmretry retry lease
// lasts at most 10 minutes).
const minHorizon = 10 * time.Minute

// lifetime notes that a caller asked to write a fact living d: the
// horizon grows to it. What lies beyond the horizon, in Redis or in a
// notice, is none this fleet wrote: it is read as nothing, and no key's
// expiry is set past it.
func (s *Store) lifetime(d time.Duration) {
	ms := d.Milliseconds()
	for {
		old := s.longest.Load()
		if ms <= old || ms > maxMS || s.longest.CompareAndSwap(old, ms) {
			return
		}
	}
}

// Malformed returns how many notices, fields of keys' facts in Redis and
// records of refused prefills the Store has dropped as malformed since
// New: data no Store of the fleet writes (a forged message on its channel,
// a key's hash rewritten).
// Each is read as nothing; the Store logs when such data begins to arrive
// and when well-formed data follows, not per item.
func (s *Store) Malformed() uint64 { return s.malformed.Load() }

// dropped counts n malformed items (n may be 0: well-formed data), and
// logs a change between well-formed and malformed.
func (s *Store) dropped(n uint64, what string) {
	if n > 0 {
		s.malformed.Add(n)
	}
	bad := n > 0
	if s.bad.Load() == bad || !s.bad.CompareAndSwap(!bad, bad) || s.opts.Logger == nil {
		return
	}
	if bad {
		s.opts.Logger.Warn("redisstore: dropped malformed data read from Redis, written by something other than this fleet's Stores; read as nothing", "what", what)
	} else {
		s.opts.Logger.Info("redisstore: data read from Redis well-formed again")
	}
}

// Close ends the Store's subscription and waits for the goroutines it
// started — the subscription's, and those of Redis calls that outlived
// their Timeout — for at most Options.Timeout and a second. Its methods
// then fail (a coordinator falls back to in-process coordination) and
// Watch calls nothing. Close does not close the client. Closing twice
// does nothing.
//
// Whether every goroutine has ended by then depends on the client: go-redis
// bounds a dial, a handshake and a read by the Store's deadlines only with
// ContextTimeoutEnabled set (else by its own DialTimeout and ReadTimeout,
// 5 s and 3 s by default, or never with a ReadTimeout of -1). If some
// still wait on the client when the bound is over, Close returns an error
// saying so; they end when the client's own timeouts end them.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	sub := s.sub
	s.sub = nil
	clear(s.watchers)
	s.mu.Unlock()
	if sub != nil {
		sub.stop()
	}
	done := make(chan struct{})
	go func() {
		s.subs.Wait()
		s.calls.Wait()
		close(done)
	}()
	t := time.NewTimer(s.opts.Timeout + time.Second)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return errors.New("redisstore: close: Redis calls still wait on the client after Options.Timeout and a second (set the client's ContextTimeoutEnabled to bound them by the Store's deadlines)")
	}
}

var _ store.Store = (*Store)(nil)

// Load returns key's facts at now.
func (s *Store) Load(ctx context.Context, key string, now time.Time) (store.Facts, error) {
	f, _, _, err := s.run(ctx, "load", loadScript, key, us(now))
	return f, err
}

// Report applies one attempt's evidence to key (see store.Store),
// r.Owner's tally included: its count is bounded by maxCount (2^20), its
// Seq compared as a whole uint64. An Owner longer than 128 bytes is an
// error, before any Redis call: no process of a fleet names itself so
// (llmretry's are 16 hex digits), and Redis would read its tally as
// malformed.
func (s *Store) Report(ctx context.Context, key string, r store.Report) (store.Facts, error) {
	ev := ""
	switch r.Evidence {
	case store.ProviderDown:
		ev = "down"
	case store.ProviderUp:
		ev = "up"
	}
	s.lifetime(r.DownFor)
	if !r.WaitUntil.IsZero() {
		s.lifetime(r.WaitUntil.Sub(r.At))
	}
	// A pace or a limit the scripts would read back as malformed is
	// written as the nearest they would not.
	var burst, every, full int64
	if r.Every > 0 {
		burst, every, full = min(max(int64(r.Burst), 0), maxBurst), max(r.Every.Microseconds(), 1), us(r.Full)
		s.lifetime(r.Every)
		s.lifetime(r.Full.Sub(r.At))
	}
	var cut string
	var grow, capUntil int64
	if r.Cut {
		cut, capUntil = "1", ms(r.CapUntil)
		if r.Grow > 0 {
			grow = max(r.Grow.Microseconds(), 1)
			s.lifetime(r.Grow)
		}
		s.lifetime(r.CapUntil.Sub(r.At))
	}
	// A tally: its count bounded as the scripts bound it, its seq in
	// decimal (any uint64: the scripts compare its digits).
	var unleased, tallyUntil int64
	seq := "0"
	if r.Owner != "" {
		if len(r.Owner) > maxOwner {
			return store.Facts{}, fmt.Errorf("redisstore: report: %w (%d bytes)", errOwner, len(r.Owner))
		}
		unleased, seq, tallyUntil = min(max(int64(r.Unleased), 0), maxCount), strconv.FormatUint(r.Seq, 10), us(r.TallyUntil)
		if unleased > 0 && r.TallyUntil.After(r.At) {
			s.lifetime(r.TallyUntil.Sub(r.At))
		}
	}
	// A lesson: its spacing and floor in whole microseconds, at least one.
	var spacing, floor int64
	if r.Spacing > 0 {
		spacing = max(r.Spacing.Microseconds(), 1)
		s.lifetime(r.Spacing)
	}
	if r.Floor > 0 {
		floor = max(r.Floor.Microseconds(), 1)
		s.lifetime(r.Floor)
	}
	f, _, _, err := s.run(ctx, "report", reportScript, key, us(r.At), ev, r.Reason, r.DownFor.Milliseconds(),
		ms(r.NextProbe), ms(r.WaitUntil), r.Prober, burst, every, full, cut, grow, capUntil,
		r.Owner, unleased, seq, tallyUntil, spacing, floor, r.Sender, key, s.channel())
	return f, err
}

// TakeProbe asks for key's probe lease (see store.Store).
func (s *Store) TakeProbe(ctx context.Context, key string, l store.Lease) (store.Facts, bool, error) {
	s.lifetime(l.Until.Sub(l.At))
	f, ok, _, err := s.run(ctx, "take probe", takeProbeScript, key, us(l.At), l.Holder, ms(l.Until), key, s.channel())
	return f, ok, err
}

// TakeRetry asks for one of key's retry leases, of which at most limit may
// be live (see store.Store).
func (s *Store) TakeRetry(ctx context.Context, key string, l store.Lease, limit int) (store.Facts, bool, error) {
	s.lifetime(l.Until.Sub(l.At))
	f, ok, _, err := s.run(ctx, "take retry", takeRetryScript, key, us(l.At), l.Holder, ms(l.Until), limit, key, s.channel())
	return f, ok, err
}

// TakeSend asks for the next send of a paced key, or for one of the send
// leases of a key whose calls in flight are limited to limit (0: not
// limited), which counts the live send leases and tallies; it returns the
// instant the send may go, and whether it was granted (see
// store.Store). The slot is reckoned in microseconds. A grant is not
// announced; the end of a send lease (Release) is.
func (s *Store) TakeSend(ctx context.Context, key string, l store.Lease, limit int) (store.Facts, time.Time, bool, error) {
	s.lifetime(l.Until.Sub(l.At))
	f, ok, slot, err := s.run(ctx, "take send", takeSendScript, key, us(l.At), l.Holder, us(l.Until), max(limit, 0), key, s.channel())
	return f, slot, ok, err
}

// Release ends any lease holder holds on key.
func (s *Store) Release(ctx context.Context, key, holder string, now time.Time) (store.Facts, error) {
	f, _, _, err := s.run(ctx, "release", releaseScript, key, us(now), holder, key, s.channel())
	return f, err
}

// result is one Redis call's answer.
type result struct {
	v   any
	err error
}

// malformedError is the error of a Redis call that Redis answered with
// data no Store of the fleet writes: that key's trouble, not Redis's.
type malformedError struct{ error }

func (e malformedError) Unwrap() error { return e.error }

// run runs sc on the Redis keys of name with args (see do), and decodes
// its answer, counting what it read as malformed.
func (s *Store) run(ctx context.Context, op string, sc *redis.Script, name string, args ...any) (store.Facts, bool, time.Time, error) {
	keys := s.keys(name)
	args = append([]any{s.longest.Load()}, args...)
	v, err := s.do(ctx, op, func(ctx context.Context) (any, error) {
		v, err := sc.Run(ctx, s.client, keys, args...).Slice()
		if err != nil {
			return nil, err
		}
		a, err := decode(v)
		if err != nil {
			return nil, malformedError{err}
		}
		return a, nil
	})
	if errors.As(err, new(malformedError)) {
		s.dropped(1, "a key's facts")
	}
	if err != nil {
		return store.Facts{}, false, time.Time{}, err
	}
	a := v.(answer)
	s.dropped(a.bad, "a key's facts")
	return a.f, a.granted, a.slot, nil
}

// do runs fn, one Redis call, within Options.Timeout (on a goroutine of
// its own, so that a client that does not honour its context's deadline
// cannot hold the caller longer), and returns its answer. Failures are
// logged when they begin and end; an error that says Redis as a whole
// failed wraps store.ErrUnreachable, and one that fn wrapped in
// malformedError (Redis answered, with data no Store writes) is the key's
// alone and says nothing of Redis's health.
func (s *Store) do(ctx context.Context, op string, fn func(context.Context) (any, error)) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redisstore: %s: %w", op, err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	s.calls.Add(1)
	s.mu.Unlock()
	seq := s.seq.Add(1)

	tctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	done := make(chan result, 1)
	go func() {
		defer s.calls.Done()
		v, err := fn(tctx)
		done <- result{v, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-tctx.Done():
		select {
		case res = <-done:
		default:
			res.err = tctx.Err()
		}
	}
	if res.err != nil && ctx.Err() != nil {
		// The caller's context ended: not Redis's failure.
		return nil, fmt.Errorf("redisstore: %s: %w", op, ctx.Err())
	}
	if errors.As(res.err, new(malformedError)) {
		// Malformed: this key's trouble, not Redis's.
		return nil, fmt.Errorf("redisstore: %s: %w", op, res.err)
	}
	if res.err != nil && !s.wide(res.err) {
		// One key's trouble (its data, its slot): logged, not Redis's health.
		s.keyFailed(res.err)
		return nil, fmt.Errorf("redisstore: %s: %w", op, res.err)
	}
	s.health(seq, res.err)
	if res.err != nil {
		return nil, fmt.Errorf("redisstore: %s: %w: %w", op, store.ErrUnreachable, res.err)
	}
	return res.v, nil
}

// health logs a change between failing and succeeding Redis calls: once
// per change, never per call. A call that began before the last change
// says nothing new (a success that was on its way when Redis died).
func (s *Store) health(seq uint64, err error) {
	fail := err != nil
	if fail == s.failing.Load() {
		return
	}
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if fail == s.failing.Load() || seq < s.since {
		return
	}
	s.failing.Store(fail)
	s.since = seq
	switch {
	case s.opts.Logger == nil:
	case fail:
		s.opts.Logger.Warn("redisstore: Redis calls fail; each process coordinates on its own until Redis answers", "error", err.Error())
	default:
		s.opts.Logger.Info("redisstore: Redis answers again; coordinating through it")
	}
}

// ms returns t in Unix milliseconds, 0 for the zero time; fromMS is its
// inverse. us and fromUS are the same in microseconds.
func ms(t time.Time) int64     { return toUnix(t, time.Millisecond) }
func fromMS(n int64) time.Time { return fromUnix(n, time.Millisecond) }
func us(t time.Time) int64     { return toUnix(t, time.Microsecond) }
func fromUS(n int64) time.Time { return fromUnix(n, time.Microsecond) }

// toUnix returns t in Unix units of unit (a divisor of a second), 0 for
// the zero time, as time.Time's UnixMilli does for a millisecond.
func toUnix(t time.Time, unit time.Duration) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()*int64(time.Second/unit) + int64(t.Nanosecond())/int64(unit)
}

// fromUnix is toUnix's inverse: 0 is the zero time, and any other n (a
// store's, trusted no further) is a time, as time.UnixMilli makes one.
func fromUnix(n int64, unit time.Duration) time.Time {
	if n == 0 {
		return time.Time{}
	}
	per := int64(time.Second / unit)
	return time.Unix(n/per, n%per*int64(unit))
}

// answer is a script's answer, decoded.
type answer struct {
	f       store.Facts
	granted bool
	slot    time.Time // TakeSend's instant; zero for none
	bad     uint64    // fields of the key's facts read as nothing
}

// answerLen is how many values a script answers: {v, ds, du, np, pu, w,
// n, p, r, granted, bad, b, e, fu, mi, c, ca, cu, s, slot, sp, fl, nx,
// tu}.
const answerLen = 24

// decode reads a script's answer (answerLen values), bad counting the
// fields of the key's facts the script read as nothing (malformed, or
// beyond the horizon). It never panics, whatever v holds
// (FuzzDecodeAnswer).
func decode(v []any) (answer, error) {
	if len(v) != answerLen {
		return answer{}, fmt.Errorf("a script answered %d values, not %d", len(v), answerLen)
	}
	// The numbers in the order facts takes them (a notice's): v, ds, du,
	// np, pu, w, n, then b, e, fu, mi, c, ca, cu, s, sp, fl, nx, tu; and
	// the slot.
	var n [numFacts]int64
	idx := [numFacts + 1]int{0, 1, 2, 3, 4, 5, 6, 11, 12, 13, 14, 15, 16, 17, 18, 20, 21, 22, 23, 19}
	var slot int64
	for i, j := range idx {
		x, ok := v[j].(int64)
		if !ok {
			return answer{}, fmt.Errorf("a script answered %T for value %d", v[j], j)
		}
		if i == numFacts {
			slot = x
		} else {
			n[i] = x
		}
	}
	prober, ok1 := v[7].(string)
	reason, ok2 := v[8].(string)
	g, ok3 := v[9].(int64)
	b, ok4 := v[10].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 || g < 0 || g > 1 || b < 0 {
		return answer{}, errors.New("a script answered a value of the wrong type")
	}
	f, ok := facts(n, prober, reason)
	if !ok || slot < 0 || slot > maxUS {
		return answer{}, errors.New("a script answered a value out of range")
	}
	return answer{f: f, granted: g == 1, slot: fromUS(slot), bad: uint64(b)}, nil
}

// numFacts is how many numbers encode Facts: v, ds, du, np, pu, w, n, b,
// e, fu, mi, gr, ca, cu, s, sp, fl, nx, tu.
const numFacts = 19

// facts builds Facts from their encoded numbers (v, ds, du, np, pu, w, n,
// b, e, fu, mi, gr, ca, cu, s, sp, fl, nx, tu: times in ms but e, fu, gr,
// ca, sp, fl and nx, in µs)
// and strings, and reports whether each is in range.
func facts(n [numFacts]int64, prober, reason string) (store.Facts, bool) {
	if len(prober) > maxProber || len(reason) > maxReason {
		return store.Facts{}, false
	}
	// The largest value of each number.
	limits := [numFacts]int64{maxVersion, maxMS, maxMS, maxMS, maxMS, maxMS, maxRetries,
		maxBurst, maxMS, maxUS, maxCount, maxMS, maxUS, maxMS, maxCount, maxMS, maxMS, maxUS, maxMS}
	for i, x := range n {
		if x < 0 || x > limits[i] {
			return store.Facts{}, false
		}
	}
	return store.Facts{
		Version:     uint64(n[0]),
		DownSince:   fromMS(n[1]),
		DownUntil:   fromMS(n[2]),
		NextProbe:   fromMS(n[3]),
		ProbeUntil:  fromMS(n[4]),
		WaitUntil:   fromMS(n[5]),
		Retries:     int(n[6]),
		Prober:      prober,
		Reason:      reason,
		Burst:       int(n[7]),
		Every:       time.Duration(n[8]) * time.Microsecond,
		Full:        fromUS(n[9]),
		MaxInFlight: int(n[10]),
		Grow:        time.Duration(n[11]) * time.Microsecond,
		CutAt:       fromUS(n[12]),
		CapUntil:    fromMS(n[13]),
		InFlight:    int(n[14]),
		Spacing:     time.Duration(n[15]) * time.Microsecond,
		Floor:       time.Duration(n[16]) * time.Microsecond,
		Next:        fromUS(n[17]),
		TaughtUntil: fromMS(n[18]),
	}, true
}

// wide reports whether err, a Redis call's failure, says that Redis as a
// whole cannot be used — it does not answer, refuses connections, or
// refuses every script (loading, read-only, out of memory, busy) — rather
// than that one key cannot: its data of the wrong type, a script's error
// on its data, in a Cluster a slot whose master is down.
func (s *Store) wide(err error) bool {
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		for _, p := range [...]string{"LOADING", "READONLY", "OOM", "BUSY", "MASTERDOWN", "NOAUTH", "WRONGPASS", "MISCONF", "NOREPLICAS"} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	}
	// No answer: the server's, or in a Cluster one node's (its slots').
	return !s.cluster
}

// keyWarnEvery is how often, at most, the Store logs that a key's Redis
// calls fail while Redis answers for others.
const keyWarnEvery = time.Minute

// keyFailed logs, at most once per keyWarnEvery, that a Redis call failed
// for one key only.
func (s *Store) keyFailed(err error) {
	now := time.Now().UnixNano()
	last := s.keyWarned.Load()
	if s.opts.Logger == nil || last != 0 && now-last < int64(keyWarnEvery) || !s.keyWarned.CompareAndSwap(last, now) {
		return
	}
	s.opts.Logger.Warn("redisstore: Redis calls fail for a key (its data or its Cluster slot); that key coordinates in-process for a probe interval, the others through Redis", "error", err.Error())
}
