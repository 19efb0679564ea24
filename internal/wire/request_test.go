package wire

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

// StreamBody finds a top-level "stream": true as encoding/json reads the
// object, whole or written a byte at a time.
func TestStreamBody(t *testing.T) {
	for body, want := range map[string]bool{
		`{"model":"m","stream":true}`:                   true,
		` {"stream" : true , "messages":[]}`:            true,
		"\xef\xbb\xbf{\"stream\":true}":                 true,
		`{"str\u0065am":true}`:                          true,
		`{"\u0073\u0074\u0072\u0065\u0061\u006d":true}`: true,
		`{"stream":true`:                                true, // cut after the literal
		`{"stream":true,"stream":false}`:                false,
		`{"stream":false,"stream":true}`:                true,
		`{"stream":"true"}`:                             false,
		`{"stream":truex}`:                              false,
		`{"stream":tru}`:                                false,
		`{"a":{"stream":true}}`:                         false,
		`{"s":"\"stream\":true"}`:                       false,
		`["stream",true]`:                               false,
		`x{"stream":true}`:                              false,
		`{"streams":true}`:                              false,
		`{"` + strings.Repeat(`\u0020`, 7) + `":true}`:  false,
		`{} {"stream":true}`:                            false,
	} {
		var whole, piecewise StreamBody
		_, _ = whole.Write([]byte(body))
		for i := range len(body) {
			_, _ = piecewise.Write([]byte{body[i]})
		}
		assert.Equal(t, want, whole.Stream(), "whole: %s", body)
		assert.Equal(t, want, piecewise.Stream(), "a byte at a time: %s", body)
	}
}

// sniffSource is a request body handed out by GetBody. Over an in-memory
// slice it implements io.WriterTo, as the readers http.NewRequest keeps do;
// otherwise it is read chunk bytes at a time, like a file or a pipe.
type sniffSource struct {
	data     []byte
	chunk    int
	writerTo bool

	mu     sync.Mutex
	read   int // bytes handed out by Read
	closed int
}

func (s *sniffSource) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.read >= len(s.data) {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), s.chunk)], s.data[s.read:])
	s.read += n
	return n, nil
}

func (s *sniffSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed++
	return nil
}

// memSource adds io.WriterTo: the whole slice in one Write, no copy.
type memSource struct{ *sniffSource }

func (m memSource) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(m.data)
	return int64(n), err
}

// sniff runs IsStream on req with a getBody over body, and checks that
// getBody is called at most once, what it returned is closed, and an
// in-memory body is handed over, not read. req has no Body: IsStream
// reads the body through getBody only.
func sniff(t *testing.T, req *http.Request, body []byte, chunk int, writerTo bool) bool {
	t.Helper()
	var sources []*sniffSource
	getBody := func() (io.ReadCloser, error) {
		s := &sniffSource{data: body, chunk: chunk, writerTo: writerTo}
		sources = append(sources, s)
		if writerTo {
			return memSource{s}, nil
		}
		return s, nil
	}
	got := IsStream(req, getBody)
	if len(sources) > 1 {
		t.Fatalf("GetBody called %d times", len(sources))
	}
	for _, s := range sources {
		if s.closed != 1 {
			t.Fatalf("the body from GetBody closed %d times", s.closed)
		}
		if writerTo && s.read != 0 {
			t.Fatalf("an in-memory body was copied through Read (%d bytes) instead of handed over", s.read)
		}
	}
	return got
}

// topLevelStream decodes a JSON object as encoding/json would and reports
// whether its top-level member "stream" is true (of duplicate keys, the
// last counts). ok is false when data is not a JSON object.
func topLevelStream(data []byte) (stream, ok bool) {
	if !json.Valid(data) {
		return false, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false, false
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return false, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return false, false
		}
		if key == "stream" {
			stream = string(v) == "true"
		}
	}
	return stream, true
}

