package store_test

import (
	"testing"
	"time"

	"github.com/llmretry/llmretry/store"
	"github.com/stretchr/testify/assert"
)

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

// Each fact holds until its end, not at it, and the zero Facts says that
// nothing is known.
func TestFactsLiveUntilTheirEnd(t *testing.T) {
	end := t0.Add(10 * time.Second)
	for _, tc := range []struct {
		name string
		f    store.Facts
		live func(store.Facts, time.Time) bool
	}{
		{"Down", store.Facts{DownSince: t0, DownUntil: end}, store.Facts.Down},
		{"Probing", store.Facts{Prober: "p", ProbeUntil: end}, store.Facts.Probing},
		{"Waiting", store.Facts{WaitUntil: end}, store.Facts.Waiting},
		{"Paced", store.Facts{Burst: 5, Every: time.Second, Full: end}, store.Facts.Paced},
		{"Capped", store.Facts{MaxInFlight: 3, CutAt: t0, CapUntil: end}, store.Facts.Capped},
	} {
		assert.True(t, tc.live(tc.f, t0), "%s at its start", tc.name)
		assert.True(t, tc.live(tc.f, end.Add(-time.Nanosecond)), "%s just before its end", tc.name)
		assert.False(t, tc.live(tc.f, end), "%s at its end", tc.name)
		assert.False(t, tc.live(store.Facts{}, t0), "%s of the zero Facts", tc.name)
	}
}

// A fact needs its whole record to hold: an end alone says nothing.
func TestFactsNeedTheirRecord(t *testing.T) {
	end := t0.Add(time.Minute)
	assert.False(t, store.Facts{DownUntil: end}.Down(t0), "down without DownSince")
	assert.False(t, store.Facts{ProbeUntil: end}.Probing(t0), "probing without a Prober")
	assert.False(t, store.Facts{Burst: 5, Full: end}.Paced(t0), "paced without Every")
	assert.False(t, store.Facts{CapUntil: end}.Capped(t0), "limited without MaxInFlight")
}

// Cap is MaxInFlight plus one for each Grow since CutAt, while the limit
// lives.
func TestFactsCap(t *testing.T) {
	f := store.Facts{MaxInFlight: 4, Grow: 30 * time.Second, CutAt: t0, CapUntil: t0.Add(time.Hour)}
	for _, tc := range []struct {
		name string
		f    store.Facts
		at   time.Time
		want int
	}{
		{"at the cut", f, t0, 4},
		{"before a step", f, t0.Add(30*time.Second - 1), 4},
		{"a step", f, t0.Add(30 * time.Second), 5},
		{"two and a half steps", f, t0.Add(75 * time.Second), 6},
		{"before the cut (another clock)", f, t0.Add(-time.Minute), 4},
		{"without Grow", store.Facts{MaxInFlight: 4, CutAt: t0, CapUntil: t0.Add(time.Hour)}, t0.Add(time.Minute), 4},
		{"a negative Grow", store.Facts{MaxInFlight: 4, Grow: -time.Second, CutAt: t0, CapUntil: t0.Add(time.Hour)}, t0.Add(time.Minute), 4},
		{"growth is bounded", store.Facts{MaxInFlight: 4, Grow: time.Nanosecond, CutAt: t0, CapUntil: t0.Add(time.Hour)}, t0.Add(time.Minute), 4 + 1<<20},
		{"at CapUntil: no limit", f, t0.Add(time.Hour), 0},
		{"the zero Facts: no limit", store.Facts{}, t0, 0},
	} {
		assert.Equal(t, tc.want, tc.f.Cap(tc.at), tc.name)
	}
}

// Climb raises the rate by half a request a second per send, in whole
// microseconds, never past the floor, and leaves a spacing it cannot
// compute exactly as it is.
func TestClimb(t *testing.T) {
	assert.Equal(t, 666666*time.Microsecond, store.Climb(time.Second, 0), "1/s + 0.5/s = 1.5/s")
	assert.Equal(t, 799999*time.Microsecond, store.Climb(time.Second+time.Second/3, 0), "0.75/s + 0.5/s = 1.25/s, in whole µs")
	assert.Equal(t, 900*time.Millisecond, store.Climb(time.Second, 900*time.Millisecond), "not below the floor")
	assert.Equal(t, 2*time.Hour, store.Climb(2*time.Hour, 0), "beyond an hour: as it is")
	// While sends keep going at it, the rate grows about e^0.5 ≈ 1.65
	// times a second, from any rate.
	rateAt := func(d time.Duration) float64 {
		s := time.Second
		for at := time.Duration(0); at < d; at += s {
			s = store.Climb(s, 0)
		}
		return float64(time.Second) / float64(s)
	}
	for _, at := range []time.Duration{2 * time.Second, 5 * time.Second} {
		assert.InDelta(t, 1.65, rateAt(at+time.Second)/rateAt(at), 0.15, "from %v", at)
	}
}

func TestTaught(t *testing.T) {
	now := time.Unix(1000, 0)
	assert.False(t, store.Facts{}.Taught(now))
	assert.True(t, store.Facts{Spacing: time.Second, TaughtUntil: now.Add(time.Second)}.Taught(now))
	assert.False(t, store.Facts{Spacing: time.Second, TaughtUntil: now}.Taught(now), "lapsed at TaughtUntil")
}
