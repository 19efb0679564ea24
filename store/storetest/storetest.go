// Package storetest checks that a store.Store keeps the contract its doc
// comment states, so that any store (the in-process one, a Redis store,
// one of your own) can be tested the same way:
//
//	func TestContract(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) []store.Store {
//			// two stores over one backend: two processes of a fleet
//			return []store.Store{newStore(t), newStore(t)}
//		})
//	}
//
// Run also checks the optional store.PrefillRefusals, for stores that
// implement it (and skips those checks for the others).
//
// Run needs only the testing package. Its checks use times near the real
// clock, a few seconds apart, and never sleep but to wait for a notice.
//
// The package has no test file of its own: it is a test, run over the
// in-process store by the llmretry package's tests and over Redis by
// redisstore's.
package storetest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmretry/llmretry/store"
)

// NoticeWait is how long Run waits for a Watch notice before it fails: a
// store whose notices travel through a server gets this long.
const NoticeWait = 5 * time.Second

// Run tests the stores that stores returns: one or more Stores over one
// backend (for a shared store, several clients of one server: the
// processes of a fleet; for an in-process store, the same Store as often
// as asked). stores is called once per subtest, and must return fresh
// state each time: no key of an earlier subtest may be seen.
func Run(t *testing.T, stores func(t *testing.T) []store.Store) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, []store.Store)
	}{
		{"Key names keys without their credentials", testKey},
		{"an unknown key has no facts", testUnknown},
		{"a down failure takes the key down and keeps it down", testDown},
		{"the down state lapses", testDownLapses},
		{"the probe lease is granted once, when due", testTakeProbe},
		{"the probe's failure schedules the next probe", testProbeFailure},
		{"an answer brings the key up", testUp},
		{"a server wait holds until its end", testWait},
		{"retry leases count against the limit", testRetries},
		{"Release ends the holder's leases only", testRelease},
		{"one of many concurrent probe requests is granted", testProbeRace},
		{"facts are shared by every store over the backend", testShared},
		{"Watch tells of changes until stopped", testWatch},
		{"Version grows with every change", testVersion},
		{"a spent rate limit paces the key, and later ones merge", testPace},
		{"the pace lapses at Full", testPaceLapses},
		{"a 429 limits the calls in flight, and a later one replaces the limit", testCap},
		{"the limit on calls in flight lapses at CapUntil", testCapLapses},
		{"TakeSend gives a paced key's sends their slots", testTakeSendSlots},
		{"send leases count against the limit and end with Release", testSendLeases},
		{"send leases lapse at Until", testSendLeaseLapses},
		{"a refused send's lease ends in its Report, before the cut counts", testSenderEnds},
		{"the end of a send lease is announced", testSendReleaseAnnounced},
		{"a key neither paced nor limited sends at once", testTakeSendQuiet},
		{"a paced and limited key", testPacedAndLimited},
		{"concurrent sends take distinct slots, and no more leases than the limit", testSendRace},
		{"a 429 teaches a rate, and later ones merge", testTaught},
		{"TakeSend spaces a taught key's sends, climbing back to the floor", testTaughtSends},
		{"what 429s taught lapses at TaughtUntil", testTaughtLapses},
		{"a refused prefill is shared, per key and model, until it lapses (optional)", testPrefillRefusals},
		{"a refused prefill lives at most PrefillHold; a model is any string (optional)", testPrefillHold},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := stores(t)
			if len(s) == 0 {
				t.Fatal("storetest: stores returned no Store")
			}
			tc.fn(t, s)
		})
	}
}

var ctx = context.Background()

// clock returns a base time near now, and a key unique to the test.
func clock(t *testing.T, s store.Store) (time.Time, string) {
	return time.Now().Truncate(time.Millisecond), s.Key("api.storetest.test", []byte(t.Name()))
}

// must fails the test on err.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
}

// down reports a down failure of key at at, as a coordinator would.
func down(t *testing.T, s store.Store, key string, at time.Time, prober string) store.Facts {
	t.Helper()
	f, err := s.Report(ctx, key, store.Report{At: at, Evidence: store.ProviderDown, Reason: "502 Bad Gateway",
		DownFor: 15 * time.Second, NextProbe: at.Add(5 * time.Second), Prober: prober})
	must(t, err)
	return f
}

func testKey(t *testing.T, stores []store.Store) {
	s := stores[0]
	secret := []byte("Authorization\x00Bearer sk-storetest-SECRET-0123456789\x00")
	a, b := s.Key("api.openai.com", secret), s.Key("api.openai.com", secret)
	if a != b {
		t.Errorf("Key is not deterministic: %q, %q", a, b)
	}
	for _, st := range stores[1:] {
		if c := st.Key("api.openai.com", secret); c != a {
			t.Errorf("another store over the backend names the key %q, not %q", c, a)
		}
	}
	if !strings.HasPrefix(a, "api.openai.com") {
		t.Errorf("Key %q does not begin with the host", a)
	}
	if strings.Contains(a, "SECRET") || bytes.Contains([]byte(a), secret) {
		t.Errorf("Key %q carries the credential", a)
	}
	if other := s.Key("api.openai.com", []byte("Authorization\x00Bearer sk-other\x00")); other == a {
		t.Errorf("two credentials share the name %q", a)
	}
	if other := s.Key("api.anthropic.com", secret); other == a {
		t.Errorf("two hosts share the name %q", a)
	}
	if none := s.Key("api.openai.com", nil); !strings.HasPrefix(none, "api.openai.com") || none == a {
		t.Errorf("Key without a credential is %q", none)
	}
}

