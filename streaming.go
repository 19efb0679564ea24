package llmretry

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmretry/llmretry/internal/wire"
)

// This file is the root's face of streams: IsStream, and the stream guard
// that reads a 2xx text/event-stream ahead to its first event that decides
// before the Transport hands it over (with RetryStreams). An error there
// makes the attempt a failure, retried like the status it stands for;
// anything else is handed over with the bytes read ahead in front, so the
// caller reads exactly what the provider sent. What a stream says is read
// by internal/wire (its framer, its JSON lexer, each API's event shapes).
// A committed stream the caller reads is under StreamIdleTimeout (idleBody).

// IsStream reports whether req asks for a streamed response, from what
// clients really send:
//
//   - an Accept header that names text/event-stream, or AWS's
//     application/vnd.amazon.eventstream;
//   - Gemini's ?alt=sse query or a :streamGenerateContent path;
//   - Bedrock's streaming operations: a path ending in /converse-stream or
//     /invoke-with-response-stream;
//   - a JSON body with a top-level "stream": true anywhere in it: openai-go
//     and anthropic-sdk-go send it as the last key (with Accept:
//     application/json), go-openai and langchaingo in the middle of the
//     body, after the prompt.
//
// The body is read through req.GetBody, never req.Body, by a small scanner
// that keeps a few bytes of state whatever the body's size. An in-memory
// body (one with io.WriterTo, such as the bytes.Reader and strings.Reader
// http.NewRequest keeps) hands over its bytes at once, without a copy; any
// other body is read to its end. The scanner stops looking at the first
// byte that shows the body is not a JSON object, or once the object ends,
// but the read goes on: a 1 MiB body that is not JSON, from a GetBody that
// returns a file or a pipe, is read in full. Duplicate "stream" keys count
// as encoding/json counts them: the last one wins.
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
	return wire.IsStream(req, getBody)
}

// firstEvent is the verdict on a stream's opening (see wire.FirstEvent).
type firstEvent = wire.FirstEvent

// openingLimit is the most of a stream's opening that is read ahead: far
// more than any provider's preamble and first event (a chat completion's
// first chunk, Anthropic's three opening events, take under 2 KiB).
const openingLimit = 64 << 10

// guardsOpening reports whether resp's opening is read ahead before it is
// handed over: the policy retries streams and resp is a 2xx
// text/event-stream.
func (p *Policy) guardsOpening(resp *http.Response) bool {
	return p.RetryStreams && resp.StatusCode >= 200 && resp.StatusCode <= 299 &&
		hasMediaType(resp.Header.Get("Content-Type"), wire.MediaSSE)
}

// opening reads the opening of resp, a response guardsOpening accepts: it
// returns the verdict when the first event that decides is an error
// (resp's body then replays the bytes read, for a caller that gets it after
// all), or an error when the read fails or passes its bound
// (FirstEventTimeout, or the last instant lim allows an attempt); the body
// is then closed. Otherwise it returns nil, nil, and resp's body replays
// what was read ahead, then the rest. A stream that comes once lim allows
// no attempt is not read ahead (no retry could follow a failed opening):
// it is handed over as it came, the caller's to read, followed as any
// stream the call commits.
func (p *Policy) opening(resp *http.Response, lim limits) (*firstEvent, error) {
	body := resp.Body
	d, name := p.FirstEventTimeout, "Policy.FirstEventTimeout"
	if latest := lim.latest(); !latest.IsZero() {
		left := time.Until(latest)
		if left <= 0 {
			resp.Body = &streamBody{rc: body}
			return nil, nil
		}
		if d <= 0 || left < d {
			d, name = left, "the call's deadline less its reserve"
		}
	}
	var fired *atomic.Bool
	var timer *time.Timer
	if d > 0 {
		fired = new(atomic.Bool)
		timer = time.AfterFunc(d, func() {
			fired.Store(true)
			body.Close()
		})
	}
	read, ev, err := wire.ScanFirstEvent(body, openingLimit)
	if timer != nil && (!timer.Stop() || fired.Load()) {
		body.Close()
		return nil, &boundError{what: "no first event", name: name, d: d}
	}
	if err != nil {
		body.Close()
		return nil, err
	}
	resp.Body = &streamBody{win: read, rc: body} // replays what was read, then the rest; see handOver
	if ev.Failed() {
		failed := ev // only a failure's verdict goes to the heap
		return &failed, nil
	}
	return nil, nil
}

