package storetest

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmretry/llmretry/store"
)

// A key's health: a down failure takes it down until it lapses or an
// answer brings it up; one probe lease at a time, when due; server waits and
// retry leases; facts shared by every store over the backend, told by Watch,
// numbered by Version.

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
