package llmretry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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

func TestRedactParams(t *testing.T) {
	cases := map[string]string{
		"no params":                             "no params",
		"a=1&key=K&b=2":                         "a=1&key=…&b=2",
		`"?API_KEY=K"`:                          `"?API_KEY=…"`,
		"access_token=T; sig=S, apikey=A)":      "access_token=…; sig=…, apikey=…)",
		"monkey=banana":                         "monkey=banana",
		"key=":                                  "key=",
		"x?key=K#frag":                          "x?key=…#frag",
		"token=abc token=def":                   "token=… token=…",
		"keys=1 api-key=secret client_secret=s": "keys=1 api-key=… client_secret=…",
		"GET https://b.s3.amazonaws.com/o?X-Amz-Credential=AKIA%2F1&X-Amz-Signature=abc: 403": "GET https://b.s3.amazonaws.com/o?X-Amz-Credential=…&X-Amz-Signature=… 403",
		"x-goog-signature=s subscription-key=k":                                               "x-goog-signature=… subscription-key=…",
	}
	for in, want := range cases {
		assert.Equal(t, want, redactParams(in), in)
	}
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