func testUnknown(t *testing.T, stores []store.Store) {
	now, key := clock(t, stores[0])
	f, err := stores[0].Load(ctx, key, now)
	must(t, err)
	if f.Down(now) || f.Probing(now) || f.Waiting(now) || f.Retries != 0 {
		t.Errorf("an unknown key has facts: %+v", f)
	}
	if _, err := stores[0].Release(ctx, key, "nobody", now); err != nil {
		t.Errorf("releasing nothing: %v", err)
	}
}

func testDown(t *testing.T, stores []store.Store) {
	s := stores[0]
	now, key := clock(t, s)
	f := down(t, s, key, now, "")
	if !f.Down(now) || !f.DownSince.Equal(now) || !f.NextProbe.Equal(now.Add(5*time.Second)) || !f.DownUntil.Equal(now.Add(15*time.Second)) {
		t.Fatalf("after the first failure: %+v", f)
	}
	if f.Reason != "502 Bad Gateway" {
		t.Errorf("Reason %q", f.Reason)
	}
	later := now.Add(2 * time.Second)
	g, err := s.Report(ctx, key, store.Report{At: later, Evidence: store.ProviderDown, Reason: "connection refused",
		DownFor: 15 * time.Second, NextProbe: later.Add(time.Second)})
	must(t, err)
	if !g.DownSince.Equal(now) {
		t.Errorf("DownSince moved to %v: the outage began at %v", g.DownSince, now)
	}
	if !g.NextProbe.Equal(now.Add(5 * time.Second)) {
		t.Errorf("a failure that is not the probe's moved NextProbe to %v", g.NextProbe)
	}
	if !g.DownUntil.Equal(later.Add(15*time.Second)) || g.Reason != "connection refused" {
		t.Errorf("the second failure did not confirm the key down: %+v", g)
	}
	l, err := s.Load(ctx, key, later)
	must(t, err)
	if l.Version != g.Version || !l.DownUntil.Equal(g.DownUntil) {
		t.Errorf("Load says %+v, Report said %+v", l, g)
	}
}

func testDownLapses(t *testing.T, stores []store.Store) {
	s := stores[0]
	now, key := clock(t, s)
	down(t, s, key, now, "")
	at := now.Add(16 * time.Second)
	f, err := s.Load(ctx, key, at)
	must(t, err)
	if f.Down(at) || !f.DownSince.IsZero() {
		t.Errorf("down past DownUntil: %+v", f)
	}
	// A failure after the lapse starts a new outage.
	g := down(t, s, key, at, "")
	if !g.DownSince.Equal(at) {
		t.Errorf("a new outage begins at %v, not %v", at, g.DownSince)
	}
}

func testTakeProbe(t *testing.T, stores []store.Store) {
	s := stores[0]
	now, key := clock(t, s)
	if _, ok, err := s.TakeProbe(ctx, key, store.Lease{Holder: "a", At: now, Until: now.Add(5 * time.Second)}); err != nil || ok {
		t.Fatalf("a probe of a key that is up: granted %v, %v", ok, err)
	}
	down(t, s, key, now, "")
	early := now.Add(4 * time.Second)
	if _, ok, err := s.TakeProbe(ctx, key, store.Lease{Holder: "a", At: early, Until: early.Add(5 * time.Second)}); err != nil || ok {
		t.Fatalf("a probe before NextProbe: granted %v, %v", ok, err)
	}
	due := now.Add(5 * time.Second)
	f, ok, err := s.TakeProbe(ctx, key, store.Lease{Holder: "a", At: due, Until: due.Add(5 * time.Second)})
	must(t, err)
	if !ok || f.Prober != "a" || !f.ProbeUntil.Equal(due.Add(5*time.Second)) || !f.Probing(due) {
		t.Fatalf("the due probe was not granted: %v %+v", ok, f)
	}
	if _, ok, _ := s.TakeProbe(ctx, key, store.Lease{Holder: "b", At: due.Add(time.Second), Until: due.Add(6 * time.Second)}); ok {
		t.Errorf("a second probe granted while the lease is live")
	}
	// A lease that lapses frees the probe, and keeps the key down until it
	// ends however soon the failure would lapse.
	lapsed := due.Add(5 * time.Second)
	f, ok, err = s.TakeProbe(ctx, key, store.Lease{Holder: "b", At: lapsed, Until: lapsed.Add(20 * time.Second)})
	must(t, err)
	if !ok || f.Prober != "b" {
		t.Errorf("the lease of a probe that never reported did not lapse: %v %+v", ok, f)
	}
	if !f.Down(lapsed.Add(19 * time.Second)) {
		t.Errorf("a granted lease does not keep the key down until it ends: %+v", f)
	}
}

func testProbeFailure(t *testing.T, stores []store.Store) {
	s := stores[0]
	now, key := clock(t, s)
	down(t, s, key, now, "")
	due := now.Add(5 * time.Second)
	_, ok, err := s.TakeProbe(ctx, key, store.Lease{Holder: "p", At: due, Until: due.Add(5 * time.Second)})
	must(t, err)
	if !ok {
		t.Fatal("the due probe was not granted")
	}
	end := due.Add(time.Second)
	f, err := s.Report(ctx, key, store.Report{At: end, Evidence: store.ProviderDown, Reason: "502 Bad Gateway",
		DownFor: 15 * time.Second, NextProbe: due.Add(4 * time.Second), Prober: "p"})
	must(t, err)
	if f.Prober != "" || f.Probing(end) {
		t.Errorf("the probe's report did not end its lease: %+v", f)
	}
	if !f.NextProbe.Equal(due.Add(4 * time.Second)) {
		t.Errorf("the failed probe did not schedule the next: NextProbe %v", f.NextProbe)
	}
	if !f.DownSince.Equal(now) {
		t.Errorf("DownSince moved: %v", f.DownSince)
	}
}

