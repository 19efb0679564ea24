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
	"context"
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
