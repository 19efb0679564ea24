package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The top level of an event's data: its type, whether its error member
// says anything, Azure's prompt-filter marks, and its members counted;
// values skipped however deep, malformed objects refused.
func TestTopLevel(t *testing.T) {
	for _, c := range []struct {
		data string
		ok   bool
		want topLevel
	}{
		{`{}`, true, topLevel{}},
		{`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"}"}}`, true, topLevel{typ: []byte("content_block_delta"), keys: 3}},
		{`{"type":"a","type":7}`, true, topLevel{keys: 2}},
		{`{"error":{"type":"api_error"}}`, true, topLevel{err: true, keys: 1}},
		{`{"error":{ },"choices":[]}`, true, topLevel{keys: 2, noChoices: true}},
		{`{"error":" "}`, true, topLevel{keys: 1}},
		{`{"error":"boom"}`, true, topLevel{err: true, keys: 1}},
		{`{"error":null}`, true, topLevel{keys: 1}},
		{`{"choices":[],"prompt_filter_results":[{"a":[[{}]]}]}`, true, topLevel{keys: 2, noChoices: true, promptFilter: true}},
		{`{"choices":[{}]}`, true, topLevel{keys: 1}},
		{`{"typ\u0065":"x"}`, true, topLevel{keys: 1}}, // keys are compared as written
		{`{"a":1} trailing`, true, topLevel{keys: 1}},
		{`{"a":1,}`, false, topLevel{}},
		{`{"a" 1}`, false, topLevel{}},
		{`{"a":}`, false, topLevel{}},
		{`{"a":1 "b":2}`, false, topLevel{}},
		{`{"a":[1,2}`, false, topLevel{}},
		{`{"a":"cut`, false, topLevel{}},
		{`{"a":1`, false, topLevel{}},
		{`[1]`, false, topLevel{}},
	} {
		var got topLevel
		ok := got.read([]byte(c.data))
		assert.Equal(t, c.ok, ok, c.data)
		if ok {
			assert.Equal(t, c.want, got, c.data)
		}
	}
}

// Reading an event's top level costs nothing.
func TestTopLevelAllocatesNothing(t *testing.T) {
	data := []byte(`{"type":"message_start","message":{"id":"msg_1","content":[],"usage":{"input_tokens":25}}}`)
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		var top topLevel
		top.read(data)
	}))
}
