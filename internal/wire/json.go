package wire

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// This file is the package's one JSON lexer. Its readers (request.go,
// top.go, errorbody.go) are thin: each walks the tokens it needs and skips
// the rest. The lexer splits text handed to it in pieces of any size into
// tokens, keeping two bytes of state between pieces and copying nothing;
// it skips a string's body with one bytes.IndexAny, since prompts are long
// strings. It does not validate: a reader that must refuse malformed text
// as encoding/json does checks the grammar, strings (validString) and
// scalars (validScalar) itself.

// Kind is what a JSON token is; the zero Kind is None.
type Kind uint8

// The kinds of token.
const (
	// None: no token; the piece is used up.
	None Kind = iota
	// BeginObject is {.
	BeginObject
	// EndObject is }.
	EndObject
	// BeginArray is [.
	BeginArray
	// EndArray is ].
	EndArray
	// Colon is :.
	Colon
	// Comma is ,.
	Comma
	// String is a string, its quotes included.
	String
	// Scalar is a number, a literal (true, false, null), or any other run
	// of bytes up to whitespace or a structural byte ({}[],:").
	Scalar
)

// Token is one token of the text, or the piece of one that lies in the
// piece of text it was found in. It is a plain value, small enough to be
// returned in registers.
type Token struct {
	// Kind is the token's kind.
	Kind Kind
	// flags holds Cont, Open and Escaped.
	flags uint8
	// From and To bound the token's bytes in the piece: p[From:To].
	From, To int
}

// The flags of a Token.
const (
	tokCont uint8 = 1 << iota
	tokOpen
	tokEscaped
)

// Cont says the token began in an earlier piece: this is the rest of it
// (a continuation may be empty: a scalar whose end the earlier piece
// could not see ends at this piece's first byte).
func (t Token) Cont() bool { return t.flags&tokCont != 0 }

// Open says the token runs on past the piece's end: a string not yet
// closed, or a scalar the piece's end cut (at the end of the whole text,
// a cut token).
func (t Token) Open() bool { return t.flags&tokOpen != 0 }

// Escaped says the String's bytes in this piece hold a backslash.
func (t Token) Escaped() bool { return t.flags&tokEscaped != 0 }

// Lexer splits JSON text into tokens. The zero Lexer is at the start of a
// text; it is a value its one user owns (not safe for concurrent use),
// and keeps nothing of the text but where the last piece ended (inside a
// string, after a backslash in one, or inside a scalar) and the nesting
// depth.
type Lexer struct {
	in    lexIn
	depth int
}

// lexIn is where the last piece ended.
type lexIn uint8

const (
	inNone   lexIn = iota // between tokens
	inString              // inside a string
	inEscape              // inside a string, right after a backslash
	inScalar              // inside a scalar
)

// Depth returns how many objects and arrays are open after the last token
// returned (an unmatched closer counts nothing).
func (l *Lexer) Depth() int { return l.depth }

// Next returns the token, or the piece of one, that starts at or after
// p[i] (whitespace skipped), and the index just past it. Once p is used
// up it returns a token of kind None and len(p). A token cut by p's end
// is returned Open; its rest comes first from the next piece.
func (l *Lexer) Next(p []byte, i int) (Token, int) {
	switch l.in {
	case inString, inEscape:
		return l.string(p, i, i, true)
	case inScalar:
		return l.scalar(p, i, true)
	}
	for ; i < len(p); i++ {
		c := p[i]
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '{', '[':
			l.depth++
			return Token{Kind: structural(c), From: i, To: i + 1}, i + 1
		case '}', ']':
			if l.depth > 0 {
				l.depth--
			}
			return Token{Kind: structural(c), From: i, To: i + 1}, i + 1
		case ':', ',':
			return Token{Kind: structural(c), From: i, To: i + 1}, i + 1
		case '"':
			l.in = inString
			return l.string(p, i, i+1, false)
		}
		l.in = inScalar
		return l.scalar(p, i, false)
	}
	return Token{From: len(p), To: len(p)}, len(p)
}

// Skip reads p from p[i] on without returning its tokens, until a closer
// brings the depth down to depth (it returns just past that closer) or p
// ends (it returns len(p)). It is for a reader that needs none of what is
// nested deeper: strings are still followed across pieces, so the next
// piece goes on where this one stopped, but a scalar is not (a reader
// skips on while Depth() > depth, and no scalar matters to it there).
func (l *Lexer) Skip(p []byte, i, depth int) int {
	if l.in == inScalar {
		l.in = inNone
	}
	for i < len(p) {
		if l.in != inNone {
			_, i = l.string(p, i, i, true)
			continue
		}
		switch p[i] {
		case '"':
			// A short string inline; a long one (a prompt) by l.string's
			// fast scans.
			j := i + 1
			for ; j < len(p) && j < i+64; j++ {
				if c := p[j]; c == '"' || c == '\\' {
					break
				}
			}
			if j < len(p) && p[j] == '"' {
				i = j + 1
				continue
			}
			l.in = inString
			_, i = l.string(p, j, j, true)
			continue
		case '{', '[':
			l.depth++
		case '}', ']':
			if l.depth > 0 {
				l.depth--
			}
			if l.depth <= depth {
				return i + 1
			}
		}
		i++
	}
	return i
}

