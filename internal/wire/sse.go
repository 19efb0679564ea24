package wire

import "bytes"

// This file is the package's one server-sent-events framer, as the WHATWG
// HTML standard defines the format (section 9.2, "Server-sent events"):
// lines end in \n, \r\n or \r (a \r\n split across reads still ends one
// line); a line starting with ":" is a comment; a field line is
// "name: value", one leading space dropped from the value, or a name
// alone; several data lines join with \n; an event is dispatched at a
// blank line, and only if it had a data line; a leading UTF-8 byte-order
// mark is skipped; an event cut by the end of the stream is discarded
// (Pending reads it when the cut is the reader's, not the stream's).

// Event is one dispatched event: views into the window the Framer read it
// from, or into the Framer's own buffer for data of several lines, valid
// until the next call on the Framer or a change to the window's bytes; the
// Framer owns none of the window, its caller none of that buffer.
type Event struct {
	// Type is the value of the event's last "event" field; empty when it
	// had none (the standard's "message").
	Type []byte
	// Data is the event's data lines joined with \n.
	Data []byte
}

// Framer splits a stream of server-sent events into events. It reads a
// window, a byte slice that holds the stream from some offset on and to
// which its owner appends what it reads; the Framer keeps only offsets
// into the window (where the next line starts, how far its end was looked
// for, the event being built's type and first data line) and, for data of
// several lines, a copy of them. An event with one data line costs no
// allocation. Its time is linear in the stream: no byte is searched twice
// for a line end, however many calls a long line takes to arrive (a \r
// is looked for only before the next \n, and a line cut by the window's
// end is searched on from where the last call stopped).
//
// The zero Framer is at the start of a stream. A window may grow at its
// end between calls; its owner may drop bytes from its front (Shift), but
// none from Keep on. A Framer is owned by one reader and is not safe for
// concurrent use.
type Framer struct {
	pos int // where the first line not yet read starts
	// The line ends already looked for: the next \n at or after pos is at
	// lf if hasLF (then lf >= pos), else window[pos:lf] holds none; and
	// window[pos:crTo] holds no \r.
	lf, crTo int
	// The event being built has a type at typeFrom:typeTo if named.
	typeFrom, typeTo int
	// lines counts the event's data lines; dataFrom and dataTo bound the
	// first one's value.
	lines            int
	dataFrom, dataTo int
	// joined holds the data lines joined with \n once there are two or
	// more; it is allocated only then, and reused.
	joined []byte
	from   int // where the next event's first line starts, if building

	// (The flags together, so that the Framer, inside every followed
	// stream's body, stays small.)
	cr       bool // the last line ended with \r: a \n right after it ends that line too
	begun    bool // a line has been read: a byte-order mark counts only before the first
	hasLF    bool // see lf
	named    bool // see typeFrom
	building bool // a line of the next event has been read, the first starting at from
}

// utf8BOM is the byte-order mark a stream may start with.
const utf8BOM = "\xef\xbb\xbf"

// Next reads the complete lines of window from where the last call
// stopped, and returns the first event they dispatch. It reports false
// when the lines read end before an event does: the lines are consumed,
// and the event being built is kept for the next call.
func (f *Framer) Next(window []byte) (Event, bool) {
	for {
		from, to, ok := f.line(window)
		if !ok {
			return Event{}, false
		}
		if from == to {
			f.building = false
			if ev, ok := f.dispatch(window); ok {
				return ev, true
			}
			continue
		}
		if !f.building {
			f.building, f.from = true, from
		}
		f.field(window, from, to)
	}
}

// Pending returns the event being built as if the stream were cut after
// window, once Next has reported false for it: its data lines so far and
// the window's unterminated last line, if that is a data line. It reports
// false when that makes no data. It changes nothing of the Framer but the
// buffer data of several lines is joined in: it is the last look at a
// window cut short (a peek of a bounded size), not for a stream that goes
// on.
func (f *Framer) Pending(window []byte) (Event, bool) {
	g := *f
	if from, to := g.pos, len(window); from < to && !bytes.ContainsAny(window[from:], "\r\n") {
		if from = g.skipBOM(window, from, to); from < to {
			g.field(window, from, to)
		}
	}
	ev, ok := g.dispatch(window)
	f.joined = g.joined
	return ev, ok
}

// Start returns the offset in the window where the next event begins: the
// first line of the event being built (a line of it was read: fields or
// comments), or the next line not yet read. The bytes before it are whole
// events, comments and blank lines; it is at most Keep().
func (f *Framer) Start() int {
	if f.building {
		return min(f.from, f.Keep())
	}
	return f.Keep()
}