func testUp(t *testing.T, stores []store.Store) {
	s := stores[0]
	now, key := clock(t, s)
	down(t, s, key, now, "")
	at := now.Add(time.Second)
	f, err := s.Report(ctx, key, store.Report{At: at, Evidence: store.ProviderUp})
	must(t, err)
	if f.Down(at) || !f.DownSince.IsZero() || !f.NextProbe.IsZero() {
		t.Errorf("an answer did not bring the key up: %+v", f)
	}
	// Evidence that says nothing changes nothing.
	g, err := s.Report(ctx, key, store.Report{At: at, Evidence: store.NoEvidence})
	must(t, err)
	if g.Down(at) || g.Waiting(at) {
		t.Errorf("NoEvidence moved the key: %+v", g)
	}
}

func testWait(t *testing.T, stores []store.Store) {
	s := stores[0]
	now, key := clock(t, s)
	f, err := s.Report(ctx, key, store.Report{At: now, Evidence: store.ProviderUp, Reason: "429 Too Many Requests", WaitUntil: now.Add(30 * time.Second)})
	must(t, err)
	if !f.Waiting(now) || !f.WaitUntil.Equal(now.Add(30*time.Second)) || f.Down(now) {
		t.Fatalf("a server wait: %+v", f)
	}
	// A shorter wait does not shorten it; a longer one extends it.
	f, err = s.Report(ctx, key, store.Report{At: now, Evidence: store.ProviderUp, WaitUntil: now.Add(10 * time.Second)})
	must(t, err)
	if !f.WaitUntil.Equal(now.Add(30 * time.Second)) {
		t.Errorf("a shorter wait shortened it to %v", f.WaitUntil)
	}
	f, err = s.Report(ctx, key, store.Report{At: now, Evidence: store.ProviderUp, WaitUntil: now.Add(40 * time.Second)})
	must(t, err)
	if !f.WaitUntil.Equal(now.Add(40 * time.Second)) {
		t.Errorf("a longer wait did not extend it: %v", f.WaitUntil)
	}
	end := now.Add(40 * time.Second)
	l, err := s.Load(ctx, key, end)
	must(t, err)
	if l.Waiting(end) {
		t.Errorf("still waiting at the wait's end: %+v", l)
	}
}

func testRetries(t *testing.T, stores []store.Store) {
	s := stores[0]
	now, key := clock(t, s)
	for i := range 3 {
		f, ok, err := s.TakeRetry(ctx, key, store.Lease{Holder: fmt.Sprint("r", i), At: now, Until: now.Add(time.Minute)}, 3)
		must(t, err)
		if !ok || f.Retries != i+1 {
			t.Fatalf("retry lease %d of 3: granted %v, %d live", i+1, ok, f.Retries)
		}
	}
	if _, ok, _ := s.TakeRetry(ctx, key, store.Lease{Holder: "r3", At: now, Until: now.Add(time.Minute)}, 3); ok {
		t.Errorf("a fourth retry lease granted under a limit of 3")
	}
	f, err := s.Release(ctx, key, "r0", now)
	must(t, err)
	if f.Retries != 2 {
		t.Errorf("after a release: %d live", f.Retries)
	}
	if _, ok, _ := s.TakeRetry(ctx, key, store.Lease{Holder: "r3", At: now, Until: now.Add(time.Minute)}, 3); !ok {
		t.Errorf("a released lease was not freed")
	}
	later := now.Add(2 * time.Minute)
	f, ok, err := s.TakeRetry(ctx, key, store.Lease{Holder: "r4", At: later, Until: later.Add(time.Minute)}, 1)
	must(t, err)
	if !ok || f.Retries != 1 {
		t.Errorf("lapsed retry leases still count: %v, %d", ok, f.Retries)
	}
}

func testRelease(t *testing.T, stores []store.Store) {
	s := stores[0]
	now, key := clock(t, s)
	down(t, s, key, now, "")
	due := now.Add(5 * time.Second)
	if _, ok, err := s.TakeProbe(ctx, key, store.Lease{Holder: "p", At: due, Until: due.Add(5 * time.Second)}); err != nil || !ok {
		t.Fatalf("probe: %v %v", ok, err)
	}
	f, err := s.Release(ctx, key, "someone else", due)
	must(t, err)
	if f.Prober != "p" {
		t.Errorf("releasing another holder's lease ended it: %+v", f)
	}
	f, err = s.Release(ctx, key, "p", due)
	must(t, err)
	if f.Prober != "" || f.Probing(due) {
		t.Errorf("Release did not end the probe lease: %+v", f)
	}
	if !f.Down(due) {
		t.Errorf("Release brought the key up: %+v", f)
	}
}

func testProbeRace(t *testing.T, stores []store.Store) {
	now, key := clock(t, stores[0])
	down(t, stores[0], key, now, "")
	due := now.Add(5 * time.Second)
	var granted atomic.Int32
	var wg sync.WaitGroup
	for i := range 50 {
		s := stores[i%len(stores)]
		wg.Go(func() {
			if _, ok, err := s.TakeProbe(ctx, key, store.Lease{Holder: fmt.Sprint("h", i), At: due, Until: due.Add(5 * time.Second)}); err == nil && ok {
				granted.Add(1)
			}
		})
	}
	wg.Wait()
	if n := granted.Load(); n != 1 {
		t.Errorf("%d of 50 concurrent probe requests granted", n)
	}
}

