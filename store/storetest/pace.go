package storetest

import (
	"testing"
	"time"

	"github.com/llmretry/llmretry/store"
)

// A spent rate limit's pace (Facts.Burst, Every, Full) and a 429's limit on
// calls in flight (MaxInFlight, CapUntil): how reports merge and when each
// lapses.

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
