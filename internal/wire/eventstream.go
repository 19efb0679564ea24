package wire

// Frames follows the framing of AWS's binary event stream
// (MediaEventStream) far enough to tell whether the bytes fed so far end
// inside a message: each message opens with a prelude whose first four
// bytes are its total length, big-endian, prelude and trailing CRC
// included (at least 16). It reads no header and checks no CRC: those are
// the SDK's. The zero Frames is at the start of a stream; it is not safe
// for concurrent use.
type Frames struct {
	left   uint32 // bytes of the current message still to come, after its length
	size   uint32 // the length read so far
	n      uint8  // how many of the length's four bytes were read
	broken bool   // a length under 16: the stream is not framed as AWS frames it
}

// StuckBedrock is why a Bedrock event stream is never continued
// (Stream.Stuck says it too).
const StuckBedrock = "Bedrock's event stream"

// minFrame is the shortest message: a 12-byte prelude and a 4-byte CRC.
const minFrame = 16

// Feed follows p, the stream's next bytes.
func (f *Frames) Feed(p []byte) {
	for len(p) > 0 && !f.broken {
		if f.left > 0 {
			k := uint32(min(uint64(len(p)), uint64(f.left)))
			f.left -= k
			p = p[k:]
			continue
		}
		f.size = f.size<<8 | uint32(p[0])
		f.n++
		p = p[1:]
		if f.n == 4 {
			if f.size < minFrame {
				f.broken = true
				return
			}
			f.left, f.size, f.n = f.size-4, 0, 0
		}
	}
}

// Inside reports whether the bytes fed end inside a message: a stream
// that ends there was cut. A stream whose framing is broken is never
// inside one (what it is, is the SDK's to say).
func (f *Frames) Inside() bool { return !f.broken && (f.left > 0 || f.n > 0) }