// Keep returns the offset of the first byte of the window the Framer
// still needs: bytes before it may be dropped (see Shift).
func (f *Framer) Keep() int {
	keep := f.pos
	if f.named {
		keep = min(keep, f.typeFrom)
	}
	if f.lines == 1 {
		keep = min(keep, f.dataFrom)
	}
	return keep
}

// Shift tells the Framer that its window lost its first n bytes, n at
// most Keep(): its offsets move down by n.
func (f *Framer) Shift(n int) {
	f.pos -= n
	f.lf, f.crTo = max(0, f.lf-n), max(0, f.crTo-n) // bounds of a search: below pos they mean nothing
	if f.building {
		f.from = max(0, f.from-n)
	}
	if f.named {
		f.typeFrom, f.typeTo = f.typeFrom-n, f.typeTo-n
	}
	if f.lines == 1 {
		f.dataFrom, f.dataTo = f.dataFrom-n, f.dataTo-n
	}
}

// line returns the bounds of the next complete line of window, without
// its line end (and without a leading byte-order mark on the stream's
// first line), and moves past it; false if no complete line is left. It
// searches each byte once for a \n and at most once for a \r: only
// before the next \n, and in neither case again on the next call.
func (f *Framer) line(window []byte) (from, to int, ok bool) {
	if f.cr {
		if f.pos == len(window) {
			return 0, 0, false
		}
		f.cr = false
		if window[f.pos] == '\n' {
			f.pos++
			f.hasLF = false // it was the next \n, if one was found
		}
	}
	from = f.pos
	if !f.hasLF {
		at := max(f.lf, from)
		if i := bytes.IndexByte(window[at:], '\n'); i >= 0 {
			f.lf, f.hasLF = at+i, true
		} else {
			f.lf = len(window)
		}
	}
	// A \r before the next \n ends the line first.
	at := max(f.crTo, from)
	if j := bytes.IndexByte(window[at:f.lf], '\r'); j >= 0 {
		to = at + j
		f.pos, f.cr = to+1, true
		return f.skipBOM(window, from, to), to, true
	}
	if !f.hasLF {
		f.crTo = len(window)
		return 0, 0, false
	}
	to = f.lf
	f.pos, f.hasLF = to+1, false
	return f.skipBOM(window, from, to), to, true
}

// skipBOM returns from moved past a byte-order mark that starts the
// stream's first line window[from:to], and notes that a line was read.
func (f *Framer) skipBOM(window []byte, from, to int) int {
	if !f.begun {
		f.begun = true
		if hasPrefix(window[from:to], utf8BOM) {
			from += len(utf8BOM)
		}
	}
	return from
}

// field reads the non-blank line window[from:to] into the event being
// built: a comment, or a field (only "event" and "data" matter here;
// "id", "retry" and unknown fields are ignored).
func (f *Framer) field(window []byte, from, to int) {
	line := window[from:to]
	if line[0] == ':' {
		return // a comment: ": keep-alive", ": OPENROUTER PROCESSING"
	}
	name, valueFrom := line, to
	if c := bytes.IndexByte(line, ':'); c >= 0 {
		name, valueFrom = line[:c], from+c+1
		if valueFrom < to && window[valueFrom] == ' ' {
			valueFrom++
		}
	}
	switch string(name) {
	case "event":
		f.named, f.typeFrom, f.typeTo = true, valueFrom, to
	case "data":
		switch f.lines {
		case 0:
			f.dataFrom, f.dataTo = valueFrom, to
		case 1:
			f.joined = append(append(append(f.joined[:0], window[f.dataFrom:f.dataTo]...), '\n'), window[valueFrom:to]...)
		default:
			f.joined = append(append(f.joined, '\n'), window[valueFrom:to]...)
		}
		f.lines++
	}
}

// dispatch ends the event being built and clears it; it reports false
// for an event without data, which is no event.
func (f *Framer) dispatch(window []byte) (Event, bool) {
	var ev Event
	if f.named {
		ev.Type = window[f.typeFrom:f.typeTo]
	}
	lines := f.lines
	f.named, f.lines = false, 0
	switch lines {
	case 0:
		return Event{}, false
	case 1:
		ev.Data = window[f.dataFrom:f.dataTo]
	default:
		ev.Data = f.joined
	}
	return ev, true
}