// IsStream never panics, never reads req.Body, calls getBody at most once
// and closes what it got, and hands an in-memory body over without copying
// it through Read. Read piece by piece or handed over whole, a body gets
// the same answer, and on a JSON object of any size it is encoding/json's:
// a top-level "stream": true, wherever it is. A body is built as head, pad
// spaces ×4, tail, so that large bodies are reached.
func FuzzIsStream(f *testing.F) {
	f.Add([]byte(`{"model":"gpt","stream":true}`), uint16(0), []byte(nil), "https://api.openai.com/v1/chat/completions", "application/json", uint16(7))
	f.Add([]byte(`{"model":"m","messages":[`), uint16(4000), []byte(`],"stream":true}`), "https://api.anthropic.com/v1/messages", "", uint16(512))
	f.Add([]byte(`{"messages":[{"content":"`), uint16(3000), []byte(`"}],"stream":true,"stream_options":{"include_usage":true},"temperature":0}`), "", "", uint16(100))
	f.Add([]byte(`{"a":{"stream":true}}`), uint16(0), []byte(nil), "", "", uint16(1))
	f.Add([]byte(`{"s":"\"stream\":true"}`), uint16(0), []byte(nil), "", "", uint16(3))
	f.Add([]byte(`{"str\u0065am" : true , "stream":false}`), uint16(0), []byte(nil), "", "", uint16(2))
	f.Add([]byte(`{"contents":[]}`), uint16(0), []byte(nil), "https://generativelanguage.googleapis.com/v1beta/models/g:streamGenerateContent?alt=sse&key=k", "", uint16(64))
	f.Add([]byte(`{"messages":[]}`), uint16(0), []byte(nil), "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse-stream", "", uint16(64))
	f.Add([]byte(nil), uint16(0), []byte(nil), "https://x.test/", "Text/Event-Stream", uint16(1))
	f.Fuzz(func(t *testing.T, head []byte, pad uint16, tail []byte, rawURL, accept string, chunk uint16) {
		body := make([]byte, 0, len(head)+4*int(pad)+len(tail))
		body = append(body, head...)
		body = append(body, bytes.Repeat([]byte(" "), 4*int(pad))...)
		body = append(body, tail...)
		u, err := url.Parse(rawURL)
		if err != nil {
			u = nil
		}
		header := http.Header{}
		if accept != "" {
			header.Set("Accept", accept)
		}
		size := max(1, int(chunk))

		// The headers and URL alone; the body alone; both.
		signals := IsStream(&http.Request{Method: http.MethodPost, URL: u, Header: header}, nil)
		bodyOnly := sniff(t, &http.Request{Method: http.MethodPost, Header: http.Header{}}, body, size, true)
		both := sniff(t, &http.Request{Method: http.MethodPost, URL: u, Header: header}, body, size, true)
		if both != (signals || bodyOnly) {
			t.Fatalf("with headers and URL %v, but %v alone and %v for the body alone", both, signals, bodyOnly)
		}
		if strings.Contains(strings.ToLower(accept), "text/event-stream") && !signals {
			t.Fatalf("Accept %q names text/event-stream", accept)
		}
		piecewise := sniff(t, &http.Request{Method: http.MethodPost, Header: http.Header{}}, body, size, false)
		if piecewise != bodyOnly {
			t.Fatalf("read %d bytes at a time: %v; handed over whole: %v", size, piecewise, bodyOnly)
		}
		if want, isObject := topLevelStream(body); isObject && bodyOnly != want {
			t.Fatalf("a %d-byte JSON object: got %v, want %v", len(body), bodyOnly, want)
		}
	})
}

// The scanner keeps a fixed state whatever the body, and cutting the body
// into writes of any size never changes its answer.
func FuzzStreamScanner(f *testing.F) {
	f.Add([]byte(`{"stream":true}`), uint16(5), uint16(0))
	f.Add([]byte(`{"messages":[],"stream":true}`), uint16(4096), uint16(3000))
	f.Add([]byte(`{"a":"x\"y","stream" : true }`), uint16(1), uint16(0))
	f.Add([]byte(`0123456789`), uint16(1), uint16(1000))
	f.Fuzz(func(t *testing.T, data []byte, chunk, repeat uint16) {
		body := bytes.Repeat(data, 1+int(repeat)%(1+(64<<10)/max(1, len(data))))
		size := max(1, int(chunk))
		var w StreamBody
		for off := 0; off < len(body); off += size {
			n, err := w.Write(body[off:min(len(body), off+size)])
			if err != nil || n != min(size, len(body)-off) {
				t.Fatalf("Write returned %d, %v", n, err)
			}
			if w.lex.Depth() < 0 || w.keyLen > MaxKeyBytes+1 || w.litLen > len(w.lit) {
				t.Fatalf("state out of bounds: depth %d, key %d, value %d", w.lex.Depth(), w.keyLen, w.litLen)
			}
		}
		var whole StreamBody
		_, _ = whole.Write(body)
		if whole.Stream() != w.Stream() {
			t.Fatalf("one write says %v, writes of %d bytes say %v", whole.Stream(), size, w.Stream())
		}
		if want, isObject := topLevelStream(body); isObject && whole.Stream() != want {
			t.Fatalf("a JSON object: got %v, want %v", whole.Stream(), want)
		}
	})
}
