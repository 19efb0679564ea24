package ratehdr

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestCount(t *testing.T) {
	for _, c := range []struct {
		v    string
		want int64
		ok   bool
	}{{"0", 0, true}, {" 12 ", 12, true}, {"-1", -1, false}, {"", 0, false}, {"1.5", 0, false}} {
		n, ok := Count(c.v)
		assert.Equal(t, c.ok, ok, c.v)
		if ok {
			assert.Equal(t, c.want, n, c.v)
		}
	}
}

func TestGoDuration(t *testing.T) {
	d, ok := GoDuration(" 6m0s ")
	assert.True(t, ok)
	assert.Equal(t, 6*time.Minute, d)
	for _, v := range []string{"", "-1s", "soon", "12"} {
		_, ok := GoDuration(v)
		assert.False(t, ok, v)
	}
}

func TestUnixInstant(t *testing.T) {
	at, res, ok := UnixInstant("1764576000")
	assert.True(t, ok)
	assert.Equal(t, time.Unix(1764576000, 0), at, "seconds")
	assert.Equal(t, time.Second, res)
	at, res, ok = UnixInstant("1764576000123")
	assert.True(t, ok)
	assert.Equal(t, time.UnixMilli(1764576000123), at, "milliseconds")
	assert.Equal(t, time.Millisecond, res)
	for _, v := range []string{"", "0", "-5", "12345", "soon"} {
		_, _, ok := UnixInstant(v)
		assert.False(t, ok, v)
	}
}
