package wire

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestParseProtoDuration(t *testing.T) {
	valid := []struct {
		in   string
		want time.Duration
	}{
		{"26s", 26 * time.Second},
		{"38.804097346s", 38*time.Second + 804097346*time.Nanosecond},
		{"0s", 0},
		{"0.5s", 500 * time.Millisecond},
		{"1.000000001s", time.Second + time.Nanosecond},
		{"007s", 7 * time.Second},
		{"86400s", 24 * time.Hour},
		{"315576000s", 315576000 * time.Second},
		{"9223372036.854775807s", time.Duration(1<<63 - 1)},
	}
	for _, tt := range valid {
		d, ok := ParseProtoDuration(tt.in)
		assert.True(t, ok, "%q should parse", tt.in)
		assert.Equal(t, tt.want, d, "%q", tt.in)
	}
	invalid := []string{
		"", "s", "26", "-1s", "+1s", "-0s", "abc", "1e9999s", "1e3s", "NaNs", "Infs",
		".5s", "1.s", "1.5.5s", "1.0000000001s", " 1s", "1s ", "1 s", "1ss", "1S",
		"0x10s", "1_000s", "１s", "26ms", "1m", "9223372036.854775808s", "9223372037s",
		"315576000000s", "99999999999999999999999999999s", strings.Repeat("9", 10000) + "s",
	}
	for _, in := range invalid {
		d, ok := ParseProtoDuration(in)
		assert.False(t, ok, "%q should not parse", in)
		assert.Zero(t, d, "%q", in)
	}
}

// FuzzParseProtoDuration checks ParseProtoDuration against
// time.ParseDuration, which accepts every string it accepts.
func FuzzParseProtoDuration(f *testing.F) {
	for _, s := range []string{"26s", "38.804097346s", "0s", "0.5s", "", "26", "-1s", "abc", "1e9999s", "NaNs", "9223372036.854775807s", "9223372036.854775808s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := ParseProtoDuration(s)
		if !ok {
			if d != 0 {
				t.Fatalf("%q rejected with %v", s, d)
			}
			return
		}
		if d < 0 {
			t.Fatalf("%q gave negative %v", s, d)
		}
		want, err := time.ParseDuration(s)
		if err != nil || want != d {
			t.Fatalf("%q gave %v, time.ParseDuration gives %v, %v", s, d, want, err)
		}
	})
}
