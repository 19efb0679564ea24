package wire

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lexed is a token as the tests write it: its kind and its text.
type lexed struct {
	kind Kind
	text string
}

// lexAll lexes text in pieces of size bytes and joins each token's pieces.
func lexAll(t *testing.T, text string, size int) []lexed {
	t.Helper()
	var l Lexer
	var out []lexed
	open := false
	for off := 0; off < len(text); off += size {
		p := []byte(text[off:min(len(text), off+size)])
		for i := 0; i < len(p); {
			var tok Token
			tok, i = l.Next(p, i)
			if tok.Kind == None {
				break
			}
			require.Equal(t, open, tok.Cont(), "a continuation follows an open token, and only one")
			if tok.Cont() {
				out[len(out)-1].text += string(p[tok.From:tok.To])
			} else {
				out = append(out, lexed{tok.Kind, string(p[tok.From:tok.To])})
			}
			open = tok.Open()
		}
	}
	return out
}

// The lexer splits text into the same tokens however it is cut into
// pieces; whitespace separates tokens and is no token.
func TestLexer(t *testing.T) {
	text := " {\"a\\\"b\" : [1, -2.5e3,true , null],\"c\":{}}\n\"x\"tru\xef \t"
	want := []lexed{
		{BeginObject, "{"}, {String, `"a\"b"`}, {Colon, ":"}, {BeginArray, "["},
		{Scalar, "1"}, {Comma, ","}, {Scalar, "-2.5e3"}, {Comma, ","}, {Scalar, "true"}, {Comma, ","},
		{Scalar, "null"}, {EndArray, "]"}, {Comma, ","}, {String, `"c"`}, {Colon, ":"},
		{BeginObject, "{"}, {EndObject, "}"}, {EndObject, "}"}, {String, `"x"`}, {Scalar, "tru\xef"},
	}
	for _, size := range []int{1, 2, 3, 5, 7, len(text)} {
		assert.Equal(t, want, lexAll(t, text, size), "pieces of %d bytes", size)
	}
}

// Depth counts open objects and arrays; an unmatched closer counts
// nothing.
func TestLexerDepth(t *testing.T) {
	var l Lexer
	p := []byte(`]{[}]]`)
	var depths []int
	for i := 0; i < len(p); {
		_, i = l.Next(p, i)
		depths = append(depths, l.Depth())
	}
	assert.Equal(t, []int{0, 1, 2, 1, 0, 0}, depths)
}

// A string's backslash at a piece's end escapes the next piece's first
// byte; Escaped marks the pieces that hold one.
func TestLexerEscapeAcrossPieces(t *testing.T) {
	var l Lexer
	tok, _ := l.Next([]byte(`"ab\`), 0)
	assert.Equal(t, []any{String, 0, 4, false, true, true}, []any{tok.Kind, tok.From, tok.To, tok.Cont(), tok.Open(), tok.Escaped()})
	tok, i := l.Next([]byte(`"c"`), 0)
	assert.Equal(t, []any{String, 0, 3, true, false, true}, []any{tok.Kind, tok.From, tok.To, tok.Cont(), tok.Open(), tok.Escaped()}, "the quote after the backslash is escaped")
	assert.Equal(t, 3, i)
}

func TestValidScalar(t *testing.T) {
	for _, s := range []string{"0", "-0", "12", "1.5", "-0.25e+3", "1E9", "true", "false", "null"} {
		assert.True(t, validScalar([]byte(s)), s)
	}
	for _, s := range []string{"", "-", "00", "01", "1.", ".5", "1e", "1e+", "+1", "0x10", "tru", "nulls", "True", "NaN", "1_0"} {
		assert.False(t, validScalar([]byte(s)), s)
	}
}

// unquote decodes as encoding/json does, and refuses what it refuses.
func TestUnquote(t *testing.T) {
	for _, raw := range []string{
		`plain`, `a\"b\\c\/d\b\f\n\r\t`, `str\u0065am`, `\ud83d\ude00`, `\ud83d`, `\ud83dx`, `\ud83d\u0041`,
		`\uDE00\uD83D`, "caf\xc3\xa9", "\xff\xfe", "\xc3", ``,
	} {
		var want string
		require.NoError(t, json.Unmarshal([]byte(`"`+raw+`"`), &want), raw)
		got, ok := unquote(nil, []byte(raw))
		assert.True(t, ok, raw)
		assert.Equal(t, want, string(got), raw)
		assert.True(t, validString([]byte(raw)), raw)
	}
	for _, raw := range []string{`\x`, `\`, `\u12`, `\u12g4`, "a\nb", "\x00", `\'`} {
		_, ok := unquote(nil, []byte(raw))
		assert.False(t, ok, raw)
		assert.False(t, validString([]byte(raw)), raw)
	}
}

// FuzzUnquote checks unquote and validString against encoding/json on any
// string body.
func FuzzUnquote(f *testing.F) {
	for _, s := range []string{`plain`, `str\u0065am`, `\ud83d\ude00`, `\ud83d\u0041`, "\xff", `\x`, "a\nb", `\u12`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		var want string
		err := json.Unmarshal([]byte(`"`+raw+`"`), &want)
		got, ok := unquote(nil, []byte(raw))
		if (err == nil) != ok || (err == nil) != validString([]byte(raw)) {
			t.Fatalf("%q: encoding/json %v, unquote %v, validString %v", raw, err, ok, validString([]byte(raw)))
		}
		if ok && string(got) != want {
			t.Fatalf("%q: got %q, encoding/json %q", raw, got, want)
		}
	})
}
