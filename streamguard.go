package llmretry

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// This file guards a stream until it is committed: with RetryStreams, a
// 2xx text/event-stream response is read ahead to its first event that
// decides (firstevent.go) before the Transport hands it over. An error
// there makes the attempt a failure, retried like the status it stands
// for; anything else is handed over with the bytes read ahead in front, so
// the caller reads exactly what the provider sent.

// openingLimit is the most of a stream's opening that is read ahead: far
// more than any provider's preamble and first event (a chat completion's
// first chunk, Anthropic's three opening events, take under 2 KiB).
const openingLimit = 64 << 10

// status returns the HTTP status an error event stands for; 200 for a
// verdict that is not an error.
func (e *firstEvent) status() int {
	switch e.kind {
	case eventOverloaded:
		return 529
	case eventServerError:
		return http.StatusInternalServerError
	case eventRateLimit:
		return http.StatusTooManyRequests
	case eventOtherError:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// failed reports whether the verdict makes the attempt a failure.
func (e *firstEvent) failed() bool {
	switch e.kind {
	case eventOverloaded, eventServerError, eventRateLimit, eventOtherError:
		return true
	}
	return false
}

// describe names the failure for a shared fact and a log: the status it
// stands for and the provider's word.
func (e *firstEvent) describe() string {
	s := "stream error"
	if e.what != "" {
		s += " " + e.what
	}
	return s
}

// guardsOpening reports whether resp's opening is read ahead before it is
// handed over: the policy retries streams and resp is a 2xx
// text/event-stream.
func (p *Policy) guardsOpening(resp *http.Response) bool {
	return p.RetryStreams && resp.StatusCode >= 200 && resp.StatusCode <= 299 &&
		hasMediaType(resp.Header.Get("Content-Type"), "text/event-stream")
}

// opening reads the opening of resp, a response guardsOpening accepts: it
// returns the verdict when the first event that decides is an error
// (resp's body then replays the bytes read, for a caller that gets it after
// all), or an error when the read fails or passes its bound
// (FirstEventTimeout, or the last instant lim allows an attempt); the body
// is then closed. Otherwise it returns nil, nil, and resp's body replays
// what was read ahead, then the rest.
func (p *Policy) opening(resp *http.Response, lim limits) (*firstEvent, error) {
	body := resp.Body
	d, name := p.FirstEventTimeout, "Policy.FirstEventTimeout"
	if latest := lim.latest(); !latest.IsZero() {
		if left := time.Until(latest); d <= 0 || left < d {
			d, name = max(left, 0), "the call's deadline less its reserve"
		}
	}
	var fired *atomic.Bool
	var timer *time.Timer
	if d > 0 || name != "Policy.FirstEventTimeout" {
		fired = new(atomic.Bool)
		timer = time.AfterFunc(d, func() {
			fired.Store(true)
			body.Close()
		})
	}
	read, ev, err := scanFirstEvent(body, openingLimit)
	if timer != nil && (!timer.Stop() || fired.Load()) {
		body.Close()
		return nil, &boundError{what: "no first event", name: name, d: d}
	}
	if err != nil {
		body.Close()
		return nil, err
	}
	resp.Body = &openedBody{buf: read, rc: body}
	if ev.failed() {
		failed := ev // only a failure's verdict goes to the heap
		return &failed, nil
	}
	return nil, nil
}

// handOver returns resp as the caller gets it: a successful stream of
// events under the policy's StreamIdleTimeout.
func (p *Policy) handOver(resp *http.Response) *http.Response {
	if p.StreamIdleTimeout > 0 && isEventStream(resp) {
		resp.Body = newIdleBody(resp.Body, p.StreamIdleTimeout)
	}
	return resp
}

// openedBody is a response body whose opening was read ahead: Read hands
// over those bytes, then reads the rest.
type openedBody struct {
	buf []byte
	rc  io.ReadCloser
}

// Read hands over the bytes read ahead, then the rest of the body.
func (b *openedBody) Read(p []byte) (int, error) {
	if len(b.buf) > 0 {
		n := copy(p, b.buf)
		b.buf = b.buf[n:]
		return n, nil
	}
	return b.rc.Read(p)
}

// Close closes the body.
func (b *openedBody) Close() error { return b.rc.Close() }