// handOver returns resp, the answer of cm's committed attempt, as the
// caller gets it. A stream the policy retries (a 2xx text/event-stream
// whose opening the guard read) is followed event by event (streamBody):
// a cut reads as an error, never a clean end, and with ContinueStreams it
// is continued as cm says. Another successful stream of events is under
// the policy's StreamIdleTimeout.
func handOver(resp *http.Response, cm commit) *http.Response {
	p := cm.p
	if b, ok := resp.Body.(*streamBody); ok {
		switch {
		case !cm.gaveUp:
			b.follow(resp, cm) // under StreamIdleTimeout as it follows
		case p.StreamIdleTimeout > 0:
			// Handed over as it is, the failure it opened with first:
			// the rest is bounded like any stream's.
			resp.Body = newIdleBody(b, p.StreamIdleTimeout)
		}
		return resp
	}
	if p.StreamIdleTimeout > 0 && isEventStream(resp) {
		resp.Body = newIdleBody(resp.Body, p.StreamIdleTimeout)
	}
	if p.RetryStreams && !cm.gaveUp && isEventStream(resp) && hasMediaType(resp.Header.Get("Content-Type"), wire.MediaEventStream) {
		resp.Body = &framesBody{rc: resp.Body, cm: cm}
	}
	return resp
}

// framesBody is a committed AWS event stream (Bedrock's) under a policy
// that retries streams: its bytes reach the caller as they come, and its
// framing is followed (wire.Frames) so that a read that fails, a stall
// past StreamIdleTimeout, or an end inside a message reads as an error
// wrapping ErrStreamCut, never a bare unexpected EOF. It is never
// continued; an end between two messages before the model's last one is
// not seen (that is the SDK's to tell: it reads the events).
type framesBody struct {
	rc io.ReadCloser
	fr wire.Frames
	cm commit
}

// Read reads the stream, following its framing.
func (b *framesBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.fr.Feed(p[:n])
	switch {
	case err == nil || err == io.EOF && !b.fr.Inside():
		return n, err
	case err == io.EOF:
		err = errEndedInMessage
	}
	if b.cm.p.ContinueStreams {
		err = fmt.Errorf("not continued: %s: %w", wire.StuckBedrock, err)
	}
	return n, b.cm.cut(err)
}

// Close closes the stream.
func (b *framesBody) Close() error { return b.rc.Close() }

// streamBody is a committed stream the caller reads, under a policy that
// retries streams. It hands the caller the provider's bytes, whole events
// at a time (an event's bytes wait until its blank line has come), and
// follows them (wire.Stream), so that a stream that ends before its
// completion marker, fails, or stalls past StreamIdleTimeout reads as an
// error wrapping ErrStreamCut. With ContinueStreams, an error event or a
// line that is not JSON is such a break too (and never reaches the
// caller), and a break is continued: the rest of the answer, asked for
// again (continue.go) and spliced (wire.Splicer), follows in the same
// body. Read is owned by one goroutine at a time; Close may come from
// another.
type streamBody struct {
	win []byte      // bytes read and not yet handed over; win[:rel] is ready
	rel int         // how much of win the caller may read
	out []byte      // spliced events ready for the caller, before win's; nil until a continuation
	fr  wire.Framer // frames win
	st  wire.Stream // follows what the caller receives
	sp  *wire.Splicer
	k   *resumer // how to continue; nil until the first cut, and without ContinueStreams
	cm  commit   // the call that committed the stream
	err error    // sticky: what Read returns once everything ready is read

	idle      time.Duration // StreamIdleTimeout; 0: none
	timer     *time.Timer
	idled     atomic.Bool // the idle bound passed
	closed    bool        // Close was called; guarded by mu
	explicit  bool        // an error event ended the stream, as the provider sent it (without ContinueStreams)
	following bool        // follow has set the body up; until then it replays its window, then rc
	mu        sync.Mutex  // guards rc, closed and cancel against Close and the idle timer
	rc        io.ReadCloser
	cancel    context.CancelFunc // ends the latest continuation's context (Close calls it); nil before one

	// (The small fields together: a followed stream's body, allocated
	// for every healthy stream, stays in its size class.)
}

// follow starts following b, resp's body, whose opening the guard read
// (the first bytes of its window), for the call cm. Before it, b only
// replays what was read, then the rest (a stream the caller gets without
// being followed: one a call gave up on).
func (b *streamBody) follow(resp *http.Response, cm commit) {
	b.following, b.cm, b.idle = true, cm, cm.p.StreamIdleTimeout
	b.st.Reset(wire.APIOf(cm.req.Method, cm.req.URL), cm.p.ContinueStreams) // its text is kept only to continue it
	if b.idle > 0 {
		b.timer = stoppedTimer(b.idleFired) // armed while a read waits (fill)
	}
	b.frame()
}

// stoppedTimer returns a timer that calls f, not armed yet: Reset arms it.
func stoppedTimer(f func()) *time.Timer {
	t := time.AfterFunc(time.Hour, f)
	t.Stop()
	return t
}

