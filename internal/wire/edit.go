package wire

import (
	"bytes"
	"unicode/utf8"
)

// This file writes what the splicer and the request editor change: a JSON
// string encoded exactly as encoding/json encodes it, a text with some of
// its byte ranges replaced (every other byte kept as it was), and an event
// framed as server-sent events.

// appendQuoted appends s as a JSON string, byte for byte as
// encoding/json's Marshal writes a string that is UTF-8: <, > and & as
// \u003c, \u003e, \u0026; the control characters as \b, \f, \n, \r, \t
// or \u00XX; U+2028 and U+2029 escaped. A byte that is not UTF-8 (the
// texts here are decoded JSON, always UTF-8) becomes U+FFFD, as
// encoding/json writes it from Go 1.26 on (Go 1.25 writes \ufffd: the
// same string).
func appendQuoted(dst, s []byte) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= ' ' && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRune(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\uFFFD"...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// edit replaces data[From:To] (From == To: inserts before From) with the
// bytes with[From:To] of an editor's scratch.
type edit struct {
	at   span
	with span
}

// editor collects the edits of one text, in the order of their places,
// and writes the text edited. The zero editor is empty; it is reused, its
// buffers kept.
type editor struct {
	edits   []edit
	scratch []byte
}

// reset drops the edits.
func (e *editor) reset() {
	e.edits = e.edits[:0]
	e.scratch = e.scratch[:0]
}

// replace replaces at with the JSON string of s.
func (e *editor) replaceString(at span, s []byte) {
	from := len(e.scratch)
	e.scratch = appendQuoted(e.scratch, s)
	e.edits = append(e.edits, edit{at, span{from, len(e.scratch)}})
}

// replaceBytes replaces at with b as it is.
func (e *editor) replaceBytes(at span, b ...[]byte) {
	from := len(e.scratch)
	for _, p := range b {
		e.scratch = append(e.scratch, p...)
	}
	e.edits = append(e.edits, edit{at, span{from, len(e.scratch)}})
}

// apply appends data with the edits made to dst. Edits are applied in the
// order of their places (equal places in the order made); an edit that
// overlaps an earlier one is dropped, so the result never repeats a byte
// of data.
func (e *editor) apply(dst, data []byte) []byte {
	e.sort()
	at := 0
	for _, ed := range e.edits {
		if ed.at.From < at {
			continue
		}
		dst = append(dst, data[at:ed.at.From]...)
		dst = append(dst, e.scratch[ed.with.From:ed.with.To]...)
		at = ed.at.To
	}
	return append(dst, data[at:]...)
}

// sort orders the edits by place, keeping the order of equal ones (an
// insertion sort: an event has a few).
func (e *editor) sort() {
	for i := 1; i < len(e.edits); i++ {
		for j := i; j > 0 && e.edits[j].at.From < e.edits[j-1].at.From; j-- {
			e.edits[j], e.edits[j-1] = e.edits[j-1], e.edits[j]
		}
	}
}

// appendEvent appends one server-sent event to dst: "event: typ" when typ
// is not empty, the data's lines each as "data: line", and the blank line
// that dispatches it.
func appendEvent(dst, typ, data []byte) []byte {
	if len(typ) > 0 {
		dst = append(append(append(dst, "event: "...), typ...), '\n')
	}
	for {
		line := data
		i := bytes.IndexByte(data, '\n')
		if i >= 0 {
			line, data = data[:i], data[i+1:]
		}
		dst = append(append(append(dst, "data: "...), line...), '\n')
		if i < 0 {
			break
		}
	}
	return append(dst, '\n')
}
