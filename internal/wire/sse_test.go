package wire

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sseEvent is an event as the tests write it.
type sseEvent struct{ typ, data string }

// frameWhole returns the events of stream read as one window.
func frameWhole(stream []byte) []sseEvent {
	var f Framer
	var out []sseEvent
	for {
		ev, ok := f.Next(stream)
		if !ok {
			return out
		}
		out = append(out, sseEvent{string(ev.Type), string(ev.Data)})
	}
}

// frameWindowed returns the events of stream handed to the Framer size
// bytes at a time through a window that drops what the Framer no longer
// needs, and the largest the window grew.
func frameWindowed(stream []byte, size int) ([]sseEvent, int) {
	var f Framer
	var out []sseEvent
	var window []byte
	most := 0
	for off := 0; off < len(stream); off += size {
		window = append(window, stream[off:min(len(stream), off+size)]...)
		most = max(most, len(window))
		for {
			ev, ok := f.Next(window)
			if !ok {
				break
			}
			out = append(out, sseEvent{string(ev.Type), string(ev.Data)})
		}
		keep := f.Keep()
		window = append(window[:0], window[keep:]...)
		f.Shift(keep)
	}
	return out, most
}

// The framing rules of the standard, read whole and through a window fed
// one byte at a time.
func TestFramer(t *testing.T) {
	for _, c := range []struct {
		name   string
		stream string
		want   []sseEvent
	}{
		{"one event", "event: a\ndata: x\n\n", []sseEvent{{"a", "x"}}},
		{"untyped", "data: x\n\n", []sseEvent{{"", "x"}}},
		{"crlf and cr", "data: x\r\n\r\ndata: y\r\rdata: z\n\r", []sseEvent{{"", "x"}, {"", "y"}, {"", "z"}}},
		{"comments and unknown fields", ": keep-alive\nid: 7\nretry: 5\nfoo: bar\nfoo\ndata: x\n\n", []sseEvent{{"", "x"}}},
		{"one space dropped", "data:x\n\ndata:  x\n\n", []sseEvent{{"", "x"}, {"", " x"}}},
		{"lines joined", "data: a\ndata\ndata: c\n\n", []sseEvent{{"", "a\n\nc"}}},
		{"no data: no event, type reset", "event: a\n\ndata: x\n\n", []sseEvent{{"", "x"}}},
		{"last type wins", "event: a\nevent: b\ndata: x\n\n", []sseEvent{{"b", "x"}}},
		{"bom at the start only", "\xef\xbb\xbfdata: x\n\n\xef\xbb\xbfdata: y\n\n", []sseEvent{{"", "x"}}},
		{"cut by the end", "data: x\n\ndata: y\n", []sseEvent{{"", "x"}}},
		{"empty data is an event", "data\n\n", []sseEvent{{"", ""}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, frameWhole([]byte(c.stream)), "whole")
			got, _ := frameWindowed([]byte(c.stream), 1)
			assert.Equal(t, c.want, got, "one byte at a time")
		})
	}
}

// Pending reads the event a window is cut in: its data lines and its
// unterminated last line, if that is data.
func TestFramerPending(t *testing.T) {
	for _, c := range []struct {
		window, want string
		ok           bool
	}{
		{"data: {\"a\":1", `{"a":1`, true},
		{"event: error\ndata: {\"a\":\ndata: 1}", "{\"a\":\n1}", true},
		{"data: x\n", "x", true},
		{"event: err", "", false},
		{"\xef\xbb\xbfdata: x", "x", true},
		{"\xef\xbb\xbf", "", false},
		{"data: x\r", "x", true},
		{"", "", false},
	} {
		var f Framer
		_, ok := f.Next([]byte(c.window))
		assert.False(t, ok, c.window)
		ev, ok := f.Pending([]byte(c.window))
		assert.Equal(t, c.ok, ok, c.window)
		assert.Equal(t, c.want, string(ev.Data), c.window)
	}
}