// idleFired is the idle bound passing: the body being read is closed,
// which ends the Read that waits on it.
func (b *streamBody) idleFired() {
	b.idled.Store(true)
	b.mu.Lock()
	rc := b.rc
	b.mu.Unlock()
	rc.Close()
}

// Read hands over what is ready, reading on when nothing is.
func (b *streamBody) Read(p []byte) (int, error) {
	if !b.following {
		// Not followed: what the guard read, then the rest, as it comes.
		if len(b.win) > 0 {
			n := copy(p, b.win)
			b.win = b.win[n:]
			return n, nil
		}
		return b.rc.Read(p)
	}
	for {
		if len(b.out) > 0 {
			n := copy(p, b.out)
			b.out = b.out[n:]
			return n, nil
		}
		if b.rel > 0 {
			n := copy(p, b.win[:b.rel])
			b.drop(n)
			b.rel -= n
			return n, nil
		}
		if b.err != nil {
			return 0, b.err
		}
		if len(p) == 0 {
			return 0, nil
		}
		b.fill()
	}
}

// drop removes the first n bytes of the window.
func (b *streamBody) drop(n int) {
	b.win = b.win[:copy(b.win, b.win[n:])]
	b.fr.Shift(n)
}

// fill reads once from the body being read, and frames what came.
func (b *streamBody) fill() {
	if len(b.win) == cap(b.win) {
		b.win = append(b.win, make([]byte, max(2048, cap(b.win)))...)[:len(b.win)]
	}
	b.mu.Lock()
	rc, closed := b.rc, b.closed
	b.mu.Unlock()
	if closed {
		b.err = errBodyClosed
		return
	}
	var n int
	var err error
	if b.idled.Load() {
		err = idleError(b.idle)
	} else {
		// The idle bound runs while this read waits, and only then: the
		// caller's pauses between reads are not the provider's silence.
		if b.timer != nil {
			b.timer.Reset(b.idle)
		}
		n, err = rc.Read(b.win[len(b.win):cap(b.win)])
		if b.timer != nil && !b.timer.Stop() && b.idled.Load() {
			err = idleError(b.idle)
		}
	}
	b.win = b.win[:len(b.win)+n]
	b.frame()
	if err != nil && b.err == nil {
		b.broke(err)
	}
}

// frame reads the window's complete events: each one the caller may have
// is made ready (the provider's own bytes, or, from a continuation, the
// splicer's), until one breaks the stream.
func (b *streamBody) frame() {
	for b.err == nil {
		start := b.fr.Start()
		ev, ok := b.fr.Next(b.win)
		if !ok {
			if b.sp == nil {
				b.rel = b.fr.Start() // and comments, lines of no event
			}
			break
		}
		if b.sp != nil {
			b.splice(ev)
			continue
		}
		switch b.st.Observe(ev.Type, ev.Data) {
		case wire.StepError:
			if !b.cm.p.ContinueStreams {
				b.explicit = true // an explicit end, handed on as sent
				break
			}
			b.rel = start
			b.broke(errStreamEvent)
			return
		case wire.StepMalformed:
			if b.cm.p.ContinueStreams {
				b.rel = start
				b.broke(errStreamMalformed)
				return
			}
		case wire.StepEnd:
			// The API's end of stream before its completion marker (Chat
			// Completions' [DONE] with no finish_reason): handed on, an
			// SDK would take the cut for a clean end.
			b.rel = start
			b.broke(errStreamEnded)
			return
		}
		b.rel = b.fr.Start()
	}
	if b.sp != nil {
		// A continuation's own bytes are never handed on: only what
		// the splicer made of them.
		b.drop(b.fr.Start())
	}
}

// splice hands on what the splicer makes of a continuation's event.
func (b *streamBody) splice(ev wire.Event) {
	out, step, err := b.sp.Next(b.out, ev.Type, ev.Data)
	b.out = out
	switch {
	case err != nil:
		b.err = b.k.cut(err, "")
	case step == wire.StepError:
		b.broke(errStreamEvent)
	case step == wire.StepMalformed:
		b.broke(errStreamMalformed)
	case step == wire.StepEnd:
		b.broke(errStreamEnded)
	}
}