func testShared(t *testing.T, stores []store.Store) {
	if len(stores) < 2 {
		t.Skip("one store: nothing to share")
	}
	a, b := stores[0], stores[1]
	now, key := clock(t, a)
	down(t, a, key, now, "")
	f, err := b.Load(ctx, key, now)
	must(t, err)
	if !f.Down(now) {
		t.Fatalf("a failure reported through one store is not seen through another: %+v", f)
	}
	due := now.Add(5 * time.Second)
	if _, ok, _ := a.TakeProbe(ctx, key, store.Lease{Holder: "a", At: due, Until: due.Add(5 * time.Second)}); !ok {
		t.Fatal("the due probe was not granted")
	}
	if _, ok, _ := b.TakeProbe(ctx, key, store.Lease{Holder: "b", At: due, Until: due.Add(5 * time.Second)}); ok {
		t.Errorf("a second process got the probe lease")
	}
	if _, err := b.Report(ctx, key, store.Report{At: due, Evidence: store.ProviderUp}); err != nil {
		t.Fatal(err)
	}
	f, err = a.Load(ctx, key, due)
	must(t, err)
	if f.Down(due) {
		t.Errorf("the recovery seen by one process is not seen by another: %+v", f)
	}
}

func testWatch(t *testing.T, stores []store.Store) {
	s := stores[len(stores)-1]
	now, key := clock(t, s)
	got, stop := watchKey(s, key)
	want := down(t, stores[0], key, now, "")
	if f := notice(t, got, want.Version, "a change"); !f.Down(now) {
		t.Errorf("the notice's facts: %+v", f)
	}
	stop()
	// After stop, no notice of a later change (one of an earlier change
	// may still be on its way).
	after := down(t, stores[0], key, now.Add(time.Second), "")
	quiet := time.After(500 * time.Millisecond)
	for {
		select {
		case f := <-got:
			if f.Version >= after.Version {
				t.Errorf("a notice after stop: %+v", f)
				return
			}
		case <-quiet:
			return
		}
	}
}

func testVersion(t *testing.T, stores []store.Store) {
	s := stores[0]
	now, key := clock(t, s)
	var last uint64
	step := func(what string, f store.Facts) {
		t.Helper()
		if f.Version <= last {
			t.Errorf("%s: Version %d after %d", what, f.Version, last)
		}
		last = f.Version
	}
	step("down", down(t, s, key, now, ""))
	due := now.Add(5 * time.Second)
	f, _, err := s.TakeProbe(ctx, key, store.Lease{Holder: "p", At: due, Until: due.Add(5 * time.Second)})
	must(t, err)
	step("probe", f)
	f, err = s.Report(ctx, key, store.Report{At: due, Evidence: store.ProviderUp, Prober: "p"})
	must(t, err)
	step("up", f)
	f, _, err = s.TakeRetry(ctx, key, store.Lease{Holder: "r", At: due, Until: due.Add(time.Minute)}, 3)
	must(t, err)
	step("retry lease", f)
	f, err = s.Release(ctx, key, "r", due)
	must(t, err)
	step("release", f)
}

// pace reports, at at, a response that says key's rate limit is spent: a
// bucket of burst requests, one back each every, full again at full.
func pace(t *testing.T, s store.Store, key string, at time.Time, burst int, every time.Duration, full time.Time) store.Facts {
	t.Helper()
	f, err := s.Report(ctx, key, store.Report{At: at, Evidence: store.ProviderUp, Burst: burst, Every: every, Full: full})
	must(t, err)
	return f
}

// limitTo limits key's calls in flight to n at at, growing by one each
// grow (none if 0), until capUntil: a 429 reported by a process (owner
// "limitTo") that had the key's n calls in flight, the key's only ones,
// all of which then ended.
func limitTo(t *testing.T, s store.Store, key string, at time.Time, n int, grow time.Duration, capUntil time.Time) store.Facts {
	t.Helper()
	seq := uint64(at.UnixNano())
	count(t, s, key, at, "limitTo", n, seq, capUntil, true, grow, capUntil)
	return count(t, s, key, at, "limitTo", 0, seq+1, capUntil, false, 0, time.Time{})
}

// count reports, at at, that owner has n of key's calls in flight without
// a send lease, as its seq-th count, lasting until until; with cut, a 429
// that limits the key's calls in flight, growing each grow, until
// capUntil.
func count(t *testing.T, s store.Store, key string, at time.Time, owner string, n int, seq uint64, until time.Time, cut bool, grow time.Duration, capUntil time.Time) store.Facts {
	t.Helper()
	r := store.Report{At: at, Evidence: store.ProviderUp, Owner: owner, Unleased: n, Seq: seq, TallyUntil: until}
	if cut {
		r.Reason, r.Cut, r.Grow, r.CapUntil = "429 Too Many Requests", true, grow, capUntil
	}
	f, err := s.Report(ctx, key, r)
	must(t, err)
	return f
}

// send asks for holder's next send of key at at, lasting until until,
// under limit.
func send(t *testing.T, s store.Store, key, holder string, at, until time.Time, limit int) (store.Facts, time.Time, bool) {
	t.Helper()
	f, slot, ok, err := s.TakeSend(ctx, key, store.Lease{Holder: holder, At: at, Until: until}, limit)
	must(t, err)
	return f, slot, ok
}

// samePace reports whether f's pace is burst, every, full.
func samePace(f store.Facts, burst int, every time.Duration, full time.Time) bool {
	return f.Burst == burst && f.Every == every && f.Full.Equal(full)
}