// An event of one data line is a view into the window: framing it costs
// nothing.
func TestFramerAllocatesNothing(t *testing.T) {
	stream := []byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\"}\n\n: ping\n\n")
	allocs := testing.AllocsPerRun(100, func() {
		var f Framer
		if _, ok := f.Next(stream); !ok {
			t.Fatal("no event")
		}
	})
	assert.Zero(t, allocs)
}

// Through a window that drops what the Framer no longer needs, a long
// stream of small events keeps a window the size of one event and a read.
func TestFramerWindowIsBounded(t *testing.T) {
	event := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"hi\"}}\n\n"
	stream := []byte(strings.Repeat(event, 10000))
	got, most := frameWindowed(stream, 512)
	assert.Len(t, got, 10000)
	assert.LessOrEqual(t, most, len(event)+512)
}

// FuzzFramer checks that a stream gives the same events read whole and
// through a window fed in pieces of any size that drops what the Framer no
// longer needs (Keep, Shift).
func FuzzFramer(f *testing.F) {
	f.Add([]byte("event: a\ndata: x\n\ndata: y\r\n\r\n"), uint16(1))
	f.Add([]byte("\xef\xbb\xbfdata: a\ndata: b\r\rdata\n\n: c\n"), uint16(3))
	f.Add([]byte("data: x\r"), uint16(7))
	f.Fuzz(func(t *testing.T, stream []byte, size16 uint16) {
		size := max(1, int(size16))
		whole := frameWhole(stream)
		windowed, most := frameWindowed(stream, size)
		if len(whole) != len(windowed) {
			t.Fatalf("whole %q, windowed %q", whole, windowed)
		}
		for i := range whole {
			if whole[i] != windowed[i] {
				t.Fatalf("event %d: whole %q, windowed %q", i, whole[i], windowed[i])
			}
		}
		if most > len(stream) {
			t.Fatalf("window %d bytes for a stream of %d", most, len(stream))
		}
	})
}

// Start is where the next event begins: after whole events, at the first
// line of one half read.
func TestFramerStart(t *testing.T) {
	stream := "data: a\n\n: keep-alive\n\nevent: x\ndata: b\ndata: c\n\ndata: d\n\n"
	var f Framer
	assert.Equal(t, 0, f.Start())
	for _, c := range []struct {
		window int // how much of the stream arrived
		events int // events dispatched by then
		start  int
	}{
		{3, 0, 0},                                // "dat": no line yet
		{8, 0, 0},                                // "data: a\n": its first line
		{9, 1, 9},                                // the blank line: dispatched
		{len("data: a\n\n: keep-alive\n"), 1, 9}, // a comment starts what may be an event
		{len("data: a\n\n: keep-alive\n\n"), 1, 23}, // a comment alone is no event
		{len("data: a\n\n: keep-alive\n\nevent: x\ndata: b\n"), 1, 23},
		{len("data: a\n\n: keep-alive\n\nevent: x\ndata: b\ndata: c\n\n"), 2, len("data: a\n\n: keep-alive\n\nevent: x\ndata: b\ndata: c\n\n")},
		{len(stream), 3, len(stream)},
	} {
		f = Framer{}
		n := 0
		for {
			if _, ok := f.Next([]byte(stream[:c.window])); !ok {
				break
			}
			n++
		}
		assert.Equal(t, c.events, n, "window %d", c.window)
		assert.Equal(t, c.start, f.Start(), "window %d", c.window)
		assert.LessOrEqual(t, f.Start(), f.Keep())
	}

	// Through a window that drops what the Framer no longer needs.
	f = Framer{}
	window := []byte("data: a\n\nevent: x\nda")
	_, ok := f.Next(window)
	require.True(t, ok)
	_, ok = f.Next(window)
	require.False(t, ok)
	assert.Equal(t, 9, f.Start())
	f.Shift(9)
	window = append(window[9:], "ta: b\n\n"...)
	assert.Equal(t, 0, f.Start())
	ev, ok := f.Next(window)
	require.True(t, ok)
	assert.Equal(t, "x", string(ev.Type))
	assert.Equal(t, len(window), f.Start())
}