// broke ends the stream read so far for cause: at its end, cleanly if its
// completion marker (or, without ContinueStreams, an error event) came; a
// cut otherwise, continued with ContinueStreams when it can be.
func (b *streamBody) broke(cause error) {
	if cause == io.EOF {
		// A stream of an API the Stream does not know has no marker to
		// miss: its end is the provider's.
		if b.st.Complete() || b.explicit || !b.st.Knows() {
			b.err = io.EOF
			return
		}
		cause = errStreamEnded
	}
	if !b.cm.p.ContinueStreams {
		b.err = b.cut(cause)
		return
	}
	if b.k == nil {
		b.k = b.cm.resumer()
	}
	b.stopIdle()
	// The continuation runs under a context of its own, which Close ends:
	// a caller that closes the body while it waits or opens stops it,
	// and nothing more is sent for a body nobody reads.
	ctx, cancel := context.WithCancel(b.cm.f.Context)
	b.mu.Lock()
	old, prev, closed := b.rc, b.cancel, b.closed
	b.cancel = cancel // Close, from now on, ends it
	b.mu.Unlock()
	old.Close()
	if prev != nil {
		prev() // the continuation before, whose body old was
	}
	if closed {
		cancel() // Close came before it was set
		b.err = errBodyClosed
		return
	}
	f := *b.cm.f
	f.Context = ctx
	b.k.f = &f
	resp, strategy, heldBack, err := b.k.continuation(&b.st, cause)
	if err != nil {
		if b.isClosed() {
			err = errBodyClosed // the caller's Close ended it
		}
		b.err = err
		return
	}
	b.mu.Lock()
	b.rc = resp.Body
	closed = b.closed
	b.mu.Unlock()
	if closed {
		resp.Body.Close()
		b.err = errBodyClosed
		return
	}
	// What is ready stays ready, ahead of the rest; the cut event's
	// bytes go; the continuation is framed afresh.
	b.out = append(b.out, b.win[:b.rel]...)
	b.win, b.rel, b.fr = b.win[:0], 0, wire.Framer{}
	if sb, ok := resp.Body.(*streamBody); ok {
		b.win, b.rc = append(b.win, sb.win...), sb.rc
	}
	b.sp = b.st.Splice(strategy, heldBack)
	b.idled.Store(false) // the bound, stopped, is armed by the continuation's reads
	b.frame()
}

// cut is the error of a stream that broke for cause and is not continued
// (ContinueStreams is off).
func (b *streamBody) cut(cause error) error { return b.cm.cut(cause) }

// cut returns the error the caller's read of cm's committed stream, broken
// for cause, fails with: an *Exhausted with ErrStreamCut for Reason.
func (cm commit) cut(cause error) error {
	return &Exhausted{Request: cm.req, Attempts: cm.n, Reason: ErrStreamCut, Err: cause, Routes: cm.taken, sent: cm.at}
}

// isClosed reports whether Close was called.
func (b *streamBody) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// stopIdle stops the idle bound.
func (b *streamBody) stopIdle() {
	if b.timer != nil {
		b.timer.Stop()
	}
}

// Close stops the idle bound, ends a continuation under way and closes
// the body being read.
func (b *streamBody) Close() error {
	b.stopIdle()
	b.mu.Lock()
	b.closed = true
	rc, cancel := b.rc, b.cancel
	b.mu.Unlock()
	if cancel != nil {
		cancel() // a continuation that waits or opens stops
	}
	return rc.Close()
}

// streamError is how a stream broke, for a cut's error, or that its body
// was read after Close.
type streamError string

func (e streamError) Error() string { return string(e) }

// The ways a stream breaks.
const (
	errStreamEnded     streamError = "the stream ended before its completion marker"
	errStreamEvent     streamError = "an error event came in place of the rest"
	errStreamMalformed streamError = "a data line that is not JSON came in place of the rest"
	errBodyClosed      streamError = "http: read on closed response body"
	errEndedInMessage  streamError = "the stream ended inside a message"
)

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

// idleBody is a committed stream under StreamIdleTimeout: when a read
// waits longer than d for a byte, the underlying body is closed and Read
// fails with a *boundError instead of ending cleanly.
type idleBody struct {
	rc    io.ReadCloser
	d     time.Duration
	timer *time.Timer
	idle  atomic.Bool // the bound passed; set before rc is closed
}

// newIdleBody watches rc for reads that wait longer than d.
func newIdleBody(rc io.ReadCloser, d time.Duration) *idleBody {
	b := &idleBody{rc: rc, d: d}
	b.timer = stoppedTimer(func() {
		b.idle.Store(true)
		rc.Close()
	})
	return b
}

// Read reads from the stream under the bound, which runs while the read
// waits and only then.
func (b *idleBody) Read(p []byte) (int, error) {
	if b.idle.Load() {
		return 0, idleError(b.d)
	}
	b.timer.Reset(b.d)
	n, err := b.rc.Read(p)
	if !b.timer.Stop() && b.idle.Load() {
		// The bound passed as the read waited: it has closed the body.
		return n, idleError(b.d)
	}
	return n, err
}

// Close stops the bound and closes the stream.
func (b *idleBody) Close() error {
	b.timer.Stop()
	return b.rc.Close()
}

// idleError is the error of a read that waited longer than d for a byte
// (Policy.StreamIdleTimeout).
func idleError(d time.Duration) error {
	return &boundError{what: "stream idle: no bytes", name: "Policy.StreamIdleTimeout", d: d}
}