func testPace(t *testing.T, stores []store.Store) {
	now, key := clock(t, stores[0])
	sec := time.Second
	for i, step := range []struct {
		name  string
		at    time.Duration // after now
		burst int
		every time.Duration
		full  time.Duration // after now
		// The pace after the report.
		wantBurst int
		wantEvery time.Duration
		wantFull  time.Duration
	}{
		{"a new pace", 0, 5, sec, 10 * sec, 5, sec, 10 * sec},
		{"a sooner Full, a shorter Every and a larger Burst change nothing", sec, 8, sec / 2, 5 * sec, 5, sec, 10 * sec},
		{"a later Full, a longer Every and a smaller Burst", 2 * sec, 3, 2 * sec, 20 * sec, 3, 2 * sec, 20 * sec},
		{"a later Full alone", 3 * sec, 10, sec, 25 * sec, 3, 2 * sec, 25 * sec},
		{"a longer Every alone", 4 * sec, 10, 3 * sec, 5 * sec, 3, 3 * sec, 25 * sec},
		{"a smaller Burst alone", 5 * sec, 2, sec, 5 * sec, 2, 3 * sec, 25 * sec},
	} {
		at := now.Add(step.at)
		f := pace(t, stores[i%len(stores)], key, at, step.burst, step.every, now.Add(step.full))
		if !samePace(f, step.wantBurst, step.wantEvery, now.Add(step.wantFull)) || !f.Paced(at) {
			t.Errorf("%s: Burst %d, Every %v, Full +%v; want %d, %v, +%v", step.name, f.Burst, f.Every, f.Full.Sub(now),
				step.wantBurst, step.wantEvery, step.wantFull)
		}
	}
	// A report that says nothing of the rate limit leaves the pace alone.
	if f := quietReport(t, stores, key, now.Add(6*sec)); !samePace(f, 2, 3*sec, now.Add(25*sec)) {
		t.Errorf("a report without a pace changed it: %+v", f)
	}
}

// quietReport reports key up at at through the first of stores, a report
// that says nothing of a pace, a limit or a count; it returns the facts
// the last of stores loads then, checked to be the report's.
func quietReport(t *testing.T, stores []store.Store, key string, at time.Time) store.Facts {
	t.Helper()
	f, err := stores[0].Report(ctx, key, store.Report{At: at, Evidence: store.ProviderUp})
	must(t, err)
	l, err := stores[len(stores)-1].Load(ctx, key, at)
	must(t, err)
	if l.Version != f.Version || !samePace(l, f.Burst, f.Every, f.Full) || l.MaxInFlight != f.MaxInFlight || l.InFlight != f.InFlight {
		t.Errorf("Load says %+v, Report said %+v", l, f)
	}
	return f
}

// lapse loads key from s a millisecond before end and at end.
func lapse(t *testing.T, s store.Store, key string, end time.Time) (before, at store.Facts) {
	t.Helper()
	before, err := s.Load(ctx, key, end.Add(-time.Millisecond))
	must(t, err)
	at, err = s.Load(ctx, key, end)
	must(t, err)
	return before, at
}

func testPaceLapses(t *testing.T, stores []store.Store) {
	s := stores[0]
	now, key := clock(t, s)
	full := now.Add(10 * time.Second)
	pace(t, s, key, now, 5, time.Second, full)
	before, f := lapse(t, s, key, full)
	if !before.Paced(full.Add(-time.Millisecond)) || !samePace(before, 5, time.Second, full) {
		t.Errorf("not paced before Full: %+v", before)
	}
	if f.Paced(full) || !samePace(f, 0, 0, time.Time{}) {
		t.Errorf("paced at Full: %+v", f)
	}
	// A pace after the lapse is taken whole, not merged with the old one.
	g := pace(t, s, key, full, 8, 500*time.Millisecond, full.Add(4*time.Second))
	if !samePace(g, 8, 500*time.Millisecond, full.Add(4*time.Second)) {
		t.Errorf("a pace after the lapse: Burst %d, Every %v, Full +%v; want 8, 500ms, +4s", g.Burst, g.Every, g.Full.Sub(full))
	}
}

func testCap(t *testing.T, stores []store.Store) {
	now, key := clock(t, stores[0])
	sec := time.Second
	until := now.Add(time.Minute)
	for i, step := range []struct {
		name     string
		at       time.Duration // after now
		owner    string
		n        int
		seq      uint64
		cut      bool
		capUntil time.Duration // after now
		// After the report: the calls in flight the store counts, and the
		// limit (MaxInFlight; its CutAt and CapUntil).
		inFlight, limit int
		cutAt           time.Duration
		limitUntil      time.Duration
	}{
		{"a 429 from a process with 3 in flight: a limit of 3", 0, "a", 3, 1, true, 30 * sec, 3, 3, 0, 30 * sec},
		{"another process counts 5: the limit rises to 8", sec, "b", 5, 1, false, 0, 8, 8, 0, 30 * sec},
		{"a's stale count of 30 with a 429: the count is ignored, the limit is the 8 counted", 2 * sec, "a", 30, 1, true, 20 * sec, 8, 8, 2 * sec, 30 * sec},
		{"a's newer count of 0: fewer in flight, the limit stays", 3 * sec, "a", 0, 2, false, 0, 5, 8, 2 * sec, 30 * sec},
		{"a 429 from c, with none of its own in flight: the limit is the 5 counted, lasting longer", 4 * sec, "c", 0, 1, true, 40 * sec, 5, 5, 4 * sec, 40 * sec},
	} {
		at := now.Add(step.at)
		f := count(t, stores[i%len(stores)], key, at, step.owner, step.n, step.seq, until, step.cut, 0, now.Add(step.capUntil))
		if f.InFlight != step.inFlight || f.MaxInFlight != step.limit || !f.CutAt.Equal(now.Add(step.cutAt)) || !f.CapUntil.Equal(now.Add(step.limitUntil)) || !f.Capped(at) {
			t.Errorf("%s: InFlight %d, MaxInFlight %d, CutAt +%v, CapUntil +%v; want %d, %d, +%v, +%v", step.name,
				f.InFlight, f.MaxInFlight, f.CutAt.Sub(now), f.CapUntil.Sub(now), step.inFlight, step.limit, step.cutAt, step.limitUntil)
		}
	}
	at := now.Add(5 * sec)
	// Tallies count against TakeSend's limit with the send leases.
	if f, slot, ok := send(t, stores[0], key, "s", at, until, 5); ok || !slot.IsZero() || f.InFlight != 5 {
		t.Errorf("a send with 5 counted in flight under a limit of 5: granted %v, %d in flight", ok, f.InFlight)
	}
	if f, _, ok := send(t, stores[len(stores)-1], key, "s", at, until, 6); !ok || f.InFlight != 6 {
		t.Errorf("a send with 5 counted in flight under a limit of 6: granted %v, %d in flight", ok, f.InFlight)
	}
	// A report that says nothing of the limit or a count leaves them alone.
	if f := quietReport(t, stores, key, at); f.MaxInFlight != 5 || f.InFlight != 6 || !f.CutAt.Equal(now.Add(4*sec)) || !f.CapUntil.Equal(now.Add(40*sec)) {
		t.Errorf("a report without a limit changed it: %+v", f)
	}
	// A tally lapses at its end: b's 5 are no longer counted.
	l, err := stores[0].Load(ctx, key, until)
	must(t, err)
	if l.InFlight != 0 {
		t.Errorf("at the tallies' and the lease's end: %d counted in flight, want 0", l.InFlight)
	}
	// A growing limit, read back: Cap counts its steps from CutAt.
	later := until.Add(sec)
	limitTo(t, stores[0], key, later, 2, 500*time.Millisecond, later.Add(40*sec))
	l, err = stores[len(stores)-1].Load(ctx, key, later.Add(1750*time.Millisecond))
	must(t, err)
	if c := l.Cap(later.Add(1750 * time.Millisecond)); l.MaxInFlight != 2 || l.Grow != 500*time.Millisecond || !l.CutAt.Equal(later) || c != 5 {
		t.Errorf("a limit of 2 growing each 500 ms, 1.75 s later: %+v, Cap %d; want Cap 5", l, c)
	}
}

