package storetest

import (
	"testing"
	"time"

	"github.com/llmretry/llmretry/store"
)

// What 429s teach a key of a rate its provider enforces below the one it
// publishes (Facts.Spacing, Floor, Next, TaughtUntil): how reports merge,
// how TakeSend spaces sends under it and climbs back, and when it lapses.

// teach reports, at at, a 429 that teaches key spacing and floor.
func teach(t *testing.T, s store.Store, key string, at time.Time, spacing, floor time.Duration) store.Facts {
	t.Helper()
	f, err := s.Report(ctx, key, store.Report{At: at, Evidence: store.ProviderUp, Spacing: spacing, Floor: floor})
	must(t, err)
	return f
}

// sameLesson reports whether f's lesson is spacing, floor, next and until.
func sameLesson(f store.Facts, spacing, floor time.Duration, next, until time.Time) bool {
	return f.Spacing == spacing && f.Floor == floor && f.Next.Equal(next) && f.TaughtUntil.Equal(until)
}

func testTaught(t *testing.T, stores []store.Store) {
	now, key := clock(t, stores[0])
	sec, hold := time.Second, store.LessonHold
	for i, step := range []struct {
		name            string
		at              time.Duration // after now
		spacing, floor  time.Duration
		wantSpacing     time.Duration
		wantFloor       time.Duration
		wantNext, until time.Duration // after now
	}{
		{"a new lesson: the next send one spacing on", 0, 2 * sec, 0, 2 * sec, 0, 2 * sec, hold},
		{"a floor: the longer floor, the next send a floor on, the spacing kept", sec, sec, 1500 * time.Millisecond, 2 * sec, 1500 * time.Millisecond, 2500 * time.Millisecond, sec + hold},
		{"a shorter spacing and floor change nothing but the lesson's end", 2 * sec, sec, sec, 2 * sec, 1500 * time.Millisecond, 3 * sec, 2*sec + hold},
		{"a longer spacing", 3 * sec, 4 * sec, 0, 4 * sec, 1500 * time.Millisecond, 7 * sec, 3*sec + hold},
		{"a floor above the spacing raises it", 4 * sec, 0, 5 * sec, 5 * sec, 5 * sec, 9 * sec, 4*sec + hold},
	} {
		at := now.Add(step.at)
		f := teach(t, stores[i%len(stores)], key, at, step.spacing, step.floor)
		if !sameLesson(f, step.wantSpacing, step.wantFloor, now.Add(step.wantNext), now.Add(step.until)) || !f.Taught(at) {
			t.Errorf("%s: Spacing %v, Floor %v, Next +%v, TaughtUntil +%v; want %v, %v, +%v, +%v", step.name,
				f.Spacing, f.Floor, f.Next.Sub(now), f.TaughtUntil.Sub(now), step.wantSpacing, step.wantFloor, step.wantNext, step.until)
		}
	}
	// A report that teaches nothing leaves the lesson alone, and Load says
	// what Report said.
	at := now.Add(5 * sec)
	f, err := stores[0].Report(ctx, key, store.Report{At: at, Evidence: store.ProviderUp})
	must(t, err)
	if !sameLesson(f, 5*sec, 5*sec, now.Add(9*sec), now.Add(4*sec+hold)) {
		t.Errorf("a report without a lesson changed it: %+v", f)
	}
	l, err := stores[len(stores)-1].Load(ctx, key, at)
	must(t, err)
	if !sameLesson(l, 5*sec, 5*sec, now.Add(9*sec), now.Add(4*sec+hold)) || l.Version != f.Version {
		t.Errorf("Load says %+v, Report said %+v", l, f)
	}
}

func testTaughtSends(t *testing.T, stores []store.Store) {
	now, key := clock(t, stores[0])
	sec, us := time.Second, time.Microsecond
	until := now.Add(time.Minute)
	teach(t, stores[0], key, now, sec, 0)
	// Each send goes one spacing after the one before, and climbs: 1 s,
	// then 1/(1 + 0.5) s, then 1/(1.5 + 0.5) s (store.Climb, in whole
	// microseconds, rounded down).
	for i, want := range []struct {
		slot, next time.Duration // after now
		spacing    time.Duration
	}{
		{sec, 2 * sec, 666666 * us},
		{2 * sec, 2*sec + 666666*us, 499999 * us},
		{2*sec + 666666*us, 3*sec + 166665*us, 399999 * us},
	} {
		f, slot, ok := send(t, stores[i%len(stores)], key, "h", now, until, 0)
		// TaughtUntil may be kept to the millisecond, rounded up.
		end := now.Add(want.slot + store.LessonHold)
		if !ok || !slot.Equal(now.Add(want.slot)) || !f.Next.Equal(now.Add(want.next)) || f.Spacing != want.spacing ||
			f.TaughtUntil.Before(end) || !f.TaughtUntil.Before(end.Add(time.Millisecond)) {
			t.Errorf("send %d: granted %v at +%v, Next +%v, Spacing %v, TaughtUntil +%v; want +%v, +%v, %v, +%v", i, ok, slot.Sub(now),
				f.Next.Sub(now), f.Spacing, f.TaughtUntil.Sub(now), want.slot, want.next, want.spacing, want.slot+store.LessonHold)
		}
	}
	// A slot past the lease's end is not granted, and changes nothing.
	f, slot, ok := send(t, stores[0], key, "h", now, now.Add(3*sec), 0)
	if ok || !slot.Equal(now.Add(3*sec+166665*us)) || f.Spacing != 399999*us {
		t.Errorf("a slot past Until: granted %v at +%v, Spacing %v", ok, slot.Sub(now), f.Spacing)
	}

	// The spacing climbs no further than the floor; a paced key's slot is
	// the later of the pace's and the lesson's.
	_, key2 := clock(t, stores[0])
	key2 += "-floor"
	teach(t, stores[0], key2, now, 2*sec, 1500*time.Millisecond)
	pace(t, stores[0], key2, now, 10, 100*time.Millisecond, now.Add(5*sec))
	for i, want := range []time.Duration{5 * sec, 7 * sec, 8500 * time.Millisecond, 10 * sec} {
		f, slot, ok := send(t, stores[i%len(stores)], key2, "h", now.Add(5*sec), until, 0)
		if !ok || !slot.Equal(now.Add(want)) || f.Spacing < 1500*time.Millisecond {
			t.Errorf("floored send %d: granted %v at +%v, Spacing %v; want +%v, at least 1.5 s", i, ok, slot.Sub(now), f.Spacing, want)
		}
	}
}

func testTaughtLapses(t *testing.T, stores []store.Store) {
	s := stores[0]
	now, key := clock(t, s)
	teach(t, s, key, now, time.Second, time.Second)
	end := now.Add(store.LessonHold)
	before := end.Add(-time.Millisecond)
	f, err := s.Load(ctx, key, before)
	must(t, err)
	if !f.Taught(before) || f.Spacing != time.Second {
		t.Errorf("not taught before TaughtUntil: %+v", f)
	}
	f, err = s.Load(ctx, key, end)
	must(t, err)
	if f.Taught(end) || !sameLesson(f, 0, 0, time.Time{}, time.Time{}) {
		t.Errorf("taught at TaughtUntil: %+v", f)
	}
	// A lesson after the lapse is taken whole, not merged with the old one.
	g := teach(t, s, key, end, 300*time.Millisecond, 0)
	if !sameLesson(g, 300*time.Millisecond, 0, end.Add(300*time.Millisecond), end.Add(store.LessonHold)) {
		t.Errorf("a lesson after the lapse: %+v", g)
	}
}
