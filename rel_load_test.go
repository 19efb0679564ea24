package llmretry

// Load and lifetime: many concurrent retried requests through one
// Transport, no goroutine of its own per request, and a cancelled wait that
// ends at once. (No goroutine outliving its request is checked for every
// test by goleak in TestMain.)

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// failOnceBase answers each request (told apart by X-Req-ID) with a 503 on
// its first attempt and with its own ID on the second, in memory. It
// samples the number of goroutines at every attempt.
type failOnceBase struct {
	seen     sync.Map // X-Req-ID → *atomic.Int32
	attempts atomic.Int64
	peak     atomic.Int64
}

func (b *failOnceBase) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	b.attempts.Add(1)
	for g := int64(runtime.NumGoroutine()); ; {
		p := b.peak.Load()
		if g <= p || b.peak.CompareAndSwap(p, g) {
			break
		}
	}
	id := r.Header.Get("X-Req-ID")
	v, _ := b.seen.LoadOrStore(id, new(atomic.Int32))
	resp := &http.Response{Header: http.Header{}, Request: r}
	if v.(*atomic.Int32).Add(1) == 1 {
		resp.StatusCode, resp.Status = 503, "503 Service Unavailable"
		resp.Body = io.NopCloser(strings.NewReader(`{"error":{"message":"overloaded"}}`))
	} else {
		resp.StatusCode, resp.Status = 200, "200 OK"
		resp.Body = io.NopCloser(strings.NewReader(id))
	}
	return resp, nil
}

// 1,000 requests at once through one Transport, each failing once and
// retried: all complete with their own answer, and the Transport adds no
// goroutine per request (the peak stays at the callers' own goroutines
// plus a small constant).
func TestThousandConcurrentRetriedRequests(t *testing.T) {
	const n = 1000
	base := &failOnceBase{}
	var recorded atomic.Int64
	rt := mustNew(t, base, Policy{
		Waits:     []time.Duration{time.Millisecond},
		OnAttempt: func(Attempt) { recorded.Add(1) },
	})
	before := runtime.NumGoroutine()

	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			id := fmt.Sprint(i)
			req, err := http.NewRequest(http.MethodPost, testURL, strings.NewReader(`{"model":"m"}`))
			if err != nil {
				errs <- err
				return
			}
			req.Header.Set("X-Req-ID", id)
			resp, err := rt.RoundTrip(req)
			if err != nil {
				errs <- err
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || string(b) != id {
				errs <- fmt.Errorf("request %s: %d %q %v", id, resp.StatusCode, b, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	assert.Equal(t, int64(2*n), base.attempts.Load(), "each request: one failure, one answer")
	assert.Equal(t, int64(2*n), recorded.Load(), "each attempt recorded once")
	peak := base.peak.Load()
	t.Logf("goroutines: %d before, peak %d with %d requests in flight", before, peak, n)
	assert.LessOrEqual(t, peak, int64(before+n+16), "no goroutine per request beyond the caller's own")
}

// Cancelling the request's context during a 4-minute wait returns at once
// (real clock), with the context's error, and sends nothing more.
func TestCancelDuringLongWaitReturnsPromptly(t *testing.T) {
	base := &failOnceBase{}
	waiting := make(chan struct{})
	rt := mustNew(t, base, Policy{
		Waits: []time.Duration{4 * time.Minute},
		OnAttempt: func(a Attempt) {
			if a.RetryIn == 4*time.Minute {
				close(waiting)
			}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		resp *http.Response
		err  error
		at   time.Time
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, testURL, strings.NewReader(`{"model":"m"}`))
	require.NoError(t, err)
	done := make(chan result, 1)
	go func() {
		resp, err := rt.RoundTrip(req)
		done <- result{resp, err, time.Now()}
	}()
	<-waiting // the first attempt failed; the 4-minute wait is starting
	waitBlockedIn(t, "go-retryablehttp.(*Client).Do")
	cancelled := time.Now()
	cancel()
	r := <-done
	took := r.at.Sub(cancelled)
	bound := timeBound(10*time.Millisecond, 500*time.Millisecond)
	t.Logf("returned %v after the cancel", took)
	assert.Less(t, took, bound, "returned within %v of the cancel", bound)
	assert.Nil(t, r.resp)
	require.ErrorIs(t, r.err, context.Canceled)
	var ex *Exhausted
	require.ErrorAs(t, r.err, &ex)
	assert.Equal(t, 1, ex.Attempts)
	assert.Equal(t, int64(1), base.attempts.Load(), "no attempt after the cancel")
}

// waitBlockedIn returns once a goroutine is blocked in a select in the
// function named frame (a fragment of its name in a stack trace): then a
// timed wait there has really begun. It fails the test after 10 s.
func waitBlockedIn(t *testing.T, frame string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for give := time.Now().Add(10 * time.Second); time.Now().Before(give); runtime.Gosched() {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			if strings.Contains(g, " [select") && strings.Contains(g, frame) {
				return
			}
		}
	}
	t.Fatalf("no goroutine blocked in %s", frame)
}
