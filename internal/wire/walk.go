package wire

import "strings"

// This file is the checked walk of one whole JSON value, built on the
// package's Lexer: it checks the value as encoding/json's Valid does
// (grammar, strings, numbers and literals, nesting up to 10000) and hands
// its reader each value with the path it sits at, so that the stream
// follower (stream.go), the splicer (splice.go) and the request editor
// (prefill.go) find what they read without decoding the value and without
// allocating. Paths are written as in the shapes table (apis.go): keys
// joined by dots, "[]" after a key whose value is an array whose elements
// are meant ("choices[].delta.content").

// maxNesting is the deepest nesting encoding/json accepts.
const maxNesting = 10000

// maxPath is how many levels of keys and element positions a walk keeps:
// the paths its readers ask about are shallower.
const maxPath = 8

// wantEnd is the walk's state once the value is whole: only whitespace may
// follow.
const wantEnd = wantCommaOrClose + 1

// span is a range data[From:To] of the text a walk read; the zero span is
// unset (no value read has its bytes at 0:0).
type span struct{ From, To int }

// set reports whether the span was found.
func (p span) set() bool { return p.To > 0 }

// level is one open object or array of a walk.
type level struct {
	array bool
	elem  int  // arrays: the position of the element being read
	key   span // objects: the member being read's key, as written between its quotes
	open  int  // where the object or array starts (its { or [)
}

// walker walks one JSON value: reset it with the text, then call next
// until it reports false; bad then says whether the text was not one
// valid JSON value. It is a value its one user owns and reuses; it keeps
// the text until the next reset.
type walker struct {
	lex    Lexer
	data   []byte
	i      int
	want   walkState
	depth  int                       // objects and arrays open
	vdepth int                       // the depth of the value next returned
	arrays [maxNesting/64 + 1]uint64 // bit d: the level at depth d is an array
	path   [maxPath]level            // the first maxPath levels
	top    Kind                      // the kind of the top-level value's first token
	bad    bool
}

// reset starts a walk of data.
func (w *walker) reset(data []byte) {
	w.lex = Lexer{}
	w.data, w.i, w.want, w.depth, w.vdepth, w.top, w.bad = data, 0, wantValue, 0, 0, None, false
}

// isObject reports whether the walk, ended, read one JSON object.
func (w *walker) isObject() bool { return !w.bad && w.top == BeginObject }

// next returns the next token of interest: a value's first token (String,
// Scalar, BeginObject, BeginArray) or a closer (EndObject, EndArray). The
// token's path is what at, key and elem read until the next call: for a
// closer, the path of the object or array it closes. next reports false
// at the end of the text, or at the first byte that makes it not a JSON
// value (bad).
func (w *walker) next() (Token, bool) {
	for !w.bad {
		t, i := w.lex.Next(w.data, w.i)
		w.i = i
		if t.Open() {
			if t.Kind != Scalar || i != len(w.data) {
				w.bad = true // a string the text cuts
				break
			}
			w.lex.in = inNone // a scalar at the text's end is whole
		}
		switch t.Kind {
		case None:
			w.bad = w.want != wantEnd
			return t, false
		case BeginObject, BeginArray:
			if w.want != wantValue && w.want != wantValueOrClose || w.depth == maxNesting {
				w.bad = true
				break
			}
			w.vdepth = w.depth
			if w.depth == 0 {
				w.top = t.Kind
			}
			w.push(t)
			return t, true
		case EndObject, EndArray:
			array := t.Kind == EndArray
			if w.depth == 0 || w.isArray(w.depth-1) != array ||
				w.want != wantCommaOrClose && (array && w.want != wantValueOrClose || !array && w.want != wantKeyOrClose) {
				w.bad = true
				break
			}
			w.depth--
			w.vdepth = w.depth
			w.ended()
			return t, true
		case Colon:
			if w.want != wantColon {
				w.bad = true
				break
			}
			w.want = wantValue
		case Comma:
			if w.want != wantCommaOrClose {
				w.bad = true
				break
			}
			if w.isArray(w.depth - 1) {
				w.want = wantValue
				if d := w.depth - 1; d < maxPath {
					w.path[d].elem++
				}
			} else {
				w.want = wantKey
			}
		case String:
			raw := w.data[t.From+1 : t.To-1]
			if !validString(raw) {
				w.bad = true
				break
			}
			if w.want == wantKeyOrClose || w.want == wantKey {
				if d := w.depth - 1; d < maxPath {
					w.path[d].key = span{t.From + 1, t.To - 1}
				}
				w.want = wantColon
				continue
			}
			if w.want != wantValue && w.want != wantValueOrClose {
				w.bad = true
				break
			}
			return w.scalar(t), true
		case Scalar:
			if w.want != wantValue && w.want != wantValueOrClose || !validScalar(w.data[t.From:t.To]) {
				w.bad = true
				break
			}
			return w.scalar(t), true
		}
	}
	return Token{}, false
}