func testCapLapses(t *testing.T, stores []store.Store) {
	s := stores[0]
	now, key := clock(t, s)
	end := now.Add(30 * time.Second)
	limitTo(t, s, key, now, 8, time.Second, end)
	before, f := lapse(t, s, key, end)
	if !before.Capped(end.Add(-time.Millisecond)) || before.MaxInFlight != 8 {
		t.Errorf("not limited before CapUntil: %+v", before)
	}
	if f.Capped(end) || f.MaxInFlight != 0 || f.Grow != 0 || !f.CutAt.IsZero() || !f.CapUntil.IsZero() || f.Cap(end) != 0 {
		t.Errorf("limited at CapUntil: %+v", f)
	}
	// A limit after the lapse is the new count.
	g := limitTo(t, s, key, end, 16, 0, end.Add(time.Minute))
	if g.MaxInFlight != 16 || !g.CutAt.Equal(end) {
		t.Errorf("a limit after the lapse: %+v, want 16 from its At", g)
	}
}

func testTakeSendSlots(t *testing.T, stores []store.Store) {
	now, key := clock(t, stores[0])
	ms := time.Millisecond
	sec := time.Second
	// A bucket of 3, one back each second, with 2 left: full at +1 s.
	last := pace(t, stores[0], key, now, 3, sec, now.Add(sec))
	for i, step := range []struct {
		name      string
		at, until time.Duration // after now
		// The slot s = max(At, Full − (Burst−1)·Every), whether it is
		// granted (s not after Until), and Full after it: max(Full, s) +
		// Every if granted, unchanged if not.
		slot     time.Duration
		granted  bool
		wantFull time.Duration
	}{
		{"the bucket's first", 0, 10 * sec, 0, true, 2 * sec},
		{"its last", 0, 10 * sec, 0, true, 3 * sec},
		{"empty: one Every later", 0, 10 * sec, sec, true, 4 * sec},
		{"a slot after Until is refused, and returned", 0, 2*sec - ms, 2 * sec, false, 4 * sec},
		{"a slot at Until is granted", 500 * ms, 2 * sec, 2 * sec, true, 5 * sec},
		{"asked after its slot: At", 4 * sec, 10 * sec, 4 * sec, true, 6 * sec},
		{"lapsed at Full: At, at once, and no pace", 6 * sec, 10 * sec, 6 * sec, true, -1},
	} {
		at := now.Add(step.at)
		f, slot, ok := send(t, stores[i%len(stores)], key, fmt.Sprint("s", i), at, now.Add(step.until), 0)
		if ok != step.granted || !slot.Equal(now.Add(step.slot)) {
			t.Errorf("%s: slot +%v, granted %v; want +%v, %v", step.name, slot.Sub(now), ok, step.slot, step.granted)
		}
		switch {
		case step.wantFull < 0:
			if f.Paced(at) || !f.Full.IsZero() {
				t.Errorf("%s: still paced: %+v", step.name, f)
			}
		case !f.Full.Equal(now.Add(step.wantFull)):
			t.Errorf("%s: Full +%v, want +%v", step.name, f.Full.Sub(now), step.wantFull)
		}
		if step.granted && step.wantFull >= 0 && f.Version <= last.Version {
			t.Errorf("%s: Version %d after %d: Full changed", step.name, f.Version, last.Version)
		}
		if !step.granted && f.Version != last.Version {
			t.Errorf("%s: refused, yet Version %d after %d", step.name, f.Version, last.Version)
		}
		if f.InFlight != 0 {
			t.Errorf("%s: a send lease taken without a limit: %+v", step.name, f)
		}
		last = f
	}
}

