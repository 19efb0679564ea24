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
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
