package llmretry

import (
	"bytes"
	"io"
	"net/http"
	"strings"
)

// sniffWindow is how many bytes of the start and of the end of a request
// body the stream sniffer looks at.
const sniffWindow = 4 << 10

// sniffReadLimit bounds how much of a body that can only be read piece by
// piece (no io.WriterTo) is read to find its end. Past it the request is
// taken as not a stream.
const sniffReadLimit = 1 << 20

// IsStream reports whether req asks for a streamed response, from what
// clients really send:
//
//   - an Accept header that names text/event-stream;
//   - Gemini's ?alt=sse query or a :streamGenerateContent path;
//   - a JSON body with a top-level "stream": true, as openai-go and
//     anthropic-sdk-go send (with Accept: application/json). The body is
//     read through req.GetBody, never req.Body, and only its first and last
//     4 KiB are looked at: the SDKs append "stream" as the last key, and an
//     in-memory body (bytes.Reader, strings.Reader) hands over its bytes
//     without a copy, so a multi-megabyte prompt is not read again.
//
// It never consumes req.Body and is safe for concurrent use. The Transport
// calls it only after a failed attempt, so successful requests never pay
// for it.
func IsStream(req *http.Request) bool {
	if req == nil {
		return false
	}
	return isStream(req, req.GetBody)
}

// isStream is IsStream with the body source given separately (the
// Transport's own replayable copy when req has no GetBody).
func isStream(req *http.Request, getBody func() (io.ReadCloser, error)) bool {
	if req == nil {
		return false
	}
	for _, v := range req.Header.Values("Accept") {
		if strings.Contains(strings.ToLower(v), "text/event-stream") {
			return true
		}
	}
	if u := req.URL; u != nil {
		if strings.Contains(u.Path, ":streamGenerateContent") || strings.Contains(u.RawPath, ":streamGenerateContent") {
			return true
		}
		if strings.Contains(u.RawQuery, "alt=sse") && u.Query().Get("alt") == "sse" {
			return true
		}
	}
	if getBody == nil {
		return false
	}
	body, err := getBody()
	if err != nil || body == nil {
		return false
	}
	defer body.Close()
	var w sniffWriter
	if wt, ok := body.(io.WriterTo); ok {
		_, _ = wt.WriteTo(&w)
	} else {
		_, _ = io.Copy(&w, io.LimitReader(body, sniffReadLimit))
	}
	return w.streamFlag()
}

// sniffWriter keeps the first and the last sniffWindow bytes written to it.
// Each Write copies at most 2·sniffWindow bytes, whatever its length.
type sniffWriter struct {
	head  []byte
	tail  []byte
	total int64
}

// Write records p's contribution to the head and the tail.
func (w *sniffWriter) Write(p []byte) (int, error) {
	n := len(p)
	w.total += int64(n)
	if room := sniffWindow - len(w.head); room > 0 {
		w.head = append(w.head, p[:min(room, len(p))]...)
	}
	if len(p) >= sniffWindow {
		w.tail = append(w.tail[:0], p[len(p)-sniffWindow:]...)
		return n, nil
	}
	w.tail = append(w.tail, p...)
	if over := len(w.tail) - sniffWindow; over > 0 {
		w.tail = append(w.tail[:0], w.tail[over:]...)
	}
	return n, nil
}

// streamFlag reports whether the body seen has a top-level "stream": true.
func (w *sniffWriter) streamFlag() bool {
	if w.total <= sniffWindow {
		return topLevelStreamTrue(w.head) // the whole body: an exact scan
	}
	return topLevelStreamTrue(w.head) || endsWithStreamTrue(w.tail)
}

// topLevelStreamTrue scans a JSON object (possibly cut short) for a key
// "stream" at depth 1 whose value is true. It never reads past b.
func topLevelStreamTrue(b []byte) bool {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case '"':
			j := i + 1
			for j < len(b) && b[j] != '"' {
				if b[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(b) {
				return false // cut inside a string
			}
			if depth == 1 && string(b[i+1:j]) == "stream" {
				k := skipSpace(b, j+1)
				if k < len(b) && b[k] == ':' {
					k = skipSpace(b, k+1)
					if bytes.HasPrefix(b[k:], []byte("true")) {
						return true
					}
				}
			}
			i = j
		}
	}
	return false
}

// endsWithStreamTrue reports whether b ends a JSON object with the member
// "stream": true, as sjson writes a key it appends: …,"stream":true}.
func endsWithStreamTrue(b []byte) bool {
	b = bytes.TrimRight(b, " \t\r\n")
	for _, part := range []string{"}", "true", ":", `"stream"`} {
		if !bytes.HasSuffix(b, []byte(part)) {
			return false
		}
		b = bytes.TrimRight(b[:len(b)-len(part)], " \t\r\n")
	}
	return bytes.HasSuffix(b, []byte(",")) || bytes.HasSuffix(b, []byte("{"))
}

// skipSpace returns the index of the first non-space byte of b at or after i.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}
