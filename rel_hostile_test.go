package llmretry

// Hostile input: server waits that are huge, negative, malformed or
// dated; error bodies of a gigabyte; and credentials that must never reach
// an error string, a log line or an Attempt rendering.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Date layouts of the three HTTP-date forms (RFC 9110 §5.6.7): the
// preferred IMF-fixdate, the obsolete RFC 850 form and ANSI C's asctime.
const (
	dateRFC1123 = http.TimeFormat
	dateRFC850  = "Monday, 02-Jan-06 15:04:05 GMT"
	dateANSIC   = time.ANSIC
)

// hostileWait is one server-wait case: headers built from the current time.
type hostileWait struct {
	name   string
	header func(now time.Time) http.Header
}

// ra returns a case whose Retry-After values are vs.
func ra(name string, vs ...string) hostileWait {
	return hostileWait{name, func(time.Time) http.Header { return http.Header{"Retry-After": vs} }}
}

// raMs returns a case with Retry-After-Ms ms and, if given, Retry-After.
func raMs(name, ms string, retryAfter ...string) hostileWait {
	return hostileWait{name, func(time.Time) http.Header {
		h := http.Header{"Retry-After-Ms": {ms}}
		if len(retryAfter) > 0 {
			h["Retry-After"] = retryAfter
		}
		return h
	}}
}

// raDate returns a case whose Retry-After is now+d in layout.
func raDate(name, layout string, d time.Duration) hostileWait {
	return hostileWait{name, func(now time.Time) http.Header {
		return http.Header{"Retry-After": {now.Add(d).UTC().Format(layout)}}
	}}
}

// RetryAfter on its own: every hostile value either parses to a
// non-negative wait or is ignored (false), never an error or a panic.
func TestRetryAfterHostileValues(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	const none = time.Duration(-1) // not valid: the caller uses its own wait
	cases := []struct {
		hostileWait
		want time.Duration
	}{
		{ra("huge", "99999999999"), maxDuration},
		{ra("longest duration in seconds", "9223372036"), maxDuration},
		{ra("many digits", strings.Repeat("9", 400)), maxDuration},
		{ra("negative", "-5"), none},
		{ra("plus sign", "+1"), none},
		{ra("decimal 1.0", "1.0"), none},
		{ra("fraction 2.5", "2.5"), none},
		{ra("empty", ""), none},
		{ra("blank", "   "), none},
		{ra("comma-separated values", "5, 10"), none},
		{ra("space-separated values", "5 10"), none},
		{ra("two header lines: the first counts", "5", "10"), 5 * time.Second},
		{ra("garbage bytes", "\x00\xff\xfe\x7f"), none},
		{ra("control characters", "\r\n5"), 5 * time.Second}, // trimmed like any whitespace
		{ra("hex", "0x10"), none},
		{ra("exponent", "1e3"), none},
		{ra("non-ASCII digits", "١٢"), none},
		{ra("unit suffix", "5s"), none},
		{ra("leading zeros", "007"), 7 * time.Second},
		{ra("zero", "0"), 0},
		{ra("padded", " 20 "), 20 * time.Second},
		{raDate("date in the past", dateRFC1123, -time.Hour), 0},
		{ra("date in 3000", "Wed, 01 Jan 3000 00:00:00 GMT"), maxDuration},
		{ra("date before 1970", "Thu, 01 Jan 1900 00:00:00 GMT"), 0},
		{raDate("RFC 1123 date", dateRFC1123, 7*time.Second), 7 * time.Second},
		{raDate("RFC 850 date", dateRFC850, 8*time.Second), 8 * time.Second},
		{raDate("ANSI C date", dateANSIC, 9*time.Second), 9 * time.Second},
		{ra("date with a bad zone", "Sun, 01 Jun 2025 12:00:07 XYZ"), none},
		{ra("date with garbage after it", "Sun, 01 Jun 2025 12:00:07 GMT; x"), none},
		{raMs("ms", "1500"), 1500 * time.Millisecond},
		{raMs("ms fraction", "1.5"), 1500 * time.Microsecond},
		{raMs("ms leading dot", ".5"), 500 * time.Microsecond},
		{raMs("ms huge", "1"+strings.Repeat("0", 30)), maxDuration},
		{raMs("ms negative falls back to Retry-After", "-1", "3"), 3 * time.Second},
		{raMs("ms NaN", "NaN"), none},
		{raMs("ms Inf", "Inf"), none},
		{raMs("ms exponent", "1e3"), none},
		{raMs("ms two dots", "1.2.3"), none},
		{raMs("ms dot", "."), none},
		{raMs("ms garbage falls back to a date", "\xff", now.Add(4*time.Second).Format(dateRFC1123)), 4 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, ok := RetryAfter(c.header(now), now)
			if c.want == none {
				assert.False(t, ok, "ignored, got %v", d)
				assert.Zero(t, d)
				return
			}
			assert.True(t, ok)
			assert.Equal(t, c.want, d)
		})
	}
	d, ok := RetryAfter(nil, now)
	assert.False(t, ok, "no headers at all")
	assert.Zero(t, d)
}

