package coord

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// floorOf reads a bucket's true interval from a spent-limit 429: exactly
// when the reset less the wait is a whole number of intervals in a round
// window, else a bound from the wait alone; nothing when it proves no
// more than the headers' pace.
func TestFloorOf(t *testing.T) {
	ms, s := time.Millisecond, time.Second
	// x-ratelimit-limit-requests: 60 over a 10-s reset: 166 ms a request.
	minute := pace{burst: 60, every: 10 * s / 60}
	for _, c := range []struct {
		name                 string
		pc                   pace
		untilFull, wait, res time.Duration
		want                 time.Duration
	}{
		{"a bucket of 10 refilled at 1/s, at its empty phase: full in 10 s, one back in 1 s", minute, 10 * s, s, 0, s},
		{"the same bucket 0.1 s on: full in 9.9 s, one back in 0.9 s", minute, 9900 * ms, 900 * ms, 0, s},
		{"the same bucket 0.927 s on", minute, 9073 * ms, 73 * ms, 0, 0},
		{"a wait no longer than the headers' interval proves nothing", pace{burst: 10, every: s}, 10 * s, s, 0, 0},
		{"a wait in whole seconds, a second short: nothing", minute, 10 * s, s, s, 0},
		{"no round window fits: the wait bounds it, 10 s holding at most 11 of 0.9 s", minute, 7 * s, 900 * ms, 0, 10 * s / 11},
		{"Retry-After: 3 on a 10-s window: at least 2 s, at most 5 in 10 s", minute, 10 * s, 3 * s, s, 2 * s},
	} {
		assert.Equal(t, c.want, floorOf(c.pc, c.untilFull, c.wait, c.res), c.name)
	}
}

func TestWindowOf(t *testing.T) {
	w, n, ok := windowOf(time.Second)
	assert.True(t, ok)
	assert.Equal(t, time.Second, w, "the first round window a floor divides")
	assert.Equal(t, int64(1), n)
	w, n, ok = windowOf(10 * time.Second / 11)
	assert.True(t, ok)
	assert.Equal(t, 10*time.Second, w)
	assert.Equal(t, int64(11), n)
	_, _, ok = windowOf(7 * time.Second)
	assert.False(t, ok)
}

func TestStatedResolution(t *testing.T) {
	assert.Equal(t, time.Duration(0), statedResolution(http.Header{}), "words: to the millisecond")
	assert.Equal(t, time.Second, statedResolution(http.Header{"Retry-After": {"1"}}))
	assert.Equal(t, time.Duration(0), statedResolution(http.Header{"Retry-After": {"1"}, "Retry-After-Ms": {"250"}}))
}
