package wire

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
)

// awsMessage returns an AWS event-stream message of total length size (its
// bytes past the length are filler: Frames reads only the length).
func awsMessage(size uint32) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint32(b, size)
	return b
}

func TestFramesInside(t *testing.T) {
	two := append(awsMessage(40), awsMessage(16)...)
	tests := []struct {
		name   string
		feed   [][]byte
		inside bool
	}{
		{"nothing", nil, false},
		{"one whole message", [][]byte{awsMessage(40)}, false},
		{"two whole messages", [][]byte{two}, false},
		{"two messages, a byte at a time", split(two, 1), false},
		{"two messages in odd pieces", split(two, 7), false},
		{"inside the length", [][]byte{two[:42]}, true},
		{"inside the second message", [][]byte{two[:50]}, true},
		{"inside the first message", [][]byte{two[:39]}, true},
		{"a length under a prelude and a CRC", [][]byte{awsMessage(16), {0, 0, 0, 15, 1}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f Frames
			for _, p := range tt.feed {
				f.Feed(p)
			}
			assert.Equal(t, tt.inside, f.Inside())
		})
	}
}

// split cuts b into pieces of n bytes (the last one shorter).
func split(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > n {
		out = append(out, b[:n])
		b = b[n:]
	}
	return append(out, b)
}

// Frames reads any bytes without panicking, and what it says of them does
// not depend on how they are cut into reads.
func FuzzFrames(f *testing.F) {
	f.Add(append(awsMessage(20), awsMessage(16)[:9]...), uint8(3))
	f.Add([]byte{0, 0, 0, 2}, uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, step uint8) {
		var whole, pieces Frames
		whole.Feed(b)
		for _, p := range split(b, int(step)+1) {
			pieces.Feed(p)
		}
		assert.Equal(t, whole, pieces)
	})
}