// The same hostile values through the Transport, on the fake clock: the
// wait taken is exactly the larger of the schedule's (100 ms) and a valid
// server wait; malformed means the schedule's own wait; a wait above
// MaxRetryAfter, or one that breaks the deadline/reserve rule, returns the
// response at once. Nothing ever sleeps past MaxRetryAfter or the deadline
// minus the reserve.
func TestRetryAfterHostileThroughTransport(t *testing.T) {
	const (
		sched  = 100 * time.Millisecond
		at0nce = time.Duration(-1) // the 429 is returned without a retry
	)
	cases := []struct {
		hostileWait
		maxRetryAfter time.Duration // 0: the default, 5 minutes
		deadline      time.Duration // 0: none
		want          time.Duration
	}{
		{hostileWait: ra("huge", "99999999999"), want: at0nce},
		{hostileWait: ra("negative", "-5"), want: sched},
		{hostileWait: ra("plus sign", "+1"), want: sched},
		{hostileWait: ra("decimal 1.0", "1.0"), want: sched},
		{hostileWait: ra("fraction 2.5", "2.5"), want: sched},
		{hostileWait: ra("empty", ""), want: sched},
		{hostileWait: ra("comma-separated values", "5, 10"), want: sched},
		{hostileWait: ra("two header lines", "5", "10"), want: 5 * time.Second},
		{hostileWait: ra("garbage bytes", "\x00\xff\xfe"), want: sched},
		{hostileWait: raDate("date in the past", dateRFC1123, -time.Hour), want: sched},
		{hostileWait: ra("date in 3000", "Wed, 01 Jan 3000 00:00:00 GMT"), want: at0nce},
		{hostileWait: raDate("RFC 1123 date", dateRFC1123, 7*time.Second), want: 7 * time.Second},
		{hostileWait: raDate("RFC 850 date", dateRFC850, 8*time.Second), want: 8 * time.Second},
		{hostileWait: raDate("ANSI C date", dateANSIC, 9*time.Second), want: 9 * time.Second},
		{hostileWait: ra("exactly MaxRetryAfter", "300"), want: 5 * time.Minute},
		{hostileWait: ra("just above MaxRetryAfter", "301"), want: at0nce},
		{hostileWait: raDate("date just above MaxRetryAfter", dateRFC850, 301*time.Second), want: at0nce},
		{hostileWait: ra("at a low MaxRetryAfter", "10"), maxRetryAfter: 10 * time.Second, want: 10 * time.Second},
		{hostileWait: raMs("ms above a low MaxRetryAfter", "10000.001"), maxRetryAfter: 10 * time.Second, want: at0nce},
		{hostileWait: raMs("ms huge", "1"+strings.Repeat("0", 30)), want: at0nce},
		{hostileWait: raMs("ms fraction", "1234.5"), want: 1234500 * time.Microsecond},
		{hostileWait: raMs("ms NaN", "NaN"), want: sched},
		{hostileWait: ra("fits the deadline and reserve", "60"), deadline: 2 * time.Minute, want: time.Minute},
		{hostileWait: ra("breaks the deadline and reserve", "61"), deadline: 2 * time.Minute, want: at0nce},
		{hostileWait: raDate("dated past the deadline and reserve", dateANSIC, 61*time.Second), deadline: 2 * time.Minute, want: at0nce},
		{hostileWait: ra("huge under a deadline", "99999999999"), deadline: 2 * time.Minute, want: at0nce},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				if c.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, c.deadline)
					defer cancel()
				}
				start := time.Now()
				prov := newProvider(step{status: 429, header: c.header(start), body: "slow down"}, ok)
				var rec recorder
				rt := mustNew(t, prov.mock, Policy{Waits: []time.Duration{sched}, MaxRetryAfter: c.maxRetryAfter, Reserve: time.Minute, OnAttempt: rec.on})
				resp, err := post(t, rt, ctx)
				require.NoError(t, err)
				if c.want == at0nce {
					assert.Equal(t, 429, resp.StatusCode)
					assert.Equal(t, "slow down", bodyOf(t, resp))
					assert.Equal(t, 1, prov.attempts())
					assert.Zero(t, time.Since(start), "no wait at all")
					assert.Equal(t, []time.Duration{0}, rec.retryIns())
					return
				}
				assert.Equal(t, 200, resp.StatusCode)
				assert.Equal(t, `{"answer":42}`, bodyOf(t, resp))
				assert.Equal(t, []time.Duration{c.want}, prov.gaps(), "the exact wait")
				assert.Equal(t, c.want, time.Since(start))
				assert.Equal(t, []time.Duration{c.want, 0}, rec.retryIns(), "the record says the real wait")
				maxRA := c.maxRetryAfter
				if maxRA == 0 {
					maxRA = DefaultMaxRetryAfter
				}
				assert.LessOrEqual(t, c.want, max(sched, maxRA))
				if dl, ok := ctx.Deadline(); ok {
					assert.GreaterOrEqual(t, time.Until(dl), time.Minute, "the reserve is left")
				}
			})
		})
	}
}

