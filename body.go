package llmretry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// This file holds what the Transport does with bodies: the one copy of a
// request body that has no GetBody, the watch that tells a request body's
// own failure from the provider's, and the bounded reads of failed replies
// (the signal peek and the drain of a discarded body).

// maxPrealloc bounds the buffer allocated up front from a request's
// ContentLength; a longer body grows the buffer as it is read.
const maxPrealloc = 64 << 20

// drainLimit is how much of a discarded response body is read so that its
// connection can be reused (go-retryablehttp's own limit).
const drainLimit = 4 << 10

// hasBody reports whether req carries a body that can be read.
func hasBody(req *http.Request) bool {
	return req.Body != nil && req.Body != http.NoBody
}

// copyBody reads req's body into memory, once, for a request without
// GetBody, and closes it, once. The buffer is sized from ContentLength when
// it is known, so the copy is the only allocation of the body's size. The
// read honours ctx: when ctx ends, the body is closed, which unblocks a
// read that waits for data (a pipe, a network connection), and ctx's error
// is returned.
func copyBody(ctx context.Context, req *http.Request) ([]byte, error) {
	body := req.Body
	stop := context.AfterFunc(ctx, func() { body.Close() })
	buf, err := readAllSized(body, req.ContentLength)
	if stop() {
		body.Close() // not closed by the AfterFunc: closed here, once
	}
	if cerr := ctx.Err(); cerr != nil {
		return nil, fmt.Errorf("llmretry: reading request body: %w", cerr)
	}
	if err != nil {
		return nil, fmt.Errorf("llmretry: reading request body: %w", err)
	}
	return buf, nil
}

// readAllSized is io.ReadAll with the buffer allocated once from n, the
// expected length (0 or negative: unknown), up to maxPrealloc.
func readAllSized(r io.Reader, n int64) ([]byte, error) {
	if n <= 0 {
		return io.ReadAll(r)
	}
	buf := make([]byte, 0, min(n, maxPrealloc))
	for {
		if len(buf) == cap(buf) {
			// Full: a body of exactly n bytes ends here. Look for its
			// end without growing the buffer.
			var one [1]byte
			m, err := io.ReadFull(r, one[:])
			if m == 0 {
				if err == io.EOF || err == io.ErrUnexpectedEOF {
					err = nil
				}
				return buf, err
			}
			buf = append(buf, one[0]) // longer than announced: grow
		}
		m, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// replayBody returns a GetBody that replays buf.
func replayBody(buf []byte) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
}

// bodyFault reports what is wrong with a request body that an attempt
// failed on, from a fresh copy of it: GetBody's error, a read error, or a
// length other than the want the request announced (ContentLength; 0 or
// less: not checked). Such a fault is the request's own, not the
// provider's, and is never retried: net/http reports a short body as
// "ContentLength=10 with Body length 5", or, when its read of the
// connection it broke wins the race, as a closed connection, and a body
// that fails to read as the body's own error. It reads the body through
// io.WriterTo when it can (an in-memory body is counted, not copied), and
// is called only after a failed attempt.
func bodyFault(getBody func() (io.ReadCloser, error), want int64) error {
	body, err := getBody()
	if err != nil {
		return fmt.Errorf("llmretry: rewinding request body: %w", err)
	}
	if body == nil {
		body = http.NoBody
	}
	defer body.Close()
	var n byteCounter
	if _, err := io.Copy(&n, body); err != nil {
		return fmt.Errorf("llmretry: reading request body: %w", err)
	}
	if want > 0 && int64(n) != want {
		return fmt.Errorf("llmretry: request body of %d bytes, not its ContentLength %d", n, want)
	}
	return nil
}

// byteCounter counts what is written to it.
type byteCounter int64

func (c *byteCounter) Write(p []byte) (int, error) {
	*c += byteCounter(len(p))
	return len(p), nil
}

// peekBody reads up to n bytes of resp's body (fewer when ContentLength
// says so) and puts them back in front of the rest, so that whoever reads
// the body later reads all of it. With a non-zero until, the read stops at
// that instant if the body has not delivered the bytes by then: peekBody
// returns ok false, and the body, still readable from its first byte,
// hands over the bytes of the read in progress when they arrive. The read
// in progress runs on its own goroutine, which ends when the body delivers
// or is closed.
func peekBody(resp *http.Response, n int, until time.Time) (buf []byte, ok bool) {
	if resp.ContentLength >= 0 && resp.ContentLength < int64(n) {
		n = int(resp.ContentLength)
	}
	if n == 0 {
		return nil, true
	}
	buf = make([]byte, n)
	if until.IsZero() {
		m, _ := io.ReadFull(resp.Body, buf)
		buf = buf[:m]
		resp.Body = &peekedBody{Reader: io.MultiReader(bytes.NewReader(buf), resp.Body), Closer: resp.Body}
		return buf, true
	}
	d := time.Until(until)
	if d <= 0 {
		return nil, false
	}
	ahead := &readAhead{rc: resp.Body, buf: buf, done: make(chan struct{})}
	go ahead.fill()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ahead.done:
		buf = ahead.buf
		resp.Body = &peekedBody{Reader: io.MultiReader(bytes.NewReader(buf), ahead.rest()), Closer: resp.Body}
		return buf, true
	case <-timer.C:
		resp.Body = ahead
		return nil, false
	}
}

// peekedBody is a response body whose first bytes were read ahead.
type peekedBody struct {
	io.Reader
	io.Closer
}

// readAhead is a response body whose first bytes are being read on another
// goroutine: Read waits for that read, hands over its bytes, then reads on.
type readAhead struct {
	rc   io.ReadCloser
	buf  []byte        // written by fill until done is closed
	err  error         // fill's error, set before done is closed
	done chan struct{} // closed when fill returns
	off  int           // bytes of buf handed over; Read's own
}

// fill reads the look-ahead.
func (r *readAhead) fill() {
	m, err := io.ReadFull(r.rc, r.buf)
	r.buf = r.buf[:m]
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = nil // a short body: the reads after it say EOF themselves
	}
	r.err = err
	close(r.done)
}

// rest returns the reader of what follows the look-ahead: the read's
// error, if it failed, or the rest of the body.
func (r *readAhead) rest() io.Reader {
	if r.err != nil {
		return errReader{r.err}
	}
	return r.rc
}

// Read hands over the look-ahead, then the rest of the body.
func (r *readAhead) Read(p []byte) (int, error) {
	<-r.done
	if r.off < len(r.buf) {
		n := copy(p, r.buf[r.off:])
		r.off += n
		return n, nil
	}
	return r.rest().Read(p)
}

// Close closes the body; a read in progress then ends.
func (r *readAhead) Close() error { return r.rc.Close() }

// errReader is a reader that fails with err.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// discard drains up to drainLimit of a response body that is not returned,
// so that its connection can be reused, and closes it. With a non-zero
// until, the drain stops at that instant: the body is closed under it,
// which ends a read that waits (the connection is then not reused).
func discard(body io.ReadCloser, until time.Time) {
	if until.IsZero() {
		_, _ = io.Copy(io.Discard, io.LimitReader(body, drainLimit))
		body.Close()
		return
	}
	d := time.Until(until)
	if d <= 0 {
		body.Close()
		return
	}
	timer := time.AfterFunc(d, func() { body.Close() })
	_, _ = io.Copy(io.Discard, io.LimitReader(body, drainLimit))
	timer.Stop()
	body.Close()
}
