package wire

//	go test -run='^$' -fuzz='^FuzzWalk$' -fuzztime=30s ./internal/wire

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The walk accepts what encoding/json's Valid accepts, and nothing else.
func TestWalkValid(t *testing.T) {
	deep := strings.Repeat("[", maxNesting) + strings.Repeat("]", maxNesting)
	tooDeep := strings.Repeat("[", maxNesting+1) + strings.Repeat("]", maxNesting+1)
	for _, s := range []string{
		``, ` `, `{}`, `[]`, `{"a":1}`, ` {"a" : [1, 2.5e-3, -0, true, false, null, "x\u00e9\n"]} `,
		`{"a":1,}`, `[1,]`, `{"a"}`, `{"a":}`, `{,}`, `[1 2]`, `{"a":1 "b":2}`, `01`, `1.`, `-`, `.5`, `1e`, `tru`, `nul`,
		`"\x"`, "\"a\tb\"", `"\ud800"`, "\"\xff\"", `{"a":1}}`, `[1]]`, `]`, `}`, `{]`, `[}`, `{"a":[}]`,
		`"unterminated`, `{"a":"b`, "\xef\xbb\xbf{}", `{} {}`, `1 2`, `"a" "b"`, `[[[]]]`, `{"":""}`,
		deep, tooDeep,
	} {
		var w walker
		name := s
		if len(name) > 40 {
			name = name[:40]
		}
		assert.Equal(t, json.Valid([]byte(s)), w.validJSON([]byte(s)), "%q", name)
	}
}

// The walk reports each value with its path.
func TestWalkPaths(t *testing.T) {
	data := []byte(`{"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":"b"}}],"x":{"choices":[1]}}`)
	var w walker
	w.reset(data)
	var got []string
	content := compile("choices[].delta.content")
	choices := compile("choices[]")
	for {
		tok, ok := w.next()
		if !ok {
			break
		}
		switch {
		case w.at(&content):
			got = append(got, "content "+string(data[tok.From:tok.To])+" of choice "+string(rune('0'+w.elem(1))))
		case w.at(&choices) && tok.Kind == EndObject:
			got = append(got, "end of choice")
		case w.in(&choices) && tok.Kind == Scalar:
			got = append(got, "index "+string(data[tok.From:tok.To]))
		}
	}
	assert.False(t, w.bad)
	assert.Equal(t, []string{
		"index 0", `content "a" of choice 0`, "end of choice",
		"index 1", `content "b" of choice 1`, "end of choice",
	}, got, "x.choices is not choices")
}

// Numbers as indices and sequence numbers.
func TestParseIndexAndSeq(t *testing.T) {
	for s, want := range map[string]int{"0": 0, "7": 7, "123456789": 123456789, "1234567890": -1, "-1": -1, "1.0": -1, "1e2": -1, "": -1, "true": -1} {
		assert.Equal(t, want, parseIndex([]byte(s)), s)
	}
	for s, want := range map[string]int64{"0": 0, "42": 42, "-3": -3, "123456789012345678": 123456789012345678} {
		got, ok := parseSeq([]byte(s))
		assert.True(t, ok, s)
		assert.Equal(t, want, got, s)
	}
	for _, s := range []string{"", "-", "1.5", "1234567890123456789", "null"} {
		_, ok := parseSeq([]byte(s))
		assert.False(t, ok, s)
	}
}

func FuzzWalk(f *testing.F) {
	for _, s := range []string{`{"a":[1,"b",{"c":null}]}`, `[1,]`, `{"a":"\ud83c\udf89"}`, `tru`, `-0.5e+3`, "\"\x01\"", `[[[[]]]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var w walker
		if got, want := w.validJSON(data), json.Valid(data); got != want {
			t.Fatalf("validJSON %v, json.Valid %v: %q", got, want, data)
		}
	})
}