// A provider that answers with a 1 GiB error body, generated as it is read
// (served from memory, never held), is retried and its last answer
// returned: the discarded bodies are read only up to the bound and closed,
// memory stays far below the body's size, and the caller still reads the
// final body from its first byte.
func TestHugeErrorBodyBoundedMemory(t *testing.T) {
	const size = 1 << 30
	var mu sync.Mutex
	var bodies []*lazyBody
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		_, _ = io.Copy(io.Discard, r.Body)
		b := &lazyBody{size: size}
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
		h := http.Header{"Content-Type": {"application/json"}}
		return &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: h, Body: b, ContentLength: size, Request: r}, nil
	})
	rt := mustNew(t, base, Policy{Waits: []time.Duration{time.Millisecond, time.Millisecond}})

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	resp, err := post(t, rt, context.Background())
	require.NoError(t, err)
	// The caller reads the first MiB of the final body, then gives up.
	head := make([]byte, 1<<20)
	_, err = io.ReadFull(resp.Body, head)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	runtime.ReadMemStats(&after)

	assert.Equal(t, 503, resp.StatusCode)
	assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
	want := make([]byte, len(head))
	fillPattern(want, 0)
	assert.True(t, bytes.Equal(want, head), "the final body reads from its first byte")
	require.Len(t, bodies, 3, "retried, then returned")
	for i, b := range bodies[:2] {
		n, closes := b.read()
		assert.LessOrEqual(t, n, int64(discardReadBound), "discarded body %d drained only up to the bound", i)
		assert.Equal(t, 1, closes, "discarded body %d closed", i)
	}
	n, closes := bodies[2].read()
	assert.Equal(t, int64(len(head)), n, "the final body: what the caller read and no more")
	assert.Equal(t, 1, closes)

	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d KiB; heap in use %d → %d KiB", allocated>>10, before.HeapInuse>>10, after.HeapInuse>>10)
	assert.Less(t, allocated, uint64(16<<20), "allocations far below the body's size")
	assert.Less(t, int64(after.HeapInuse)-int64(before.HeapInuse), int64(16<<20))
}

