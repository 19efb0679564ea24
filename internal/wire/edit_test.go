package wire

//	go test -run='^$' -fuzz='^FuzzAppendQuoted$' -fuzztime=30s ./internal/wire

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A string is written as encoding/json writes it.
func TestAppendQuoted(t *testing.T) {
	for _, s := range []string{"", "plain", "a\"b\\c", "<p>&amp;</p>", "\b\f\n\r\t\x00\x1f\x7f", "é 🎉", "\u2028\u2029", "bad \xff\xfe utf8", "\xed\xa0\x80"} {
		checkQuoted(t, s)
	}
}

// Edits replace their places and keep every other byte; overlapping ones
// are dropped; insertions at one place keep their order.
func TestEditor(t *testing.T) {
	data := []byte(`{"id":"chatcmpl-2","delta":{},"content":"abc"}`)
	at := func(s string) span {
		i := bytes.Index(data, []byte(s))
		return span{i, i + len(s)}
	}
	var e editor
	e.replaceString(at(`"abc"`), []byte("x<y"))
	e.replaceBytes(at(`chatcmpl-2`), []byte("chatcmpl-1"))
	in := at(`{}`).From + 1
	e.replaceBytes(span{in, in}, []byte(`"a":1`))
	e.replaceBytes(span{in, in}, []byte(`,"b":2`))
	e.replaceBytes(span{at("chatcmpl-2").From + 1, at("chatcmpl-2").From + 3}, []byte("overlap"))
	assert.Equal(t, `{"id":"chatcmpl-1","delta":{"a":1,"b":2},"content":"x\u003cy"}`, string(e.apply(nil, data)))
	e.reset()
	assert.Equal(t, string(data), string(e.apply(nil, data)))
}

// appendEvent frames an event the Framer reads back: typed or not, its
// data of one line or several.
func TestAppendEvent(t *testing.T) {
	for _, c := range []sseEvent{{"", `{"a":1}`}, {"message_stop", `{"type":"message_stop"}`}, {"", "{\n\"a\": 1\n}"}, {"x", ""}, {"", "\n"}} {
		b := appendEvent(nil, []byte(c.typ), []byte(c.data))
		assert.Equal(t, []sseEvent{c}, frameWhole(b), "%q", b)
	}
	assert.Equal(t, "event: ping\ndata: {}\n\n", string(appendEvent(nil, []byte("ping"), []byte("{}"))))
	assert.Equal(t, "data: [DONE]\n\n", string(appendEvent(nil, nil, []byte("[DONE]"))))
}

func FuzzAppendQuoted(f *testing.F) {
	for _, s := range []string{"", "a<b>&c", "\x00\u2028\xff", "🎉\"\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkQuoted(t, s)
	})
}

// checkQuoted checks appendQuoted writes s as encoding/json does: byte for
// byte when s is UTF-8, else as the same string (encoding/json writes
// U+FFFD as \ufffd before Go 1.26, as itself since).
func checkQuoted(t *testing.T, s string) {
	t.Helper()
	want, err := json.Marshal(s)
	require.NoError(t, err)
	got := appendQuoted(nil, []byte(s))
	if utf8.ValidString(s) {
		require.Equal(t, string(want), string(got), "%q", s)
		return
	}
	var a, b string
	require.NoError(t, json.Unmarshal(want, &a))
	require.NoError(t, json.Unmarshal(got, &b), "%q", got)
	require.Equal(t, a, b, "%q", s)
}