// structural returns the kind of the structural byte c.
func structural(c byte) Kind {
	switch c {
	case '{':
		return BeginObject
	case '}':
		return EndObject
	case '[':
		return BeginArray
	case ']':
		return EndArray
	case ':':
		return Colon
	}
	return Comma
}

// string reads a string from p[i] on (from is where its piece starts).
// It finds the closing quote with bytes.IndexByte and looks for a
// backslash only before it, so that a long string costs two fast scans
// and one with escapes no more than one pass.
func (l *Lexer) string(p []byte, from, i int, cont bool) (Token, int) {
	t := Token{Kind: String, From: from}
	if cont {
		t.flags = tokCont
	}
	if l.in == inEscape {
		if i == len(p) {
			t.To, t.flags = i, t.flags|tokOpen
			return t, i
		}
		t.flags |= tokEscaped
		i++ // the escaped byte
		l.in = inString
	}
	// Keys and most values end within a few bytes: look there first.
	for j, c := range p[i:min(len(p), i+64)] {
		if c == '"' {
			l.in = inNone
			t.To = i + j + 1
			return t, i + j + 1
		}
		if c == '\\' {
			break
		}
	}
	q := -1 // the next quote at or after i, once found
	for {
		if q < i {
			if q = bytes.IndexByte(p[i:], '"'); q < 0 {
				q = len(p)
			} else {
				q += i
			}
		}
		b := bytes.IndexByte(p[i:q], '\\')
		if b < 0 {
			if q == len(p) {
				t.To, t.flags = len(p), t.flags|tokOpen
				return t, len(p)
			}
			l.in = inNone
			t.To = q + 1
			return t, q + 1
		}
		t.flags |= tokEscaped
		if i += b; i+1 == len(p) {
			l.in = inEscape
			t.To, t.flags = len(p), t.flags|tokOpen
			return t, len(p)
		}
		i += 2
	}
}

// scalar reads a scalar from p[i] on.
func (l *Lexer) scalar(p []byte, i int, cont bool) (Token, int) {
	t := Token{Kind: Scalar, From: i}
	if cont {
		t.flags = tokCont
	}
	for ; i < len(p); i++ {
		if endsScalar(p[i]) {
			l.in = inNone
			t.To = i
			return t, i
		}
	}
	t.To, t.flags = len(p), t.flags|tokOpen
	return t, len(p)
}

// endsScalar reports whether c ends a scalar: whitespace or a structural
// byte.
func endsScalar(c byte) bool {
	switch c {
	case ' ', '\t', '\r', '\n', '{', '}', '[', ']', ',', ':', '"':
		return true
	}
	return false
}

// isSpace reports whether c is JSON whitespace.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\r' || c == '\n'
}

// validScalar reports whether s is a JSON number or literal, as
// encoding/json's scanner reads them.
func validScalar(s []byte) bool {
	switch string(s) {
	case "true", "false", "null":
		return true
	}
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i = digits(s, i)
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		if j := digits(s, i+1); j > i+1 {
			i = j
		} else {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := digits(s, i)
		if j == i {
			return false
		}
		i = j
	}
	return i == len(s)
}

// digits returns the index of the first byte of s at or after i that is
// not a decimal digit.
func digits(s []byte, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// unquote appends to dst the text of the JSON string whose bytes between
// the quotes are raw, decoded as encoding/json decodes it (escapes, UTF-16
// surrogate pairs, a lone surrogate or a byte that is not UTF-8 as
// U+FFFD). It reports false for text encoding/json refuses: a control
// character, a quote, or a bad escape.
func unquote(dst, raw []byte) ([]byte, bool) {
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			if i+1 == len(raw) {
				return dst, false
			}
			switch e := raw[i+1]; e {
			case '"', '\\', '/':
				dst = append(dst, e)
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hex4(raw[i+2:])
				if r < 0 {
					return dst, false
				}
				i += 6
				if utf16.IsSurrogate(r) {
					if len(raw)-i >= 6 && raw[i] == '\\' && raw[i+1] == 'u' {
						if pair := utf16.DecodeRune(r, hex4(raw[i+2:])); pair != utf8.RuneError {
							dst = utf8.AppendRune(dst, pair)
							i += 6
							continue
						}
					}
					r = utf8.RuneError
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default:
				return dst, false
			}
			i += 2
		case c == '"' || c < ' ':
			return dst, false
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, n := utf8.DecodeRune(raw[i:])
			dst = utf8.AppendRune(dst, r)
			i += n
		}
	}
	return dst, true
}

// hex4 returns the rune of the four hex digits b starts with, or -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// validString reports whether encoding/json accepts raw as the bytes of a
// string between its quotes: no control character, no bare quote, and
// only its escapes.
func validString(raw []byte) bool {
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c < ' ' || c == '"':
			return false
		case c == '\\':
			if i+1 == len(raw) {
				return false
			}
			switch raw[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if hex4(raw[i+2:]) < 0 {
					return false
				}
				i += 5
			default:
				return false
			}
		}
	}
	return true
}