// IsStream scans a 64 MiB in-memory body whole, handed over without a copy
// and in constant memory: it allocates next to nothing and never touches
// req.Body.
func TestIsStreamBoundedOnHugeBody(t *testing.T) {
	body := bytes.Repeat([]byte(`{"role":"user","content":"lorem ipsum"},`), (64<<20)/40)
	body = append(append([]byte(`{"messages":[`), body...), `{}],"stream":true}`...)
	req, err := http.NewRequest(http.MethodPost, testURL, bytes.NewReader(body))
	require.NoError(t, err)
	req.Body = untouchable{t}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got := IsStream(req)
	runtime.ReadMemStats(&after)
	assert.True(t, got, "the SDKs' trailing \"stream\":true is found")
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<10), "at most a few KiB, whatever the body's size")
}

// untouchable is a request body that fails the test when used.
type untouchable struct{ t *testing.T }

func (u untouchable) Read([]byte) (int, error) {
	u.t.Error("req.Body was read")
	return 0, io.EOF
}

func (u untouchable) Close() error {
	u.t.Error("req.Body was closed")
	return nil
}

// canary is the secret every credential in the canary test carries.
const canary = "CANARY-5ec7e7"

// canaryRequest returns a request that carries credentials everywhere
// providers and proxies put them.
func canaryRequest(t *testing.T, ctx context.Context, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+canary+"-auth")
	req.Header.Set("X-Api-Key", canary+"-x-api-key")
	req.Header.Set("Api-Key", canary+"-api-key")
	req.Header.Set("X-Goog-Api-Key", canary+"-goog")
	req.Header.Set("Cookie", "session="+canary+"-cookie")
	req.Header.Set("Proxy-Authorization", "Basic "+canary+"-proxy")
	req.Header.Set("Content-Type", "application/json")
	return req
}

// canaryQuery is where Gemini's key travels, with user information too.
const canaryQuery = "/v1beta/models/gemini:generateContent?alt=json&key=" + canary + "-key&api_key=" + canary + "-k2"

