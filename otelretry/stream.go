package otelretry

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/llmretry/llmretry"
	"go.opentelemetry.io/otel/trace"
)

// This file records what llmretry learns of an attempt only after its
// response came back: that the 2xx stream it opened opened with an error
// event (llmretry.Attempt.Event, found when llmretry reads the stream's
// opening ahead: see llmretry.Policy.RetryStreams).

// opensStream reports whether resp is a 2xx stream of events
// (text/event-stream): one whose opening llmretry may read ahead, and find
// an error event in.
func opensStream(resp *http.Response) bool {
	if resp == nil || resp.StatusCode < 200 || resp.StatusCode > 299 || resp.Body == nil || resp.Body == http.NoBody {
		return false
	}
	ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	return strings.EqualFold(strings.TrimSpace(ct), "text/event-stream")
}

// pendingKey is the context key of a response's pending count, in the
// context of its Request.
type pendingKey struct{}

// pending is an attempt whose answer is a 2xx stream, not yet counted in
// llmretry.attempts: its point carries llmretry.event when the stream
// opened with an error event, which is known only once llmretry has read
// its opening. It is counted once, by whichever comes first: the attempt's
// record (onAttempt, with its Event), or the end or close of its body (a
// request with a policy of its own, whose OnAttempt is not this
// package's). It is safe for concurrent use.
type pending struct {
	tel  *telemetry
	ctx  context.Context
	req  *http.Request
	code int
	f    facts
	done atomic.Bool
}

// count counts the attempt, with event for llmretry.event ("" none), if
// it has not been counted.
func (p *pending) count(event string) {
	if !p.done.CompareAndSwap(false, true) {
		return
	}
	f := p.f
	f.event = event
	p.tel.countStatus(p.ctx, p.req, p.code, f)
}

// pend defers the count of the attempt that req sent and resp answered, a
// stream (opensStream), described by f: resp's body counts it when it
// ends or is closed, and its Request's context carries it to onAttempt
// (see recordStream). It returns resp.
func (t *telemetry) pend(ctx context.Context, req *http.Request, resp *http.Response, f facts) *http.Response {
	p := &pending{tel: t, ctx: ctx, req: req, code: resp.StatusCode, f: f}
	resp.Body = &pendingBody{ReadCloser: resp.Body, p: p}
	r := resp.Request
	resp.Request = r.WithContext(context.WithValue(r.Context(), pendingKey{}, p))
	return resp
}

// pendingBody is the body of a pending attempt's stream. It counts the
// attempt when the stream ends or is closed, if its record has not; and it
// holds back an io.EOF that comes with data until the next Read, so that
// the attempt's span, which otelhttp ends at io.EOF, is still open when
// the record, right after llmretry has read the stream's opening, sets
// llmretry.event on it.
type pendingBody struct {
	io.ReadCloser
	p *pending
}

// Read reads the stream; see pendingBody.
func (b *pendingBody) Read(buf []byte) (int, error) {
	n, err := b.ReadCloser.Read(buf)
	if err == io.EOF {
		if n > 0 {
			return n, nil // the next Read returns it
		}
		b.p.count("")
	}
	return n, err
}

// Close counts the attempt, if it has not been, and closes the stream.
func (b *pendingBody) Close() error {
	b.p.count("")
	return b.ReadCloser.Close()
}

// recordStream counts a's attempt, if its answer is a pending stream,
// with the error event it opened with (a.Event), and sets that event on
// the attempt's span as llmretry.event.
func (t *telemetry) recordStream(a llmretry.Attempt) {
	if a.Response == nil || a.Response.Request == nil {
		return
	}
	ctx := a.Response.Request.Context()
	p, ok := ctx.Value(pendingKey{}).(*pending)
	if !ok {
		return
	}
	p.count(a.Event)
	if a.Event == "" {
		return
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(keyEvent.String(a.Event))
	}
}
