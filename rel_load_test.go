package llmretry

// Load and lifetime: many concurrent retried requests through one
// Transport, no goroutine of its own per request, and a cancelled wait that
// ends at once. (No goroutine outliving its request is checked for every
// test by goleak in TestMain.)

import (
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
)

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