func testSendLeases(t *testing.T, stores []store.Store) {
	now, key := clock(t, stores[0])
	until := now.Add(time.Minute)
	for i := range 3 {
		f, slot, ok := send(t, stores[i%len(stores)], key, fmt.Sprint("s", i), now, until, 3)
		if !ok || !slot.Equal(now) || f.InFlight != i+1 {
			t.Fatalf("send lease %d of 3: granted %v at +%v, %d in flight", i+1, ok, slot.Sub(now), f.InFlight)
		}
	}
	f, slot, ok := send(t, stores[0], key, "s3", now, until, 3)
	if ok || !slot.IsZero() || f.InFlight != 3 {
		t.Errorf("a fourth send lease under a limit of 3: granted %v, slot %v, %d in flight", ok, slot, f.InFlight)
	}
	l, err := stores[len(stores)-1].Load(ctx, key, now)
	must(t, err)
	if l.InFlight != 3 {
		t.Errorf("Load counts %d send leases, want 3", l.InFlight)
	}
	f, err = stores[0].Release(ctx, key, "s0", now)
	must(t, err)
	if f.InFlight != 2 {
		t.Errorf("after a release: %d in flight", f.InFlight)
	}
	if f, _, ok := send(t, stores[len(stores)-1], key, "s3", now, until, 3); !ok || f.InFlight != 3 {
		t.Errorf("a released send lease was not freed: granted %v, %d in flight", ok, f.InFlight)
	}
	// Limit 0 takes no lease: its send is granted however many are live.
	f, slot, ok = send(t, stores[0], key, "free", now, until, 0)
	if !ok || !slot.Equal(now) || f.InFlight != 3 {
		t.Errorf("a send without a limit: granted %v at +%v, %d in flight; want granted at once, 3 in flight", ok, slot.Sub(now), f.InFlight)
	}
	if f, err := stores[0].Release(ctx, key, "free", now); err != nil || f.InFlight != 3 {
		t.Errorf("releasing a send that took no lease: %d in flight, %v", f.InFlight, err)
	}
	// Send and retry leases are counted apart.
	if f, ok, err := stores[0].TakeRetry(ctx, key, store.Lease{Holder: "r", At: now, Until: until}, 1); err != nil || !ok || f.Retries != 1 || f.InFlight != 3 {
		t.Errorf("a retry lease beside 3 send leases: granted %v, %d retries, %d in flight, %v", ok, f.Retries, f.InFlight, err)
	}
}

func testSenderEnds(t *testing.T, stores []store.Store) {
	now, key := clock(t, stores[0])
	until := now.Add(time.Minute)
	limitTo(t, stores[0], key, now, 3, 0, until)
	for i := range 3 {
		if _, _, ok := send(t, stores[i%len(stores)], key, fmt.Sprint("s", i), now, until, 3); !ok {
			t.Fatalf("send lease %d of 3 was not granted", i+1)
		}
	}
	// s2's attempt was refused: its 429 cuts the limit to the 2 others in
	// flight, its own lease ended as it counts them.
	at := now.Add(time.Second)
	f, err := stores[len(stores)-1].Report(ctx, key, store.Report{At: at, Evidence: store.ProviderUp, Reason: "429 Too Many Requests",
		Sender: "s2", Cut: true, CapUntil: until})
	must(t, err)
	if f.InFlight != 2 || f.MaxInFlight != 2 {
		t.Errorf("a cut with the refused send's lease: %d in flight, limit %d; want 2, 2", f.InFlight, f.MaxInFlight)
	}
	if _, _, ok := send(t, stores[0], key, "s3", at, until, f.Cap(at)); ok {
		t.Error("a send granted under the cut's limit with 2 in flight")
	}
	// A sender that holds no lease (ended, or another store's) changes
	// nothing.
	f, err = stores[0].Report(ctx, key, store.Report{At: at, Evidence: store.ProviderUp, Sender: "s2"})
	must(t, err)
	if f.InFlight != 2 {
		t.Errorf("a sender without a lease: %d in flight, want 2", f.InFlight)
	}
}

func testSendLeaseLapses(t *testing.T, stores []store.Store) {
	s := stores[0]
	now, key := clock(t, s)
	end := now.Add(5 * time.Second)
	if _, _, ok := send(t, s, key, "a", now, end, 1); !ok {
		t.Fatal("the first send lease was not granted")
	}
	before := end.Add(-time.Millisecond)
	if f, _, ok := send(t, s, key, "b", before, before.Add(5*time.Second), 1); ok || f.InFlight != 1 {
		t.Errorf("a second send lease under a limit of 1 before the first lapsed: granted %v, %d in flight", ok, f.InFlight)
	}
	f, err := s.Load(ctx, key, end)
	must(t, err)
	if f.InFlight != 0 {
		t.Errorf("%d send leases live at their Until", f.InFlight)
	}
	if f, _, ok := send(t, s, key, "b", end, end.Add(5*time.Second), 1); !ok || f.InFlight != 1 {
		t.Errorf("a lapsed send lease still counts: granted %v, %d in flight", ok, f.InFlight)
	}
}

func testSendReleaseAnnounced(t *testing.T, stores []store.Store) {
	s := stores[0]
	now, key := clock(t, s)
	got, stop := watchKey(stores[len(stores)-1], key)
	defer stop()
	if _, _, ok := send(t, s, key, "a", now, now.Add(time.Minute), 1); !ok {
		t.Fatal("the send lease was not granted")
	}
	want, err := s.Release(ctx, key, "a", now)
	must(t, err)
	if want.InFlight != 0 {
		t.Fatalf("after the release: %d in flight", want.InFlight)
	}
	if f := notice(t, got, want.Version, "the send lease's end (calls elsewhere may wait for it)"); f.InFlight != 0 {
		t.Errorf("the notice's facts: %+v", f)
	}
}