// scalar records t, a string or scalar value the walk accepted at its
// depth, and returns it.
func (w *walker) scalar(t Token) Token {
	w.vdepth = w.depth
	if w.depth == 0 {
		w.top = t.Kind
	}
	w.ended()
	return t
}

// push opens the object or array t begins.
func (w *walker) push(t Token) {
	d := w.depth
	array := t.Kind == BeginArray
	if array {
		w.arrays[d/64] |= 1 << (d % 64)
		w.want = wantValueOrClose
	} else {
		w.arrays[d/64] &^= 1 << (d % 64)
		w.want = wantKeyOrClose
	}
	if d < maxPath {
		w.path[d] = level{array: array, open: t.From}
	}
	w.depth++
}

// ended notes that a value ended.
func (w *walker) ended() {
	if w.depth == 0 {
		w.want = wantEnd
	} else {
		w.want = wantCommaOrClose
	}
}

// isArray reports whether the level at depth d is an array.
func (w *walker) isArray(d int) bool { return w.arrays[d/64]&(1<<(d%64)) != 0 }

// path is a compiled path (see the file comment): the key or array of
// each level from the top.
type path struct {
	n     int
	array [maxPath]bool
	key   [maxPath]string
}

// compile compiles p; it panics on a path deeper than maxPath (the paths
// are the package's own, compiled at init).
func compile(p string) path {
	var c path
	for p != "" {
		seg, rest, _ := strings.Cut(p, ".")
		array := strings.HasSuffix(seg, "[]")
		c.key[c.n] = strings.TrimSuffix(seg, "[]")
		c.n++
		if array {
			c.array[c.n] = true
			c.n++
		}
		p = rest
	}
	return c
}

// at reports whether the token last returned sits at p.
func (w *walker) at(p *path) bool {
	return p.n == w.vdepth && w.match(p)
}

// in reports whether the token last returned sits at p or deeper in the
// value there.
func (w *walker) in(p *path) bool {
	return p.n <= w.vdepth && w.match(p)
}

// match reports whether the first p.n levels of the path of the token
// last returned are p's, comparing the deepest first.
func (w *walker) match(p *path) bool {
	if p.n > maxPath {
		return false
	}
	for d := p.n - 1; d >= 0; d-- {
		l := &w.path[d]
		if l.array != p.array[d] || !l.array && string(w.data[l.key.From:l.key.To]) != p.key[d] {
			return false
		}
	}
	return true
}

// elem returns the position of the element at depth d (an array's level)
// of the token last returned, or -1.
func (w *walker) elem(d int) int {
	if d >= w.vdepth || d >= maxPath || !w.path[d].array {
		return -1
	}
	return w.path[d].elem
}

// text returns the bytes of p in the walked text.
func (w *walker) text(p span) []byte { return w.data[p.From:p.To] }

// raw returns the span of a String token's bytes between its quotes.
func raw(t Token) span { return span{t.From + 1, t.To - 1} }

// validJSON reports whether data is one JSON value, as encoding/json's
// Valid does, with w's walk.
func (w *walker) validJSON(data []byte) bool {
	w.reset(data)
	for {
		if _, ok := w.next(); !ok {
			return !w.bad
		}
	}
}

// parseIndex returns the non-negative integer a Scalar's bytes b spell, or
// -1 for anything else (a fraction, an exponent, a sign, a literal, or
// more than 9 digits).
func parseIndex(b []byte) int {
	if len(b) == 0 || len(b) > 9 {
		return -1
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// parseSeq returns the integer a Scalar's bytes b spell (Responses'
// sequence numbers), and false for anything else or more than 18 digits.
func parseSeq(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}
