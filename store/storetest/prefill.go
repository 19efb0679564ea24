package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/llmretry/llmretry/store"
)

// The optional store.PrefillRefusals: a refusal recorded through one
// store is read through every other over the backend, per key and model,
// until it lapses; its lifetime is bounded by store.PrefillHold. Run skips
// these checks for a Store that does not implement it.

// refusals returns stores as store.PrefillRefusals, or skips the test.
func refusals(t *testing.T, stores []store.Store) []store.PrefillRefusals {
	t.Helper()
	var rs []store.PrefillRefusals
	for _, s := range stores {
		r, ok := s.(store.PrefillRefusals)
		if !ok {
			t.Skipf("%T does not implement store.PrefillRefusals (optional)", s)
		}
		rs = append(rs, r)
	}
	return rs
}

// refusedUntil returns what r says of key and model at now.
func refusedUntil(t *testing.T, r store.PrefillRefusals, key, model string, now time.Time) time.Time {
	t.Helper()
	until, err := r.PrefillRefused(ctx, key, model, now)
	must(t, err)
	return until
}

func testPrefillRefusals(t *testing.T, stores []store.Store) {
	rs := refusals(t, stores)
	now, key := clock(t, stores[0])
	other := stores[0].Key("api.storetest.test", []byte(t.Name()+" another credential"))
	if u := refusedUntil(t, rs[0], key, "m", now); !u.IsZero() {
		t.Fatalf("a refusal never recorded reads as lapsing at %v", u)
	}
	must(t, rs[0].RefusePrefill(ctx, key, "m", now, time.Hour))
	for i, r := range rs {
		if u := refusedUntil(t, r, key, "m", now.Add(time.Second)); !u.Equal(now.Add(time.Hour)) {
			t.Errorf("store %d: the refusal lapses at +%v, want +1h", i, u.Sub(now))
		}
		if u := refusedUntil(t, r, key, "m-other", now); !u.IsZero() {
			t.Errorf("store %d: another model reads as refusing", i)
		}
		if u := refusedUntil(t, r, other, "m", now); !u.IsZero() {
			t.Errorf("store %d: another key reads as refusing", i)
		}
	}
	last := rs[len(rs)-1]
	if u := refusedUntil(t, last, key, "m", now.Add(time.Hour-time.Millisecond)); u.IsZero() {
		t.Error("the refusal lapsed before its end")
	}
	if u := refusedUntil(t, last, key, "m", now.Add(time.Hour)); !u.IsZero() {
		t.Errorf("the refusal is live at its end: %v", u)
	}
	// A new record replaces the old one.
	must(t, last.RefusePrefill(ctx, key, "m", now.Add(time.Minute), 2*time.Hour))
	if u := refusedUntil(t, rs[0], key, "m", now.Add(time.Minute)); !u.Equal(now.Add(time.Minute + 2*time.Hour)) {
		t.Errorf("a new record: the refusal lapses at +%v, want +2h1m", u.Sub(now))
	}
}

func testPrefillHold(t *testing.T, stores []store.Store) {
	rs := refusals(t, stores)
	now, key := clock(t, stores[0])
	must(t, rs[0].RefusePrefill(ctx, key, "m", now, 3*store.PrefillHold))
	if u := refusedUntil(t, rs[len(rs)-1], key, "m", now); !u.Equal(now.Add(store.PrefillHold)) {
		t.Errorf("a ttl of 3 × PrefillHold: the refusal lapses at +%v, want +%v", u.Sub(now), store.PrefillHold)
	}
	must(t, rs[0].RefusePrefill(ctx, key, "z", now, 0))
	if u := refusedUntil(t, rs[0], key, "z", now); !u.IsZero() {
		t.Errorf("a ttl of 0 recorded a refusal until +%v", u.Sub(now))
	}
	// A model is any string: long, with braces, NULs and newlines, and
	// told apart from its prefix.
	model := "{m}\x00\n" + strings.Repeat("very-long-model-name/", 500)
	must(t, rs[0].RefusePrefill(ctx, key, model, now, time.Hour))
	if u := refusedUntil(t, rs[len(rs)-1], key, model, now); !u.Equal(now.Add(time.Hour)) {
		t.Errorf("a long model with odd bytes: the refusal lapses at +%v, want +1h", u.Sub(now))
	}
	if u := refusedUntil(t, rs[0], key, model[:len(model)-1], now); !u.IsZero() {
		t.Error("a model's prefix reads as refusing")
	}
}