// watchKey watches s for the notices of key; they wait in the channel
// (16 at the most, the rest dropped) until stop.
func watchKey(s store.Store, key string) (got <-chan store.Facts, stop func()) {
	c := make(chan store.Facts, 16)
	stop = s.Watch(func(k string, f store.Facts) {
		if k == key {
			select {
			case c <- f:
			default:
			}
		}
	})
	return c, stop
}

// notice returns the first notice on got of version at least version
// (notices of earlier changes may come first), failing t when none comes
// within NoticeWait; what names the change for that failure.
func notice(t *testing.T, got <-chan store.Facts, version uint64, what string) store.Facts {
	t.Helper()
	deadline := time.After(NoticeWait)
	for {
		select {
		case f := <-got:
			if f.Version >= version {
				return f
			}
		case <-deadline:
			t.Fatalf("no notice of %s within %v", what, NoticeWait)
			return store.Facts{}
		}
	}
}

func testTakeSendQuiet(t *testing.T, stores []store.Store) {
	s := stores[0]
	now, key := clock(t, s)
	f, slot, ok := send(t, s, key, "a", now, now.Add(time.Minute), 0)
	if !ok || !slot.Equal(now) {
		t.Errorf("a quiet key's send: granted %v at +%v, want at once", ok, slot.Sub(now))
	}
	if f.Paced(now) || f.Capped(now) || f.InFlight != 0 || f.Burst != 0 || f.Every != 0 || !f.Full.IsZero() {
		t.Errorf("a send without a limit on a quiet key left facts: %+v", f)
	}
	f, slot, ok = send(t, s, key, "b", now, now.Add(time.Minute), 2)
	if !ok || !slot.Equal(now) || f.InFlight != 1 {
		t.Errorf("a quiet key's send under a limit: granted %v at +%v, %d in flight; want at once, 1", ok, slot.Sub(now), f.InFlight)
	}
}

func testPacedAndLimited(t *testing.T, stores []store.Store) {
	s := stores[0]
	now, key := clock(t, s)
	sec := time.Second
	// A bucket of 2 with one left, and one call in flight at most.
	pace(t, s, key, now, 2, sec, now.Add(sec))
	limitTo(t, s, key, now, 1, 0, now.Add(time.Minute))
	f, slot, ok := send(t, s, key, "a", now, now.Add(10*sec), 1)
	if !ok || !slot.Equal(now) || !f.Full.Equal(now.Add(2*sec)) || f.InFlight != 1 {
		t.Fatalf("the first send: granted %v at +%v, Full +%v, %d in flight", ok, slot.Sub(now), f.Full.Sub(now), f.InFlight)
	}
	// Its slot is free (+1 s), but the limit is reached: the zero time,
	// and the pace does not move.
	f, slot, ok = send(t, s, key, "b", now, now.Add(10*sec), 1)
	if ok || !slot.IsZero() || !f.Full.Equal(now.Add(2*sec)) {
		t.Errorf("a send over the limit: granted %v, slot %v, Full +%v; want refused, the zero time, +2s", ok, slot, f.Full.Sub(now))
	}
	// A slot after Until is said first, limit or not.
	f, slot, ok = send(t, s, key, "b", now, now.Add(sec/2), 1)
	if ok || !slot.Equal(now.Add(sec)) || !f.Full.Equal(now.Add(2*sec)) {
		t.Errorf("a send whose slot is after Until: granted %v, slot +%v, Full +%v; want refused at +1s, +2s", ok, slot.Sub(now), f.Full.Sub(now))
	}
	if _, err := s.Release(ctx, key, "a", now.Add(sec/2)); err != nil {
		t.Fatal(err)
	}
	f, slot, ok = send(t, s, key, "b", now.Add(sec/2), now.Add(10*sec), 1)
	if !ok || !slot.Equal(now.Add(sec)) || !f.Full.Equal(now.Add(3*sec)) || f.InFlight != 1 {
		t.Errorf("the second send after the first ended: granted %v at +%v, Full +%v, %d in flight; want +1s, +3s, 1",
			ok, slot.Sub(now), f.Full.Sub(now), f.InFlight)
	}
}

func testSendRace(t *testing.T, stores []store.Store) {
	now, key := clock(t, stores[0])
	const n = 20
	every := 100 * time.Millisecond
	// An empty bucket of 1: one send each 100 ms from +100 ms.
	pace(t, stores[0], key, now, 1, every, now.Add(every))
	var mu sync.Mutex
	slots := map[time.Time]int{}
	var wg sync.WaitGroup
	for i := range n {
		s := stores[i%len(stores)]
		wg.Go(func() {
			_, slot, ok, err := s.TakeSend(ctx, key, store.Lease{Holder: fmt.Sprint("p", i), At: now, Until: now.Add(time.Minute)}, 0)
			if err != nil || !ok {
				t.Errorf("send %d: granted %v, %v", i, ok, err)
				return
			}
			mu.Lock()
			slots[slot]++
			mu.Unlock()
		})
	}
	wg.Wait()
	for i := 1; i <= n; i++ {
		if at := now.Add(time.Duration(i) * every); slots[at] != 1 {
			t.Errorf("slot +%v granted %d times, want once", time.Duration(i)*every, slots[at])
		}
	}

	_, key2 := clock(t, stores[0])
	key2 += "-limited"
	var granted atomic.Int32
	for i := range n {
		s := stores[i%len(stores)]
		wg.Go(func() {
			if _, _, ok, err := s.TakeSend(ctx, key2, store.Lease{Holder: fmt.Sprint("l", i), At: now, Until: now.Add(time.Minute)}, 5); err == nil && ok {
				granted.Add(1)
			}
		})
	}
	wg.Wait()
	if g := granted.Load(); g != 5 {
		t.Errorf("%d of %d concurrent send leases granted under a limit of 5", g, n)
	}
}
