package llmretry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An attempt renders on one line, with what it sent, how it ended and what
// follows, and without credentials: the URL keeps its scheme, host and
// path (a query shows as "?…"), no header is shown, and an error's text
// is redacted.
func TestAttemptString(t *testing.T) {
	req, err := http.NewRequest(http.MethodPost, "https://user:PASSWORD@api.example.test/v1/chat?key=SECRET#frag", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer TOKEN")
	resp := &http.Response{StatusCode: 503, Status: "503 Service Unavailable"}
	failed := errors.New(`Post "https://api.example.test/v1/chat?key=SECRET": dial tcp: connection refused (Bearer TOKEN)`)
	const id = "00000000000000ff"
	cases := []struct {
		name string
		a    Attempt
		want string
	}{
		{"a status, retried", Attempt{ID: id, N: 1, Request: req, Response: resp, RetryIn: 2 * time.Second},
			"attempt 1 00000000000000ff POST https://api.example.test/v1/chat?…: 503 Service Unavailable (retry in 2s)"},
		{"an error, the last", Attempt{ID: id, N: 3, Request: req, Err: failed, Stop: ErrRetriesSpent},
			`attempt 3 00000000000000ff POST https://api.example.test/v1/chat?…: Post "https://api.example.test/v1/chat?…": dial tcp: connection refused (…) (stop: retries spent)`},
		{"a probe, held for a server wait", Attempt{ID: id, N: 2, Request: req, Response: resp, Probe: true, Held: true, RetryIn: time.Minute},
			"attempt 2 00000000000000ff POST https://api.example.test/v1/chat?…: 503 Service Unavailable [probe] (held: retry in 1m0s or later, when the provider is back)"},
		{"held", Attempt{ID: id, N: 2, Request: req, Response: resp, Held: true},
			"attempt 2 00000000000000ff POST https://api.example.test/v1/chat?…: 503 Service Unavailable (held: retry when the provider is back)"},
		{"Do's, without a request", Attempt{ID: id, N: 1, Err: errors.New("tool busy"), RetryIn: time.Second},
			"attempt 1 00000000000000ff: tool busy (retry in 1s)"},
		{"a success", Attempt{ID: id, N: 1, Request: req, Response: &http.Response{StatusCode: 200, Status: "200 OK"}},
			"attempt 1 00000000000000ff POST https://api.example.test/v1/chat?…: 200 OK"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.a.String()
			assert.Equal(t, c.want, got)
			for _, secret := range []string{"PASSWORD", "SECRET", "TOKEN", "user", "frag"} {
				assert.NotContains(t, got, secret)
			}
		})
	}
}

// Each attempt's ID is 16 random hex digits, its own.
func TestAttemptIDs(t *testing.T) {
	hex16 := regexp.MustCompile(`^[0-9a-f]{16}$`)
	seen := map[string]bool{}
	for range 1000 {
		id := newID()
		require.Regexp(t, hex16, id)
		seen[id] = true
	}
	assert.Len(t, seen, 1000, "no two alike")
}

