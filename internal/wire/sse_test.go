package wire

import (
	"encoding/base64"
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
// in pieces of a few sizes (one byte at a time, but a stream of more than
// 4 KiB 512 bytes at a time: the window is copied down at each piece).
func TestFramer(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
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
		{"empty values", "event:\ndata:\n\n", []sseEvent{{"", ""}}},
		{"cr cr lf is two line ends", "data: a\r\r\ndata: b\n\n", []sseEvent{{"", "a"}, {"", "b"}}},
		{"two byte-order marks: one dropped", "\xef\xbb\xbf\xef\xbb\xbfdata: x\n\n", nil},
		{"field names are case-sensitive", "Data: x\n\nEVENT: y\ndata: z\n\n", []sseEvent{{"", "z"}}},
		{"a space before the colon is in the name", "data : x\n\n", nil},
		{"a tab is kept", "data:\tx\n\n", []sseEvent{{"", "\tx"}}},
		{"a colon in the value", "data: a: b\n\n", []sseEvent{{"", "a: b"}}},
		{"event after data", "data: x\nevent: t\n\n", []sseEvent{{"t", "x"}}},
		{"nul kept", "data: a\x00b\n\n", []sseEvent{{"", "a\x00b"}}},
		{"a line of 1 MiB", "data: " + long + "\r\n\r\ndata: " + long + "\r\r", []sseEvent{{"", long}, {"", long}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, frameWhole([]byte(c.stream)), "whole")
			for _, size := range []int{1, 2, 3, 7, 512} {
				if len(c.stream) > 4096 && size < 512 {
					continue
				}
				got, _ := frameWindowed([]byte(c.stream), size)
				assert.Equal(t, c.want, got, "%d bytes at a time", size)
			}
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

// BenchmarkFramer frames the two streams that cost a framer most: one data
// line of 4 MiB read 4 KiB at a time, as a Gemini chunk carrying a base64
// image comes (its line unfinished for a thousand reads), and ten thousand
// small events in one window, as a long answer read in one go.
func BenchmarkFramer(b *testing.B) {
	image := make([]byte, 3<<20)
	for i := range image {
		image[i] = byte(i)
	}
	big := []byte(`data: {"candidates":[{"content":{"parts":[{"inlineData":{"mimeType":"image/png","data":"` +
		base64.StdEncoding.EncodeToString(image) + `"}}],"role":"model"},"index":0}],"modelVersion":"gemini-2.5-flash-image"}` + "\r\n\r\n")
	small := []byte(strings.Repeat("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n", 10000))

	b.Run("4 MiB line in 4 KiB reads", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(big)))
		window := make([]byte, 0, len(big))
		for b.Loop() {
			var f Framer
			window = window[:0]
			n := 0
			for off := 0; off < len(big); off += 4096 {
				window = append(window, big[off:min(len(big), off+4096)]...)
				for {
					if _, ok := f.Next(window); !ok {
						break
					}
					n++
				}
				keep := f.Keep()
				window = window[:copy(window, window[keep:])]
				f.Shift(keep)
			}
			if n != 1 {
				b.Fatalf("%d events", n)
			}
		}
	})
	b.Run("10000 events in one window", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(small)))
		for b.Loop() {
			var f Framer
			n := 0
			for {
				if _, ok := f.Next(small); !ok {
					break
				}
				n++
			}
			if n != 10000 {
				b.Fatalf("%d events", n)
			}
		}
	})
}
