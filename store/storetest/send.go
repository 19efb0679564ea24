package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmretry/llmretry/store"
)

// TakeSend: a paced or limited key's sends get their slots and leases; a
// lease ends with Release, its sender's Report or at Until, and its end is
// announced.

// send asks for holder's next send of key at at, lasting until until,
// under limit.
func send(t *testing.T, s store.Store, key, holder string, at, until time.Time, limit int) (store.Facts, time.Time, bool) {
	t.Helper()
	f, slot, ok, err := s.TakeSend(ctx, key, store.Lease{Holder: holder, At: at, Until: until}, limit)
	must(t, err)
	return f, slot, ok
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