// textLogger logs every level to buf as text.
func textLogger(buf *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// The record as a log: one line per attempt with the expected fields, and
// never a credential, wherever the canary was put.
func TestLogAttemptsNeverLogsCredentials(t *testing.T) {
	const canary = "CANARY-7f3a9c"
	synctest.Test(t, func(t *testing.T) {
		// The provider fails three ways, the last an error from a nested
		// client that quotes the whole URL, query and all.
		prov := testkit.NewProvider(
			testkit.Fail(503, "Set-Cookie", "session="+canary),
			testkit.Reply{Err: errors.New(`Post "https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?alt=sse&key=` + canary + `": connection reset; retry with api_key=` + canary + ` token=` + canary)},
			testkit.OK())
		var buf syncBuffer
		// alt=sse makes it a stream: RetryStreams lets it be retried.
		rt := mustNew(t, prov, Policy{Waits: []time.Duration{time.Second, 2 * time.Second}, RetryStreams: true, OnAttempt: LogAttempts(textLogger(&buf))})
		req, err := http.NewRequest(http.MethodPost, "https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?alt=sse&key="+canary, strings.NewReader(`{}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+canary)
		req.Header.Set("X-Api-Key", canary)
		req.Header.Set("Api-Key", canary)
		req.Header.Set("X-Goog-Api-Key", canary)
		req.Header.Set("Cookie", "session="+canary)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		bodyOf(t, resp)

		out := buf.String()
		assert.NotContains(t, out, canary)
		assert.NotContains(t, strings.ToLower(out), "authorization")
		assert.NotContains(t, strings.ToLower(out), "cookie")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 3, "one line per attempt")
		url := "url=https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?…"
		for i, want := range [][]string{
			{"level=WARN", `msg="llmretry attempt"`, "method=POST", url, "attempt=1", "status=503", "retry_in=1s"},
			{"level=WARN", "attempt=2", `error="Post \"https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?…\": connection reset; retry with api_key=… token=…"`, "retry_in=2s"},
			{"level=INFO", "method=POST", url, "attempt=3", "status=200"},
		} {
			for _, field := range want {
				assert.Contains(t, lines[i], field, "line %d", i+1)
			}
			assert.Regexp(t, `attempt_id=[0-9a-f]{16}\b`, lines[i])
		}
		assert.NotContains(t, lines[2], "retry_in", "no retry follows the last attempt")
		assert.NotContains(t, out, "stop=", "nothing stopped: the last attempt answered")
	})
}

// The attempt after which no retry follows says why.
func TestLogAttemptsSaysWhyItStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf syncBuffer
		prov := testkit.NewProvider(testkit.Fail(503))
		resp, err := post(t, mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}, OnAttempt: LogAttempts(textLogger(&buf))}), context.Background())
		require.NoError(t, err)
		resp.Body.Close()
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		require.Len(t, lines, 2)
		assert.NotContains(t, lines[0], "stop=")
		assert.Contains(t, lines[1], `stop="retries spent"`)
	})
}

// Do's attempts have no request: no method or url, the error still
// scrubbed; a disabled level builds nothing; a nil logger is slog.Default.
func TestLogAttemptsForDoAndLevels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf syncBuffer
		calls := 0
		_, err := Do(context.Background(), Policy{Waits: []time.Duration{time.Second}, OnAttempt: LogAttempts(textLogger(&buf))}, func(context.Context) (int, error) {
			calls++
			if calls == 1 {
				return 0, errors.New("fetch https://x.test/data?sig=SIG123&token=TOK456: 502")
			}
			return 1, nil
		})
		require.NoError(t, err)
		out := buf.String()
		assert.NotContains(t, out, "SIG123")
		assert.NotContains(t, out, "TOK456")
		// A value runs to a delimiter; the ":" after it goes too.
		assert.Contains(t, out, `error="fetch https://x.test/data?sig=…&token=… 502" retry_in=1s`)
		assert.Contains(t, out, "attempt=2")
		assert.NotContains(t, out, "method=")
		assert.NotContains(t, out, "url=")

		var quiet syncBuffer
		warnOnly := slog.New(slog.NewTextHandler(&quiet, &slog.HandlerOptions{Level: slog.LevelWarn}))
		log := LogAttempts(warnOnly)
		log(Attempt{ID: "0000000000000001", N: 1, Response: &http.Response{StatusCode: 200}})
		assert.Empty(t, quiet.String(), "a success is Info")
		log(Attempt{ID: "0000000000000002", N: 1, Response: &http.Response{StatusCode: 429}, RetryIn: time.Second})
		assert.Contains(t, quiet.String(), "status=429")
		quiet.Reset()
		log(Attempt{ID: "0000000000000003", N: 1, Response: &http.Response{StatusCode: 200}, Event: "overloaded_error", RetryIn: time.Second})
		assert.Contains(t, quiet.String(), "level=WARN", "a 200 whose stream opened with an error failed: Warn")
		assert.Contains(t, quiet.String(), "status=200 event=overloaded_error retry_in=1s")
	})
}

// A 200 stream retried because its first event was an error says so in
// its record: Attempt.Event, and Attempt.String.
func TestAttemptSaysWhyAStreamWasRetried(t *testing.T) {
	overloadedEvent := testkit.Reply{Status: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: testkit.AnthropicErrorEvent("overloaded_error", "Overloaded")}
	for _, tt := range []struct {
		name   string
		first  testkit.Reply
		status int
		event  string // the first attempt's Event
		says   string // in the first attempt's String; "" for nothing to check
	}{
		{"a 529 needs no event", testkit.AnthropicOverloaded(), 529, "", ""},
		{"a 200 that opens with an error event", overloadedEvent, 200, "overloaded_error", ": 200 OK (stream error overloaded_error) (retry in 1s)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(tt.first, testkit.AnthropicStream("Hi"))
				var rec recorder
				rt := mustNew(t, prov, Policy{RetryStreams: true, Waits: []time.Duration{time.Second}, OnAttempt: rec.on})
				resp, err := rt.RoundTrip(testkit.StainlessPost(t, testURL, `{"model":"m","stream":true}`))
				require.NoError(t, err)
				resp.Body.Close()
				require.Equal(t, 2, rec.count())
				first := rec.attempts[0]
				assert.Equal(t, tt.status, first.Response.StatusCode, "the provider's own status")
				assert.Equal(t, tt.event, first.Event)
				if tt.says != "" {
					assert.Contains(t, first.String(), tt.says)
				}
				assert.Empty(t, rec.attempts[1].Event)
			})
		})
	}
	// Retries spent on streams that open with an error event: the record
	// GaveUp finds on the response says which.
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(overloadedEvent, overloadedEvent)
		rt := mustNew(t, prov, Policy{RetryStreams: true, Waits: []time.Duration{time.Second}})
		resp, err := rt.RoundTrip(testkit.StainlessPost(t, testURL, `{"model":"m","stream":true}`))
		ex := gaveUp(t, resp, err)
		assert.Equal(t, "overloaded_error", ex.Event)
		assert.Equal(t, "llmretry: gave up after 2 attempts, retries spent: 200 OK (stream error overloaded_error)", ex.Error())
	})
}

func TestLogAttemptsNilLoggerIsDefault(t *testing.T) {
	var buf syncBuffer
	old := slog.Default()
	slog.SetDefault(textLogger(&buf))
	t.Cleanup(func() { slog.SetDefault(old) })
	LogAttempts(nil)(Attempt{ID: "00000000000000ff", N: 4, Err: errors.New("refused")})
	assert.Contains(t, buf.String(), `attempt_id=00000000000000ff attempt=4 error=refused`)
}

// Redact blanks every credential of the request a text may quote: the
// query, URL user information, credential headers' values (and a Bearer
// token alone), and any credential-like name=value, request or not.
func TestRedact(t *testing.T) {
	req, _ := http.NewRequest(http.MethodPost, "https://alice:s3cret@api.example.test/v1?key=AIzaKEY&x=1", nil)
	req.Header.Set("Authorization", "Bearer sk-TOKEN-1234")
	req.Header.Set("X-Api-Key", "ant-KEY-5678")
	text := `Post "https://alice:s3cret@api.example.test/v1?key=AIzaKEY&x=1": sent Bearer sk-TOKEN-1234 then sk-TOKEN-1234 and ant-KEY-5678`
	got := Redact(text, req)
	for _, secret := range []string{"s3cret", "alice", "AIzaKEY", "sk-TOKEN-1234", "ant-KEY-5678"} {
		assert.NotContains(t, got, secret)
	}
	assert.Contains(t, got, "api.example.test/v1?…")
	assert.Equal(t, "retry with token=… later", Redact("retry with token=abc123 later", nil))
	assert.Equal(t, "nothing to hide", Redact("nothing to hide", req))
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
	send(testkit.NewProvider(testkit.Fail(503), testkit.Fail(429, "Retry-After", "0"), testkit.Refused()), Policy{}, context.Background(), memURL, strings.NewReader(`{}`))
	send(testkit.NewProvider(testkit.Fail(502), testkit.Reply{Err: Permanent(errors.New("signer refused"))}), Policy{}, context.Background(), memURL, strings.NewReader(`{}`))
	send(testkit.NewProvider(testkit.Fail(503)), Policy{}, context.Background(), memURL, strings.NewReader(`{}`))
	// A base built on an http.Client (a nested client, a proxy library):
	// its errors quote the whole URL, query included.
	nested := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		inner := &http.Client{Transport: testkit.NewProvider(testkit.Reply{Err: &netOpError{syscall.ECONNRESET}})}
		return inner.Do(r.Clone(r.Context()))
	})
	send(nested, Policy{}, context.Background(), memURL, strings.NewReader(`{}`))
	// The body cannot be replayed, or read at all.
	failingGetBody := canaryRequest(t, context.Background(), memURL, strings.NewReader(`{}`))
	failingGetBody.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("spool file gone") }
	result(mustNew(t, testkit.NewProvider(testkit.Fail(503)), policy(Policy{})).RoundTrip(failingGetBody))
	send(testkit.NewProvider(testkit.OK()), Policy{}, context.Background(), memURL, errBody{})
	// An invalid per-request policy, a cancelled wait, a spent deadline.
	send(testkit.NewProvider(testkit.OK()), Policy{}, WithPolicy(context.Background(), Policy{MaxWait: -1}), memURL, nil)
	ctx, cancel := context.WithCancel(context.Background())
	send(testkit.NewProvider(testkit.Fail(503)), Policy{Waits: []time.Duration{time.Hour}, OnAttempt: func(Attempt) { cancel() }}, ctx, memURL, nil)
	send(testkit.NewProvider(testkit.Fail(503)), Policy{}, ctx, memURL, nil)
	short, cancelShort := context.WithTimeout(context.Background(), time.Second)
	defer cancelShort()
	send(testkit.NewProvider(testkit.Fail(503), testkit.OK()), Policy{}, short, memURL, nil)

	// Over loopback: a reset, a stall, a port nobody listens on.
	prov := newChaosProvider(t, script(faultReset, faultStall, faultPartialHeaders))
	send(chaosBase(t), Policy{}, context.Background(), strings.Replace(prov.srv.URL, "http://", "http://user:"+canary+"-password@", 1)+canaryQuery, strings.NewReader(`{}`))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedURL := "http://" + ln.Addr().String() + canaryQuery
	require.NoError(t, ln.Close())
	send(loopbackBase(t, 1), Policy{}, context.Background(), closedURL, nil)

	// A person asked whether to go on is shown the failure too.
	person := new(Person)
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
	send(nested, Policy{OnExhausted: person.Ask}, context.Background(), memURL, strings.NewReader(`{}`))
	send(testkit.NewProvider(testkit.Fail(503)), Policy{OnExhausted: person.Ask}, context.Background(), memURL, strings.NewReader(`{}`))

	// Do, with a tool whose error quotes its URL as http.Client does.
	_, err = Do(context.Background(), policy(Policy{OnExhausted: person.Ask}), func(ctx context.Context) (int, error) {
		req := canaryRequest(t, ctx, memURL, nil)
		_, err := (&http.Client{Transport: testkit.NewProvider(testkit.Refused())}).Do(req)
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

// A credential header the caller set directly in the map, in a spelling
// that is not canonical, is blanked like any other: a base error quoting
// it reaches neither Attempt.String nor the Exhausted error.
func TestSecretsInANonCanonicalHeaderNeverInErrorsOrRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			closeBody(r)
			//lint:ignore SA1008 the caller set this name, not canonical, on purpose
			return nil, fmt.Errorf("gateway refused key %s: connection reset", r.Header["x-api-key"])
		})
		var rec recorder
		req, err := http.NewRequest(http.MethodPost, testURL, strings.NewReader(`{"model":"m"}`))
		require.NoError(t, err)
		req.Header["x-api-key"] = []string{"sk-direct-secret"}
		_, err = mustNew(t, base, Policy{Waits: []time.Duration{time.Second}, OnAttempt: rec.on}).RoundTrip(req)
		require.Error(t, err)
		assert.NotContains(t, err.Error(), "sk-direct-secret")
		assert.NotContains(t, rec.last().String(), "sk-direct-secret")
	})
}
