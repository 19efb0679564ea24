package llmretry

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// This file holds the bounds on one attempt: AttemptTimeout (the wait for
// response headers) and StreamIdleTimeout (the silence of a committed
// stream). FirstEventTimeout is the stream guard's (streamguard.go).

// boundError is an attempt abandoned, or a stream ended, because a bound
// of the policy passed. It is a timeout (Timeout reports true, as for a
// net.Error), never the caller's context's error.
type boundError struct {
	what string        // what did not come in time
	name string        // the Policy field that bounds it
	d    time.Duration // its value
}

func (e *boundError) Error() string {
	return "llmretry: " + e.what + " within " + e.name + " (" + e.d.String() + ")"
}

// Timeout reports true: the error is a timeout.
func (e *boundError) Timeout() bool { return true }

// Temporary reports true, as net.Error's timeouts do.
func (e *boundError) Temporary() bool { return true }

// roundTrip sends req through base under the policy's AttemptTimeout: a
// base that has not answered with headers by then is abandoned (the
// attempt's context is canceled, which closes its connection) and the
// attempt fails with a *boundError. Headers in time leave the attempt's
// context alive until the body is closed. Without an AttemptTimeout it is
// base.RoundTrip, with normalize's guarantees either way.
func (p *Policy) roundTrip(base http.RoundTripper, req *http.Request) (*http.Response, error) {
	if p.AttemptTimeout <= 0 {
		return normalize(base.RoundTrip(req))
	}
	ctx, cancel := context.WithCancel(req.Context())
	timer := time.AfterFunc(p.AttemptTimeout, cancel)
	resp, err := normalize(base.RoundTrip(req.WithContext(ctx)))
	if !timer.Stop() && req.Context().Err() == nil {
		// The bound passed first: whatever came is abandoned.
		if resp != nil {
			resp.Body.Close()
		}
		cancel()
		return nil, &boundError{what: "no response headers", name: "Policy.AttemptTimeout", d: p.AttemptTimeout}
	}
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelBody is a response body whose attempt's context ends when it is
// closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

// Close closes the body and ends the attempt's context.
func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// isEventStream reports whether resp is a successful stream of events: a
// 2xx text/event-stream (SSE) or AWS event-stream response.
func isEventStream(resp *http.Response) bool {
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return false
	}
	ct := resp.Header.Get("Content-Type")
	return hasMediaType(ct, "text/event-stream") || hasMediaType(ct, "application/vnd.amazon.eventstream")
}

// hasMediaType reports whether the Content-Type ct names media type t
// (case-insensitively, parameters ignored).
func hasMediaType(ct, t string) bool {
	ct = strings.TrimLeft(ct, " \t")
	if len(ct) < len(t) || !strings.EqualFold(ct[:len(t)], t) {
		return false
	}
	rest := ct[len(t):]
	return rest == "" || rest[0] == ';' || rest[0] == ' ' || rest[0] == '\t'
}

// idleBody is a committed stream under StreamIdleTimeout: when no byte
// arrives for longer than d, the underlying body is closed and Read fails
// with a *boundError instead of ending cleanly.
type idleBody struct {
	rc    io.ReadCloser
	d     time.Duration
	timer *time.Timer
	idle  atomic.Bool // the bound passed; set before rc is closed
	once  sync.Once   // stops the timer once
}

// newIdleBody starts watching rc for silence longer than d.
func newIdleBody(rc io.ReadCloser, d time.Duration) *idleBody {
	b := &idleBody{rc: rc, d: d}
	b.timer = time.AfterFunc(d, func() {
		b.idle.Store(true)
		rc.Close()
	})
	return b
}

// Read reads from the stream; each read that returns bytes restarts the
// bound.
func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if b.idle.Load() {
		return n, &boundError{what: "stream idle: no bytes", name: "Policy.StreamIdleTimeout", d: b.d}
	}
	switch {
	case err != nil:
		b.stop() // the end, or a failure: nothing more to watch
	case n > 0:
		if !b.timer.Reset(b.d) {
			// The timer fired as the bytes came: it has closed the body.
			return n, &boundError{what: "stream idle: no bytes", name: "Policy.StreamIdleTimeout", d: b.d}
		}
	}
	return n, err
}

// Close stops the bound and closes the stream.
func (b *idleBody) Close() error {
	b.stop()
	return b.rc.Close()
}

// stop stops the timer.
func (b *idleBody) stop() { b.once.Do(func() { b.timer.Stop() }) }