// No credential (Authorization, x-api-key, api-key, x-goog-api-key, Cookie,
// Proxy-Authorization, the key= query value, the URL's password) appears in
// any text the package produces about a failure: the errors RoundTrip and
// Do return, Exhausted.Error, Attempt.String, the log lines of LogAttempts
// and the Question a Person is asked, through every way a request can fail.
func TestSecretsNeverInErrorsOrRecords(t *testing.T) {
	var (
		mu    sync.Mutex
		texts []string
	)
	keep := func(s string) {
		mu.Lock()
		texts = append(texts, s)
		mu.Unlock()
	}
	var logs syncBuffer
	loggers := []func(Attempt){
		LogAttempts(slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		LogAttempts(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
	}
	policy := func(p Policy) Policy {
		also := p.OnAttempt
		p.OnAttempt = func(a Attempt) {
			if also != nil {
				defer also(a)
			}
			keep(a.String())
			keep(fmt.Sprint(a))
			keep(fmt.Sprintf("%+v", a))
			for _, l := range loggers {
				l(a)
			}
		}
		if p.Waits == nil {
			p.Waits = []time.Duration{time.Millisecond, time.Millisecond}
		}
		return p
	}
	result := func(resp *http.Response, err error) {
		if err != nil {
			keep(err.Error())
			keep(fmt.Sprintf("%v", err))
			keep(fmt.Sprintf("%+v", err))
			var ex *Exhausted
			if errors.As(err, &ex) {
				keep(ex.Error())
			}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	send := func(base http.RoundTripper, p Policy, ctx context.Context, url string, body io.Reader) {
		t.Helper()
		result(mustNew(t, base, policy(p)).RoundTrip(canaryRequest(t, ctx, url, body)))
	}
	memURL := "https://user:" + canary + "-password@generativelanguage.example.test" + canaryQuery

	// In memory: statuses, then failed connections.
	send(newProvider(fail(503), fail(429, "Retry-After", "0"), refused).mock, Policy{}, context.Background(), memURL, strings.NewReader(`{}`))
	send(newProvider(fail(502), step{err: Permanent(errors.New("signer refused"))}).mock, Policy{}, context.Background(), memURL, strings.NewReader(`{}`))
	send(newProvider(fail(503)).mock, Policy{}, context.Background(), memURL, strings.NewReader(`{}`))
	// A base built on an http.Client (a nested client, a proxy library):
	// its errors quote the whole URL, query included.
	nested := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		inner := &http.Client{Transport: newProvider(step{err: &netOpError{syscall.ECONNRESET}}).mock}
		return inner.Do(r.Clone(r.Context()))
	})
	send(nested, Policy{}, context.Background(), memURL, strings.NewReader(`{}`))
	// The body cannot be replayed, or read at all.
	failingGetBody := canaryRequest(t, context.Background(), memURL, strings.NewReader(`{}`))
	failingGetBody.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("spool file gone") }
	result(mustNew(t, newProvider(fail(503)).mock, policy(Policy{})).RoundTrip(failingGetBody))
	send(newProvider(ok).mock, Policy{}, context.Background(), memURL, errBody{})
	// An invalid per-request policy, a cancelled wait, a spent deadline.
	send(newProvider(ok).mock, Policy{}, WithPolicy(context.Background(), Policy{MaxWait: -1}), memURL, nil)
	ctx, cancel := context.WithCancel(context.Background())
	send(newProvider(fail(503)).mock, Policy{Waits: []time.Duration{time.Hour}, OnAttempt: func(Attempt) { cancel() }}, ctx, memURL, nil)
	send(newProvider(fail(503)).mock, Policy{}, ctx, memURL, nil)
	short, cancelShort := context.WithTimeout(context.Background(), time.Second)
	defer cancelShort()
	send(newProvider(fail(503), ok).mock, Policy{}, short, memURL, nil)

	// Over loopback: a reset, a stall, a port nobody listens on.
	prov := newChaosProvider(t, script(faultReset, faultStall, faultPartialHeaders))
	send(chaosBase(t), Policy{}, context.Background(), strings.Replace(prov.srv.URL, "http://", "http://user:"+canary+"-password@", 1)+canaryQuery, strings.NewReader(`{}`))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedURL := "http://" + ln.Addr().String() + canaryQuery
	require.NoError(t, ln.Close())
	send(loopbackBase(t, 1), Policy{}, context.Background(), closedURL, nil)

	// A person asked whether to go on is shown the failure too.
	person := NewPerson()
	hostDone := make(chan struct{})
	var host sync.WaitGroup
	host.Add(1)
	go func() {
		defer host.Done()
		for {
			select {
			case q := <-person.Questions():
				keep(q.String())
				keep(q.Exhausted.Error())
				q.Answer(false)
			case <-hostDone:
				return
			}
		}
	}()
	send(nested, Policy{OnExhausted: person}, context.Background(), memURL, strings.NewReader(`{}`))
	send(newProvider(fail(503)).mock, Policy{OnExhausted: person}, context.Background(), memURL, strings.NewReader(`{}`))

	// Do, with a tool whose error quotes its URL as http.Client does.
	_, err = Do(context.Background(), policy(Policy{OnExhausted: person}), func(ctx context.Context) (int, error) {
		req := canaryRequest(t, ctx, memURL, nil)
		_, err := (&http.Client{Transport: newProvider(refused).mock}).Do(req)
		return 0, err
	})
	result(nil, err)
	close(hostDone)
	host.Wait()

	texts = append(texts, strings.Split(logs.String(), "\n")...)
	require.Greater(t, len(texts), 50, "the failures produced texts to check")
	for _, s := range texts {
		assert.NotContains(t, s, canary, "a credential leaked")
	}
}
